"""``--executor slurm`` on a real SLURM (the session's single-node cluster, :mod:`slurm_cluster`): a smoke study
trains the local executor's runs, bit for bit; options no job could run with, and partitions that start no job
(MaxTime below --time-min, DOWN, a drained node), are one line before anything is submitted; a task cancelled
while PENDING and one cancelled while RUNNING are named failures, never a wait; a preempted task checkpoints at
the signal, requeues, resumes and finishes, and no copy outlives the study; copies that make no progress end the
run with a named failure; Ctrl-C cancels every job, a copy being requeued included; an unreachable controller or
accounting is named; no submission folder outlives its study."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import long_runs
import pytest
import slurm_cluster

from dmllab.experiments import Run, registry
from dmllab.experiments.execution import Execution
from dmllab.pipeline.executors import LocalExecutor
from dmllab.pipeline.plan import make_plan
from dmllab.pipeline.slurm import SlurmOptions, resources
from dmllab.pipeline.slurm_queue import LIVE, Partition, partition

REPO = Path(__file__).resolve().parents[2]
#: Epochs of the runs of the cancel test: task 0 (cancelled while training) long, the others a few seconds.
EPOCHS = [200, 50, 50, 50]
STUDY = ["-m", "dmllab.cli", "study", "--profile", "smoke", "--only", "pnpp_table15_crop", "--no-progress"]


def _env(slurm, root: Path) -> dict[str, str]:
    """The environment of a study (and so of its jobs) writing under ``root``, on the cluster ``slurm``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLLAB_", "SLURM_"))}
    env.update(slurm.env)
    env[slurm_cluster.MARKER] = str(slurm.folder)  # the cluster's teardown finds every job process by it
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(Path(__file__).parent)])
    for key in ("DMLLAB_RESULTS", "DMLLAB_FIGURES"):
        env[key] = str(root / key.lower())
    env["DMLLAB_CACHE"] = str(root.parent / "cache")  # the synthetic dataset is built once
    return env


def _squeue(env: dict[str, str], *args: str) -> list[list[str]]:
    out = subprocess.run(["squeue", "-h", "-r", *args], env=env, capture_output=True, text=True, check=True)
    return [line.split("|") for line in out.stdout.split()]


def _active(env: dict[str, str]) -> list[list[str]]:
    return _squeue(env, "-t", LIVE, "-o", "%i|%T|%j")


def _wait(what: str, ok, timeout_s: float, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = ok()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the study exited first:\n{proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.2)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s")


def _scancel(env: dict[str, str], *args: str) -> None:
    """``scancel ARGS``, again while the controller says the job "can not be altered now" (another task of its
    array is being cancelled)."""
    deadline = time.monotonic() + 30
    while True:
        out = subprocess.run(["scancel", *args], env=env, capture_output=True, text=True)
        if out.returncode == 0:
            return
        assert "try again later" in out.stderr and time.monotonic() < deadline, out.stderr
        time.sleep(0.5)


def _preempt(env: dict[str, str], job_id: str) -> None:
    """Send the job USR2, the signal submitit asks SLURM to send before a time limit (its own tests preempt a job
    so). scancel may report "can not be altered now" after delivering it and then retries for minutes, which
    would signal the requeued copy again: it gets a few seconds."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(["scancel", "--signal=USR2", job_id], env=env, capture_output=True, timeout=3)


def _log(folder: Path, job_id: str) -> str:
    """The stderr log of job ``job_id`` (``12_3``: task 3 of array 12) under the submission folders in ``folder``
    ("" while there is none)."""
    logs = list(folder.glob(f"*/{job_id}/{job_id}_0_log.err"))
    with contextlib.suppress(OSError):
        return logs[0].read_text() if logs else ""
    return ""


def _release(env: dict[str, str], job_id: str) -> None:
    """Start a requeued job now: SLURM holds one for two minutes (BeginTime); an administrator's release."""
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, check=True)


def _requeued(env: dict[str, str], job_id: str) -> bool:
    return _squeue(env, "-j", job_id, "-o", "%T|%r") == [["PENDING", "BeginTime"]]


