"""``--executor slurm`` without a cluster: what ``sinfo`` and ``sacct`` print, read (a partition's state, nodes and
MaxTime checked); what a job asks for; a refused submission leaves nothing; the wait (collects results as jobs
finish, says where the jobs stand, warns of a long PENDING, ends a job nothing knows, names a controller or
accounting that does not answer) on a fake clock; cancelling every state (a COMPLETING copy waited for); a job's
torch threads, its reaction to ``scancel``, its checkpoint at the signal and its requeue budget; the failures'
logs kept. The same on a real SLURM: ``tests/slurm``."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest

from dmllab.experiments import Run
from dmllab.pipeline import slurm, slurm_queue
from dmllab.pipeline.jobs import JobResult
from dmllab.pipeline.slurm import SlurmExecutor, SlurmOptions, TrainJob, resources
from dmllab.pipeline.slurm_queue import Partition, Watch, partition
from dmllab.training import presets

SMOKE = Run(presets.get("proxynca++", "synthetic", "smoke"), 0)
PAPER = Run(SMOKE.config.replace("profile", "paper"), 0)
SINFO = "gpu|32|gpu:a100:4(S:0-1)\ngpu|16|gpu:2\ncpu*|8|(null)\ncpu*|4|(null)\n"


def test_array_ranges_and_gres_fields_are_read():
    assert slurm_queue._expand("12_[1-3,5%2]") == ["12_1", "12_2", "12_3", "12_5"]
    assert slurm_queue._expand("12_4") == ["12_4"] and slurm_queue._expand("12") == ["12"]
    assert slurm_queue._gpus("gpu:a100:2(S:0-1),gpu:v100:2") == 4
    assert slurm_queue._gpus("gpu:4") == 4 and slurm_queue._gpus("(null)") == 0
    assert slurm_queue._gpus("shard:8,gpu:1") == 1


@pytest.fixture
def sinfo(monkeypatch):
    monkeypatch.setattr(slurm_queue, "slurm", lambda argv, **kw: SINFO)


def test_a_partition_is_its_largest_node_and_an_unknown_one_is_named(sinfo):
    assert partition(None) == Partition("cpu", 8, 0)  # the default partition (sinfo's *)
    assert partition("gpu") == Partition("gpu", 32, 4)
    with pytest.raises(ValueError, match=r"SLURM partition 'nope' does not exist \(sinfo lists: cpu, gpu\)"):
        partition("nope")


def test_a_job_asks_for_a_gpu_only_where_its_profile_needs_one_or_it_is_asked(sinfo):
    cpu, gpu = partition("cpu"), partition("gpu")
    assert resources(SlurmOptions(), [SMOKE], cpu) == (0, 1)  # a CPU run: one thread, one CPU
    assert resources(SlurmOptions(), [PAPER], gpu) == (1, 10)
    assert resources(SlurmOptions(), [PAPER], Partition("small", 4, 1)) == (1, 4)  # at most a node's CPUs
    assert resources(SlurmOptions(gpus_per_job=2, cpus_per_job=32), [SMOKE], gpu) == (2, 32)
    assert resources(SlurmOptions(gpus_per_job=0), [PAPER], cpu) == (0, 1)
    with pytest.raises(ValueError, match="the paper profile's jobs ask for 1 GPU"):
        resources(SlurmOptions(), [PAPER], cpu)
    with pytest.raises(ValueError, match="--gpus-per-job 8, but no node of partition 'gpu' has more than 4"):
        resources(SlurmOptions(gpus_per_job=8), [SMOKE], gpu)
    with pytest.raises(ValueError, match="--cpus-per-job 10: no node .* more than 8 CPUs .* stay PENDING"):
        resources(SlurmOptions(cpus_per_job=10), [SMOKE], cpu)


def test_options_no_job_can_run_with_are_refused():
    SlurmOptions(time_min=slurm.MIN_TIME_MIN).check()
    with pytest.raises(
        ValueError, match=f"--time-min 19 is too short.*--time-min {slurm.MIN_TIME_MIN} or more"
    ):
        SlurmOptions(time_min=19).check()
    # below 2 x 10 min, submitit's time-out test min(0.8 T, T - 10 min) covers more than half of a job
    assert (
        min(0.8 * slurm.MIN_TIME_MIN, slurm.MIN_TIME_MIN - slurm.TIMEOUT_MARGIN_MIN) == slurm.MIN_TIME_MIN / 2
    )
    for bad in ({"cpus_per_job": 0}, {"gpus_per_job": -1}, {"array_parallelism": 0}):
        with pytest.raises(ValueError, match="must be at least"):
            SlurmOptions(**bad).check()


def _script(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_a_refused_submission_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """sbatch refusing the array (here: an unknown GRES) leaves no pickle, script or folder behind."""
    pytest.importorskip("submitit")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir, "sinfo", f"printf '{SINFO}'")
    _script(bin_dir, "srun", "exit 0")
    _script(
        bin_dir, "sbatch", "echo 'sbatch: error: Invalid generic resource (gres) specification' >&2; exit 1"
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "results"))
    runs = [Run(SMOKE.config, seed) for seed in range(4)]
    with pytest.raises(
        ValueError, match=r"SLURM refused the jobs \(partition cpu, .*Invalid generic resource"
    ):
        SlurmExecutor(progress=False).submit(runs)
    assert not (tmp_path / "results").exists() or list((tmp_path / "results").rglob("*")) == []


# ------------------------------------------------------------------------------------ the wait, on a fake clock


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class FakeFile:
    def __init__(self, exists: callable) -> None:
        self.exists = exists

    def __str__(self) -> str:
        return "job.log"


class FakeJob:
    """A job whose result file appears at ``result_at`` (None: never)."""

    def __init__(self, job_id: str, clock: Clock, result_at: float | None) -> None:
        self.job_id = job_id
        self.paths = type("Paths", (), {})()
        self.paths.result_pickle = FakeFile(lambda: result_at is not None and clock.now >= result_at)
        self.paths.stderr = FakeFile(lambda: True)

    def result(self) -> JobResult:
        return JobResult(self.job_id, "ok", 1.0)


def test_the_wait_collects_results_as_jobs_finish_and_ends_every_job(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(slurm_queue, "time", clock)
    jobs = [
        FakeJob("1_0", clock, result_at=900.0),  # PENDING (Resources) until 800, then RUNNING
        FakeJob("1_1", clock, result_at=5.0),  # finishes first
        FakeJob("1_2", clock, result_at=None),  # cancelled while PENDING: neither squeue nor sacct knows it
        FakeJob("1_3", clock, result_at=None),  # cancelled while RUNNING: ended CANCELLED, no result
        FakeJob("1_4", clock, result_at=700.0),  # PENDING behind the study's own array limit
        FakeJob("1_5", clock, result_at=None),  # out of time
    ]

    def states(ids):
        table = {
            "1_0": ("PENDING", "Resources") if clock.now < 800 else ("RUNNING", "None"),
            "1_1": ("RUNNING", "None"),
            "1_3": ("CANCELLED", "") if clock.now > 30 else ("RUNNING", "None"),
            "1_4": ("PENDING", "JobArrayTaskLimit"),
            "1_5": ("TIMEOUT", ""),
        }
        return slurm_queue.Snapshot({i: table[i] for i in ids if i in table})

    said, order = [], []
    watch = Watch(
        jobs,
        [j.job_id for j in jobs],
        states,
        say=said.append,
        done=lambda r: order.append((r.name, round(clock.now))),
        status_every_s=60,
        pending_warn_s=600,
        vanished_s=60,
    )
    results = watch.run()
    assert [r.status for r in results] == ["ok", "ok", "FAILED", "FAILED", "ok", "FAILED"]
    assert [name for name, _ in order] == ["1_1", "1_5", "1_2", "1_3", "1_4", "1_0"]  # as they finish
    assert results[5].error.endswith(
        "ended TIMEOUT without a result (its time limit came before submitit could "
        "requeue it: give a longer --time-min)"
    )
    at = dict(order)
    assert at["1_1"] <= 6 and 60 <= at["1_2"] <= 60 + slurm_queue.MAX_QUERY_S
    assert (
        30 + slurm_queue.RESULT_GRACE_S
        <= at["1_3"]
        <= 30 + slurm_queue.RESULT_GRACE_S + slurm_queue.MAX_QUERY_S
    )
    assert "SLURM job 1_2 known neither to squeue nor to sacct" in results[2].error
    assert (
        results[3].error == "SLURM job 1_3 ended CANCELLED without a result"
        and results[3].output == "job.log"
    )
    status = [s for s in said if s.startswith("slurm: after")]
    assert len(status) >= 900 // 60 - 1  # at least every minute
    assert "1 PENDING (Resources)" in status[-3]
    warnings = [s for s in said if "WARNING" in s]
    assert len(warnings) == 1 and "1_0 (Resources)" in warnings[0] and "10 min" in warnings[0]


# ------------------------------------------------------------------------------------------------ the job


@pytest.fixture
def restore_threads(monkeypatch):
    import torch

    threads = torch.get_num_threads()
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # restored afterwards; no user limit meanwhile
        monkeypatch.delenv(key, raising=False)
    previous = signal.getsignal(signal.SIGTERM)
    yield
    torch.set_num_threads(threads)
    signal.signal(signal.SIGTERM, previous)
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # set by the job; a user value comes back
        os.environ.pop(key, None)


@pytest.mark.parametrize("device, threads", [("cpu", 1), ("cuda", 3)])
def test_a_job_trains_on_its_cpus_and_stops_when_cancelled(device, threads, monkeypatch, restore_threads):
    """A CPU run on one thread as a local worker (its numbers depend on the thread count), a GPU run on the job's
    CPUs; a SIGTERM of a cancelled job stops the run, any other goes to submitit's handler."""
    import torch

    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    seen = []

    def train(run):
        seen.append(torch.get_num_threads())
        os.kill(os.getpid(), signal.SIGTERM)
        return JobResult(run.key, "ok", 0.0)

    monkeypatch.setattr(slurm, "train_run", train)
    bypassed = []
    signal.signal(signal.SIGTERM, lambda *a: bypassed.append(a[0]))  # submitit's bypass
    run = Run(SMOKE.config.replace("run.device", device), 0)
    monkeypatch.setattr(slurm, "_cancelled", lambda job_id: False)
    assert TrainJob()(run).status == "ok" and bypassed == [signal.SIGTERM]
    monkeypatch.setattr(slurm, "_cancelled", lambda job_id: job_id == "7")
    with pytest.raises(slurm.JobCancelled, match="SLURM job 7 was cancelled"):
        TrainJob()(run)
    assert seen == [threads, threads]


