"""The study's executors: a run that fails or diverges is an outcome, SLURM through submitit (its local
executor), workers and threads, and the workers' lifetime (kill -9 of the study)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dmllab.experiments import Artifact, Figure, Run
from dmllab.experiments.execution import Execution
from dmllab.pipeline import jobs, slurm
from dmllab.pipeline.jobs import JobResult, train_run
from dmllab.pipeline.outcome import StudyResult, format_summary
from dmllab.pipeline.plan import make_plan
from dmllab.pipeline.plan_text import format_plan
from dmllab.pipeline.slurm import SlurmExecutor, SlurmOptions
from dmllab.training import presets


@pytest.fixture
def store_env(tmp_path, monkeypatch):
    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    return tmp_path


def _artifact(aid: str, variants: dict[str, dict]) -> Artifact:
    def runs(params):
        return [
            Run(presets.get("proxynca++", "synthetic", "smoke", **opts), seed, variant=name)
            for name, opts in variants.items()
            for seed in params.seeds
        ]

    return Artifact(
        id=aid,
        paper="pnpp",
        label="Table 0",
        title=aid,
        description="test",
        parameters={p: {"seeds": [0, 1]} for p in ("smoke", "quick", "paper")},
        runs=runs,
        rows=lambda p, lookup: [],
        figures=(Figure(lambda t: None),),
    )


def test_failing_run_is_reported_not_raised(store_env):
    # a run whose dataset copy is missing fails when it opens its data (an unknown dataset name is refused
    # earlier, when the config is made)
    cfg = presets.get("proxynca++", "cub", "smoke").replace("data.root", str(store_env / "no_such_dataset"))
    res = train_run(Run(cfg, 0))
    assert res.status == "FAILED" and "no_such_dataset" in res.error


def test_submitit_executor_trains_with_its_local_executor(store_env, tmp_path):
    pytest.importorskip("submitit")
    run = Run(presets.get("proxynca++", "synthetic", "smoke"), 3)
    results = SlurmExecutor(
        SlurmOptions(cluster="local", folder=str(tmp_path / "slurm"), time_min=20), progress=False
    ).submit([run])
    assert [r.status for r in results] == ["ok"], results
    from dmllab.training.store import RunStore

    assert RunStore().load(run.config, 3) is not None  # idempotent: a re-submission would find it stored


def _processes_with(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_kill_9_of_the_study_leaves_no_worker(tmp_path):
    marker = f"DMLLAB_KILL_TEST_{os.getpid()}_{time.time_ns()}"
    (tmp_path / "slow.py").write_text("import time\ndef work(x):\n    time.sleep(120)\n")
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        from slow import work
        from dmllab.pipeline.executors import LocalExecutor
        LocalExecutor(2, progress=False).map(work, [1, 2, 3, 4], str, desc="")
    """)
    env = {**os.environ, marker: "1"}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.time() + 60
    while time.time() < deadline and len(_processes_with(marker)) < 3:  # parent + 2 workers
        time.sleep(0.2)
    assert len(_processes_with(marker)) >= 3, "the workers never started"
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 15
    while time.time() < deadline and _processes_with(marker):
        time.sleep(0.2)
    assert _processes_with(marker) == [], "workers survived kill -9 of the study"


def test_diverged_run_is_an_outcome_planned_as_decided(store_env, monkeypatch):
    import dmllab.training.store as store_mod
    from dmllab.training import NonFiniteLossError

    def diverge(*a, **k):
        raise NonFiniteLossError("non-finite loss (nan) at stage single, epoch 1, step 3")

    monkeypatch.setattr(store_mod, "run_protocol", diverge)
    a = _artifact("pnpp_table90_a", {"full": {}})
    plan = make_plan([a], "smoke", Execution(device="cpu"))
    res = train_run(plan.missing[0].run)
    assert res.status == "diverged" and "epoch 1, step 3" in res.error
    again = make_plan([a], "smoke", Execution(device="cpu"))
    assert [r.diverged for r in again.runs] == [True, False] and len(again.missing) == 1
    text = " ".join(format_plan(again).split())  # the plan wraps its lines at 120 columns
    assert "1 recorded as diverged (not retrained; --force does), 1 to train" in text
    result = StudyResult(again, (res,), (), (), None, 1.0)
    assert not result.failed  # a diverged setting is a result, not a broken study
    assert "diverged (recorded in the run store" in format_summary(result)
    failed = StudyResult(again, (JobResult("x", "FAILED", 0.0, "boom"),), (), (), None, 1.0)
    assert failed.failed


def test_jobs_auto_is_one_worker_per_usable_core_on_the_cpu_and_one_on_an_accelerator(monkeypatch):
    monkeypatch.setattr(jobs, "usable_cores", lambda: 8)
    assert jobs.resolve_jobs("auto", "cpu") == 8
    assert jobs.resolve_jobs("auto", "cuda") == jobs.resolve_jobs("auto", "mps") == 1
    assert jobs.resolve_jobs("3", "cpu") == jobs.resolve_jobs(3, "cuda") == 3
    for bad in (0, -3, "0", "x", "", 1.5, True):
        with pytest.raises(ValueError, match="--jobs must be 'auto' or a positive integer"):
            jobs.resolve_jobs(bad, "cpu")
    # A CPU run always uses one thread (its numbers depend on the thread count); a GPU worker shares the cores.
    assert jobs.threads_per_worker("cpu", 8) == jobs.threads_per_worker("cpu", 1) == 1
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert jobs.threads_per_worker("cuda", 1) == 8 and jobs.threads_per_worker("cuda:0", 2) == 4


def test_a_slurm_job_resubmits_itself_when_preempted_or_out_of_time():
    """submitit requeues a job whose callable has ``checkpoint`` (submitit/core/job_environment.py); the
    resubmission is the same callable on the same run, which resumes from its last epoch checkpoint."""
    submitit = pytest.importorskip("submitit")
    run = Run(presets.get("proxynca++", "synthetic", "smoke"), 3)
    again = slurm.TrainJob().checkpoint(run)
    assert isinstance(again, submitit.helpers.DelayedSubmission)
    assert isinstance(again.function, slurm.TrainJob) and again.args == (run,)