def _driver(env: dict[str, str], epochs: list[int], parallel: int, *more: str) -> subprocess.Popen:
    """:mod:`long_runs` submitting runs of ``epochs`` epochs, ``parallel`` at once."""
    return subprocess.Popen(
        [sys.executable, str(Path(long_runs.__file__)), ",".join(map(str, epochs)), str(parallel), *more],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _history(run: Path) -> list[dict[str, str]]:
    """A stored run's history.csv without its wall times."""
    with open(run / "history.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k != "time_s"} for row in csv.DictReader(f)]


@pytest.fixture
def queue_empty(slurm):
    """Every job of the test is gone from the queue afterwards, whatever the test did."""
    yield
    subprocess.run(["scancel", "--user=root"], env={**os.environ, **slurm.env}, check=False)


def test_a_smoke_study_on_slurm_trains_the_local_executors_runs_bit_for_bit(
    slurm, tmp_path, monkeypatch, queue_empty
):
    env = _env(slurm, tmp_path / "slurm")
    out = subprocess.run(
        [sys.executable, *STUDY, "--executor", "slurm"], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 trained, 0 diverged, 0 failed" in out.stdout
    assert "1 CPU(s) and 0 GPU(s) per job" in out.stdout  # the defaults on a CPU partition
    results = tmp_path / "slurm" / "dmllab_results"
    assert not (results / "tmp").exists()  # every job succeeded: the submission folder is gone
    assert _active(env) == []

    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "local"))
    monkeypatch.setenv("DMLLAB_CACHE", env["DMLLAB_CACHE"])
    plan = make_plan(registry.select("pnpp_table15_crop"), "smoke", Execution(device="cpu"))
    assert [r.status for r in LocalExecutor(2, progress=False).submit([r.run for r in plan.missing])] == [
        "ok"
    ] * 4
    slurm_runs = sorted((results / "runs").glob("*/seed*"))
    assert len(slurm_runs) == 4
    for run in slurm_runs:
        local = tmp_path / "local" / "runs" / run.relative_to(results / "runs")
        assert (run / "config.json").read_text() == (local / "config.json").read_text()
        assert _history(run) == _history(local)  # every epoch's loss, learning rates and validation metrics
        metrics = [json.loads((d / "metrics.json").read_text())["metrics"] for d in (run, local)]
        assert metrics[0] == metrics[1]
        threads = [json.loads((d / "provenance.json").read_text())["torch_threads"] for d in (run, local)]
        assert threads == [1, 1]


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--partition", "nope"], "SLURM partition 'nope' does not exist (sinfo lists: debug)"),
        (["--cpus-per-job", "CPUS+1"], "no node of partition 'debug' has more than CPUS CPUs (sinfo)"),
    ],
)
def test_an_option_no_job_could_run_with_is_one_line_and_leaves_nothing(
    slurm, tmp_path, flags, says, queue_empty
):
    env = _env(slurm, tmp_path)
    flags = [f.replace("CPUS+1", str(slurm.cpus + 1)) for f in flags]
    out = subprocess.run(
        [sys.executable, *STUDY, "--executor", "slurm", *flags], env=env, capture_output=True, text=True
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("dmllab: error: "), out.stderr
    assert says.replace("CPUS", str(slurm.cpus)) in out.stderr
    assert not (tmp_path / "dmllab_results" / "tmp").exists()
    assert _active(env) == []


def test_what_a_job_asks_for_is_checked_against_the_partitions_nodes(slurm, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    debug = partition(None)  # the default partition
    assert debug == Partition("debug", slurm.cpus, 0)
    smoke = long_runs.long_runs([1])[0]
    paper = Run(smoke.config.replace("profile", "paper"), 0)
    assert resources(SlurmOptions(), [smoke], debug) == (0, 1)  # a CPU run: no GPU, one CPU
    assert resources(SlurmOptions(gpus_per_job=0), [paper], debug) == (0, 1)
    with pytest.raises(ValueError, match="the paper profile's jobs ask for 1 GPU"):
        resources(SlurmOptions(), [paper], debug)  # the paper profile needs a GPU: this partition has none
    with pytest.raises(
        ValueError, match="--gpus-per-job 1, but no node of partition 'debug' has more than 0"
    ):
        resources(SlurmOptions(gpus_per_job=1), [smoke], debug)


def test_cancelled_tasks_fail_by_name_and_a_preempted_one_finishes(slurm, tmp_path, monkeypatch, queue_empty):
    """Four long runs, two at a time: task 3 is cancelled while PENDING, task 0 while RUNNING, task 1 is
    preempted (USR2, as submitit's own tests do); task 2 waits, then trains."""
    env = _env(slurm, tmp_path)
    proc = _driver(env, EPOCHS, 2)
    try:
        tasks = _wait(
            "4 tasks queued",
            lambda: [r for r in _active(env) if r[0].count("_")][3:] and _active(env),
            60,
            proc,
        )
        array = tasks[0][0].split("_")[0]
        folder = tmp_path / "dmllab_results" / "tmp"

        def training(task: int) -> bool:
            return "dmllab: training" in _log(folder, f"{array}_{task}")

        _wait("tasks 0 and 1 training", lambda: training(0) and training(1), 90, proc)
        states = {r[0]: r[1] for r in _active(env)}
        assert states[f"{array}_3"] == "PENDING", states
        _preempt(env, f"{array}_1")
        _scancel(env, f"{array}_3")
        _scancel(env, f"{array}_0")
        _wait("task 1 requeued", lambda: _requeued(env, f"{array}_1"), 60, proc)
        # the epoch checkpoint written at the signal, though run.checkpoint_minutes (10) had not passed
        monkeypatch.setenv("DMLLAB_CACHE", env["DMLLAB_CACHE"])
        monkeypatch.setenv("DMLLAB_RESULTS", env["DMLLAB_RESULTS"])
        from dmllab.training.checkpoint import load_checkpoint

        ckpt = Path(env["DMLLAB_CACHE"]) / "checkpoints" / long_runs.long_runs(EPOCHS)[1].key / "last.pt"
        epoch = load_checkpoint(ckpt)["trainer"]["epoch"]
        assert 1 <= epoch < EPOCHS[1]
        assert f"epoch checkpoint written at the signal (epoch {epoch})" in _log(folder, f"{array}_1")
        _release(env, f"{array}_1")
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    results = [json.loads(line[len("RESULT ") :]) for line in out.splitlines() if line.startswith("RESULT ")]
    assert [r["status"] for r in results] == ["FAILED", "ok", "ok", "FAILED"], out
    assert f"SLURM job {array}_0 was cancelled (scancel)" in results[0]["error"]
    pending = results[3]["error"]  # squeue still lists it as cancelled, or (purged) it is gone from both
    assert pending.startswith(f"SLURM job {array}_3 ") and (
        "ended CANCELLED" in pending or "known neither" in pending
    )
    assert "slurm: after" in out and "PENDING" in out  # status lines
    from dmllab.training.store import RunStore

    runs = long_runs.long_runs(EPOCHS)
    stored = [RunStore().load(r.config, r.seed) is not None for r in runs]
    assert stored == [False, True, True, False]  # the cancelled running task is not trained
    history = subprocess.run(
        ["sacct", "-D", "-X", "-n", "-P", "-o", "JobID,State", "-j", f"{array}_1"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert len(history) >= 2 and history[-1].endswith("COMPLETED"), history  # requeued, then finished
    assert _active(env) == []  # no copy outlives the study
    assert not folder.exists()  # the submission folder is gone; the failures' logs are kept
    kept = Path(results[0]["output"])
    assert (
        kept.parent.parent == tmp_path / "dmllab_results" / "logs" and "dmllab: training" in kept.read_text()
    )


def test_a_job_requeued_without_progress_ends_with_advice(slurm, tmp_path, queue_empty):
    """A copy that requeues before one more epoch is checkpointed (here: at once at the signal) makes no
    progress; the second in a row ends the run with a named failure instead of a loop."""
    env = _env(slurm, tmp_path)
    proc = _driver(env, [400], 1, "0")
    folder = tmp_path / "dmllab_results" / "tmp"
    try:
        job = _wait("the job queued", lambda: _active(env), 60, proc)[0][0]  # one run: no array
        for copy in (1, 2):  # each copy appends its "dmllab: training" line to the job's log
            _wait(
                f"copy {copy} training",
                lambda n=copy: _log(folder, job).count("dmllab: training") == n,
                90,
                proc,
            )
            _preempt(env, job)
            if copy == 1:
                _wait("the job requeued", lambda: _requeued(env, job), 60, proc)
                _release(env, job)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    (result,) = [
        json.loads(line[len("RESULT ") :]) for line in out.splitlines() if line.startswith("RESULT ")
    ]
    assert result["status"] == "FAILED", out
    assert f"SLURM job {job} not requeued again: 2 copies in a row were preempted" in result["error"]
    assert "--time-min (now 20 min)" in result["error"]
    assert _active(env) == [] and not folder.exists()


def test_ctrl_c_cancels_a_copy_being_requeued(slurm, tmp_path, queue_empty):
    """Ctrl-C while a preempted task is COMPLETING or held for requeue: the copy is cancelled too, nothing is
    left in the queue when the study exits, and its submission folder is gone."""
    env = _env(slurm, tmp_path)
    proc = _driver(env, [400, 400], 2)
    folder = tmp_path / "dmllab_results" / "tmp"
    try:
        array = _wait("2 tasks queued", lambda: _active(env)[1:] and _active(env), 60, proc)[0][0].split("_")[
            0
        ]
        _wait("task 0 training", lambda: "dmllab: training" in _log(folder, f"{array}_0"), 90, proc)
        _preempt(env, f"{array}_0")
        _wait(
            "task 0 requeuing",
            lambda: [r[1] for r in _active(env) if r[0] == f"{array}_0"] in (["COMPLETING"], ["PENDING"]),
            60,
            proc,
        )
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "INTERRUPTED" in out, out
    assert _active(env) == []  # at once: the study waited for the COMPLETING copy and cancelled it
    assert not folder.exists()


def test_a_partition_that_starts_no_job_is_refused_before_submitting(slurm, monkeypatch):
    """MaxTime below --time-min, a DOWN partition, a drained node: each one line, from the real sinfo."""
    from dmllab.pipeline.slurm import fits

    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    env = {**os.environ, **slurm.env}

    def update(*what: str) -> None:
        subprocess.run(["scontrol", "update", *what], env=env, check=True, capture_output=True)

    try:
        update("PartitionName=debug", "MaxTime=30")
        assert partition("debug").max_time_min == 30
        fits(SlurmOptions(time_min=30), partition("debug"))
        with pytest.raises(ValueError, match="--time-min 240: SLURM partition 'debug' allows at most 30 min"):
            fits(SlurmOptions(), partition("debug"))
        update("PartitionName=debug", "MaxTime=INFINITE", "State=DOWN")
        with pytest.raises(ValueError, match=r"SLURM partition 'debug' is down \(sinfo\)"):
            fits(SlurmOptions(), partition("debug"))
        update("PartitionName=debug", "State=UP")
        update("NodeName=localhost", "State=DRAIN", "Reason=test")
        with pytest.raises(
            ValueError, match=r"no node of SLURM partition 'debug' takes jobs \(sinfo: localhost \(dr"
        ):
            fits(SlurmOptions(), partition("debug"))
    finally:
        update("PartitionName=debug", "MaxTime=INFINITE", "State=UP")
        update("NodeName=localhost", "State=RESUME")
    fits(SlurmOptions(), partition("debug"))
    idle = ["sinfo", "-h", "-o", "%t"]
    _wait(
        "the node idle again",
        lambda: subprocess.run(idle, env=env, capture_output=True, text=True).stdout.strip() == "idle",
        60,
    )


def test_an_unreachable_controller_or_accounting_is_named(slurm, tmp_path, monkeypatch):
    """The cluster's configuration with the controller's and the accounting's ports closed: squeue's and sacct's
    own errors, each named as the source that does not answer."""
    from dmllab.pipeline.slurm_queue import slurm_states

    conf = Path(slurm.env["SLURM_CONF"]).read_text()
    closed = slurm_cluster._free_ports(1)[0]

    def closing(*keys: str) -> str:
        path = tmp_path / f"slurm-{len(keys)}.conf"
        lines = [f"{ln.split('=')[0]}={closed}" if ln.startswith(keys) else ln for ln in conf.splitlines()]
        path.write_text("\n".join([*lines, "MessageTimeout=2", ""]))
        return str(path)

    monkeypatch.setenv("SLURM_CONF", closing("AccountingStoragePort="))
    snap = slurm_states("dmllab-none", ["1_0"])
    assert snap.states == {} and set(snap.down) == {"accounting"} and "sacct" in snap.down["accounting"]
    monkeypatch.setenv("SLURM_CONF", closing("SlurmctldPort=", "AccountingStoragePort="))
    snap = slurm_states("dmllab-none", ["1_0"])
    assert snap.states == {} and set(snap.down) == {"controller"} and "squeue" in snap.down["controller"]
    assert "controller" in snap.down["controller"].lower(), snap.down  # squeue's own words


def test_ctrl_c_cancels_every_job(slurm, tmp_path, queue_empty):
    env = _env(slurm, tmp_path)
    proc = subprocess.Popen(
        [sys.executable, *STUDY, "--executor", "slurm"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        queued = _wait("the study's jobs queued", lambda: _active(env), 60, proc)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    _wait("every job cancelled", lambda: _active(env) == [], 20)
    array = queued[0][0].split("_")[0]
    states = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", array],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    ended = [line.split("|")[1].split(" ")[0] for line in states if line]
    assert ended and set(ended) <= {"CANCELLED", "COMPLETED"} and "CANCELLED" in ended, states
    assert not (tmp_path / "dmllab_results" / "tmp").exists()  # the submission folder is gone