def _fake_slurm(clock: Clock, calls: list, queue) -> callable:
    """A ``slurm`` whose ``squeue`` prints ``queue(now)`` and whose ``scancel`` is recorded."""

    def run(argv, **kw):
        calls.append((round(clock.now), argv[0]))
        return queue(clock.now) if argv[0] == "squeue" else ""

    return run


def test_copies_left_after_the_results_are_cancelled_by_the_studys_job_name(monkeypatch):
    """A requeued copy (PENDING) is cancelled at once; jobs that are all still RUNNING (a result just written)
    get the settling time to end by themselves first."""
    clock = Clock()
    monkeypatch.setattr(slurm_queue, "time", clock)
    calls = []
    monkeypatch.setattr(
        slurm_queue,
        "slurm",
        _fake_slurm(clock, calls, lambda now: "" if now else "1_2|PENDING\n1_3|RUNNING\n"),
    )
    assert slurm_queue.cancel_named("dmllab-x", settle_s=15) == ["1_2", "1_3"]
    assert calls[:2] == [(0, "squeue"), (0, "scancel")] and calls[2:] == [(1, "squeue")]
    calls.clear()
    monkeypatch.setattr(
        slurm_queue, "slurm", _fake_slurm(clock, calls, lambda now: "1_3|RUNNING\n" if now < 3 else "")
    )
    assert slurm_queue.cancel_named("dmllab-x", settle_s=15) == [] and {c[1] for c in calls} == {"squeue"}
    clock.now = 0.0
    calls.clear()
    monkeypatch.setattr(
        slurm_queue, "slurm", _fake_slurm(clock, calls, lambda now: "1_3|RUNNING\n" if now < 16 else "")
    )
    assert slurm_queue.cancel_named("dmllab-x", settle_s=15) == ["1_3"]
    assert (15, "scancel") in calls


def test_a_completing_copy_is_cancelled_when_it_comes_back_requeued(monkeypatch):
    """A job COMPLETING mid-requeue cannot be cancelled yet: the study waits, and cancels the PENDING copy it
    becomes; a job that never leaves the queue is named after the wait."""
    clock = Clock()
    monkeypatch.setattr(slurm_queue, "time", clock)
    calls, said = [], []

    def queue(now):
        if now < 5:
            return "1_0|COMPLETING\n"
        scancels = [t for t, what in calls if what == "scancel"]
        return "" if scancels else "1_0|PENDING\n"  # the requeued copy, until it is cancelled

    monkeypatch.setattr(slurm_queue, "slurm", _fake_slurm(clock, calls, queue))
    assert slurm_queue.cancel_named("dmllab-x", say=said.append) == ["1_0"]
    assert [t for t, what in calls if what == "scancel"] == [5]  # not while COMPLETING, at once when PENDING
    assert said == ["slurm: waiting for 1 COMPLETING job(s) to end, to cancel any copy they requeue"]
    clock.now = 0.0
    monkeypatch.setattr(slurm_queue, "slurm", _fake_slurm(clock, [], lambda now: "1_0|PENDING\n"))
    with pytest.raises(ValueError, match=r"jobs of dmllab-x still there 60 s after scancel: 1_0 \(PENDING\)"):
        slurm_queue.cancel_named("dmllab-x", say=said.append)


def test_a_partition_that_cannot_start_a_job_is_refused_before_submitting(monkeypatch):
    """Its state, its nodes' states and its MaxTime, from sinfo (``%P|%c|%G|%a|%l|%N|%t``)."""
    assert [slurm_queue._minutes(t) for t in ("infinite", "30:00", "2:00:00", "1-12:00:00", "45")] == [
        None,
        30,
        120,
        2160,
        45,
    ]
    lines = (
        "short|8|(null)|up|30:00|n1|idle\n"
        "tiny|8|(null)|up|5:00|n1|idle\n"
        "off*|8|(null)|down|infinite|n1|idle\n"
        "sick|8|(null)|up|infinite|n2|down*\nsick|4|(null)|up|infinite|n3|drain\n"
        "slow|4|(null)|up|infinite|n5|idle*\n"
        "mixed|16|(null)|up|infinite|n2|down*\nmixed|4|(null)|up|infinite|n4|mix\n"
    )
    monkeypatch.setattr(slurm_queue, "slurm", lambda argv, **kw: lines)
    assert partition("short") == Partition("short", 8, 0, "up", 30)
    assert partition("slow") == Partition("slow", 4, 0)  # not responding for now: it may answer again
    assert partition("mixed") == Partition("mixed", 4, 0, "up", None, ("n2 (down*)",))  # the usable node's
    o = SlurmOptions(time_min=20)
    slurm.fits(o, partition("short"))
    with pytest.raises(
        ValueError,
        match=r"--time-min 240: SLURM partition 'short' allows at most 30 min .*"
        r"give --time-min 30 or less",
    ):
        resources(SlurmOptions(), [SMOKE], partition("short"))
    with pytest.raises(
        ValueError, match=f"at most 5 min .* below the {slurm.MIN_TIME_MIN} min a requeued job"
    ):
        slurm.fits(o, partition("tiny"))
    with pytest.raises(ValueError, match=r"SLURM partition 'off' is down \(sinfo\): it starts no job"):
        slurm.fits(o, partition(None))
    with pytest.raises(
        ValueError,
        match=r"no node of SLURM partition 'sick' takes jobs \(sinfo: n2 \(down\*\), "
        r"n3 \(drain\)\)",
    ):
        slurm.fits(o, partition("sick"))
    with pytest.raises(ValueError, match="--cpus-per-job 8: no node of partition 'mixed' has more than 4"):
        resources(SlurmOptions(cpus_per_job=8), [SMOKE], partition("mixed"))


def test_an_unreachable_controller_or_accounting_is_named_and_stops_no_job(monkeypatch):
    """While squeue fails, the status lines say so and keep the last states; while sacct fails, a job squeue
    no longer lists is not taken for gone; each is said once when it stops and once when it answers again."""
    clock = Clock()
    monkeypatch.setattr(slurm_queue, "time", clock)
    jobs = [FakeJob("1_0", clock, result_at=400.0), FakeJob("1_1", clock, result_at=None)]
    down_ctl = (
        "`squeue -h` failed: slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    )
    down_acct = "`sacct -X` failed: sacct: error: Problem talking to the database: Connection refused"

    def states(ids):
        if 60 <= clock.now < 180:
            return slurm_queue.Snapshot({}, {"controller": down_ctl})
        if 180 <= clock.now < 300:  # 1_1 purged from squeue: only sacct would know it ended
            return slurm_queue.Snapshot({"1_0": ("RUNNING", "None")}, {"accounting": down_acct})
        table = (
            {"1_0": ("RUNNING", "None")}
            if clock.now < 60
            else {"1_0": ("RUNNING", "None"), "1_1": ("CANCELLED", "")}
        )
        if clock.now < 60:
            table["1_1"] = ("RUNNING", "None")
        return slurm_queue.Snapshot({i: table[i] for i in ids if i in table})

    said = []
    watch = Watch(
        jobs,
        ["a", "b"],
        states,
        say=said.append,
        done=lambda r: None,
        status_every_s=60,
        pending_warn_s=600,
        vanished_s=30,
    )
    results = watch.run()
    assert [r.status for r in results] == ["ok", "FAILED"]
    assert results[1].error == "SLURM job 1_1 ended CANCELLED without a result"  # not "known neither"
    warnings = [s for s in said if "does not answer" in s and "WARNING" in s]
    assert (
        len(warnings) == 2
        and "the SLURM controller (slurmctld, asked by squeue) does not answer" in warnings[0]
    )
    assert "Unable to contact slurm controller" in warnings[0] and "accounting (slurmdbd" in warnings[1]
    assert sum("answers again" in s for s in said) == 2
    blind = [s for s in said if s.startswith("slurm: after") and "controller" in s]
    assert blind and all("2 RUNNING" in s and "the states are the last ones seen" in s for s in blind)
    assert any(s.startswith("slurm: after") and "accounting" in s and "does not answer" in s for s in said)


def test_a_requeued_job_has_a_budget_and_copies_without_progress_count(monkeypatch):
    """Each copy carries its budget to the next; two copies in a row without a new epoch checkpoint end the
    run, as does one requeue more than --max-requeues; each says why and what to change."""
    budget = slurm.Budget(max_requeues=3, time_min=30)
    b = budget.next("9_1", progress=False, elapsed_s=60)  # preempted during set-up: one stall is allowed
    assert (b.requeues, b.stalled) == (1, 1)
    b = b.next("9_1", progress=True, elapsed_s=60)
    assert (b.requeues, b.stalled) == (2, 0)
    with pytest.raises(
        slurm.RequeueBudgetSpent,
        match=r"SLURM job 9_1 not requeued again: 2 copies in a row ran out of time before one more epoch .*"
        r"--time-min \(now 30 min\)",
    ):
        b.next("9_1", progress=False, elapsed_s=25 * 60).next("9_1", progress=False, elapsed_s=25 * 60)
    b = b.next("9_1", progress=True, elapsed_s=60)
    with pytest.raises(
        slurm.RequeueBudgetSpent, match=r"was preempted after 3 requeue\(s\) \(at most 3: --max-re"
    ):
        b.next("9_1", progress=True, elapsed_s=60)
    # in the job: progress is an epoch checkpoint written by this copy
    from dmllab.training.callbacks import EpochCheckpoint

    pytest.importorskip("submitit")
    monkeypatch.setattr(EpochCheckpoint, "written", 5)
    job = slurm.TrainJob(slurm.Budget(max_requeues=3, time_min=30, requeues=1, stalled=1))
    job._written = 5
    with pytest.raises(slurm.RequeueBudgetSpent, match="2 copies in a row were preempted"):
        job.checkpoint(SMOKE)
    monkeypatch.setattr(EpochCheckpoint, "written", 6)
    again = job.checkpoint(SMOKE)
    assert again.function.budget == slurm.Budget(3, 30, 2, 0) and again.args == (SMOKE,)


class FakeTrainer:
    def __init__(self, total: int) -> None:
        self.state = type("State", (), {"plan": type("Plan", (), {"total_epochs": total})()})()


def test_the_signal_checkpoints_at_the_epochs_end_then_requeues(monkeypatch, restore_threads):
    """USR2 (submitit's preemption / time-limit signal): the epoch checkpoint is written at the end of the
    current epoch, whatever run.checkpoint_minutes says, then submitit's handler requeues, once (scancel may
    deliver the signal twice); without an epoch end it requeues after the wait."""
    import time

    from dmllab.training.callbacks import EpochCheckpoint

    previous = {s: signal.getsignal(s) for s in (signal.SIGUSR2, signal.SIGALRM)}
    requeued, saved = [], []

    def submitits() -> None:  # its handler, as a job starts (one per process)
        signal.signal(signal.SIGUSR2, lambda *a: requeued.append(len(saved)))

    try:
        submitits()
        slurm._checkpoint_first(wait_s=60)
        ckpt = EpochCheckpoint(lambda tr: saved.append(1), minutes=10.0)
        trainer = FakeTrainer(total=100)
        ckpt.on_epoch_end(trainer, 1, {})
        assert saved == [] and requeued == []  # 10 minutes not over
        os.kill(os.getpid(), signal.SIGUSR2)
        os.kill(os.getpid(), signal.SIGUSR2)  # delivered twice
        assert requeued == []  # waits for the epoch's end
        ckpt.on_epoch_end(trainer, 2, {})
        assert saved == [1] and requeued == [1]  # the checkpoint first, then the requeue
        ckpt.on_epoch_end(trainer, 3, {})
        time.sleep(0.1)
        assert saved == [1] and requeued == [1]  # one checkpoint and one requeue per signal
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the wait's alarm is off
        submitits()
        slurm._checkpoint_first(wait_s=0.2)
        os.kill(os.getpid(), signal.SIGUSR2)
        deadline = time.monotonic() + 10
        while len(requeued) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert requeued == [1, 1]  # no epoch end: the wait ran out
        ckpt.on_epoch_end(trainer, 4, {})
        assert requeued == [1, 1]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        EpochCheckpoint._requests = []


def test_the_logs_of_failures_outlive_the_submission_folder(tmp_path, monkeypatch):
    """The folder goes however the study ends; a failure's log (its .err and .out) moves to results/logs/ and the
    result points there; a success's log, and a log outside the folder, stay as they are."""
    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "results"))
    folder = tmp_path / "results" / "tmp" / "slurm-x"
    for job in ("1_0", "1_1"):
        (folder / job).mkdir(parents=True)
        (folder / job / f"{job}_0_log.err").write_text(f"{job} err")
        (folder / job / f"{job}_0_log.out").write_text(f"{job} out")
    elsewhere = tmp_path / "other.log"
    results = [
        JobResult("a", "FAILED", 1.0, "boom", str(folder / "1_0" / "1_0_0_log.err")),
        JobResult("b", "ok", 1.0, "", str(folder / "1_1" / "1_1_0_log.err")),
        JobResult("c", "FAILED", 1.0, "boom", str(elsewhere)),
        JobResult("d", "FAILED", 1.0, "never ran"),
    ]
    kept = slurm.keep_logs(results, folder, "x")
    logs = tmp_path / "results" / "logs" / "slurm-x"
    assert kept[0].output == str(logs / "1_0_0_log.err") and kept[1:] == results[1:]
    assert (logs / "1_0_0_log.err").read_text() == "1_0 err" and (
        logs / "1_0_0_log.out"
    ).read_text() == "1_0 out"
    assert sorted(p.name for p in logs.iterdir()) == ["1_0_0_log.err", "1_0_0_log.out"]
    slurm._remove(folder, scratch=True)
    assert not (tmp_path / "results" / "tmp").exists()


def test_the_folders_of_a_killed_study_are_removed_by_the_next(tmp_path, monkeypatch):
    """A folder older than STALE_S whose jobs are all gone from the queue is a killed study's; a young one, one
    with a job still queued, or any while squeue does not answer, is kept."""
    base = tmp_path / "tmp"
    time_ago = 2 * slurm.STALE_S
    for stamp in ("dead", "queued", "young"):
        (base / f"slurm-{stamp}" / "1_0").mkdir(parents=True)
    for stamp in ("dead", "queued"):
        folder = base / f"slurm-{stamp}"
        stat_time = folder.stat().st_mtime - time_ago
        os.utime(folder, (stat_time, stat_time))
    monkeypatch.setattr(slurm, "live", lambda name: [("1_0", "PENDING")] if name == "dmllab-queued" else [])
    assert slurm.sweep(base) == [base / "slurm-dead"]
    assert sorted(p.name for p in base.iterdir()) == ["slurm-queued", "slurm-young"]

    def unreachable(name):
        raise ValueError("`squeue -h` failed: Unable to contact slurm controller")

    os.utime(base / "slurm-young", (0, 0))
    monkeypatch.setattr(slurm, "live", unreachable)
    assert slurm.sweep(base) == [] and len(list(base.iterdir())) == 2
    assert slurm.sweep(tmp_path / "none") == []
