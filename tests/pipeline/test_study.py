"""The study's plan (de-duplication, stored count, estimate), its executors, and its workers' lifetime."""

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
from dmllab.pipeline import study
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


def test_plan_deduplicates_by_run_key(store_env):
    a = _artifact("pnpp_table90_a", {"full": {}, "-fast": {"fast": False}})
    b = _artifact("pnpp_table91_b", {"full": {}})  # shares the "full" runs with a
    plan = study.make_plan([a, b], "smoke", device="cpu")
    assert plan.requested == 6 and len(plan.runs) == 4
    shared = [r for r in plan.runs if len(r.artifacts) == 2]
    assert len(shared) == 2 and all(r.artifacts == ("pnpp_table90_a", "pnpp_table91_b") for r in shared)
    assert not any(r.stored for r in plan.runs) and plan.estimate_s is None
    text = study.format_plan(plan)
    assert "6 runs requested by the artifacts, 4 unique after de-duplication; 0 stored, 4 to train" in text


def test_plan_counts_stored_runs_and_estimates_from_their_wall_time(store_env):
    a = _artifact("pnpp_table90_a", {"full": {}})
    plan = study.make_plan([a], "smoke", device="cpu")
    results = [study.train_run(plan.missing[0].run)]
    assert results[0].status == "ok", results[0].error
    again = study.make_plan([a], "smoke", device="cpu")
    assert sum(r.stored for r in again.runs) == 1 and len(again.missing) == 1
    assert again.estimate_s is not None and again.estimate_s > 0  # the stored run's wall time is the basis


def test_failing_run_is_reported_not_raised(store_env):
    cfg = presets.get("proxynca++", "synthetic", "smoke").replace("data.dataset", "no_such_dataset")
    res = study.train_run(Run(cfg, 0))
    assert res.status == "FAILED" and "no_such_dataset" in res.error


def test_submitit_executor_trains_with_its_local_executor(store_env, tmp_path):
    pytest.importorskip("submitit")
    run = Run(presets.get("proxynca++", "synthetic", "smoke"), 3)
    results = study.train_slurm(
        [run], study.SlurmOptions(cluster="local", folder=str(tmp_path / "slurm"), time_min=5), progress=False
    )
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
        from dmllab.pipeline import study
        study._run_pool([1, 2, 3, 4], work, str, jobs=2, desc="", progress=False)
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
    plan = study.make_plan([a], "smoke", device="cpu")
    res = study.train_run(plan.missing[0].run)
    assert res.status == "diverged" and "epoch 1, step 3" in res.error
    again = study.make_plan([a], "smoke", device="cpu")
    assert [r.diverged for r in again.runs] == [True, False] and len(again.missing) == 1
    assert "1 recorded as diverged (not retrained; --force does), 1 to train" in study.format_plan(again)
    result = study.StudyResult(again, (res,), (), (), None, 1.0)
    assert not result.failed  # a diverged setting is a result, not a broken study
    assert "diverged (recorded in the run store" in study.format_summary(result)
    failed = study.StudyResult(again, (study.JobResult("x", "FAILED", 0.0, "boom"),), (), (), None, 1.0)
    assert failed.failed


def test_plan_estimates_from_the_same_profile_else_its_typical_run(store_env, monkeypatch):
    """A run of another profile is no basis (a stored smoke run says nothing of a quick run's cost); with no
    stored run of the profile the estimate is the profile's typical run, and the plan says so."""
    from dmllab.profiles import TYPICAL_RUN_S

    def runs(params):
        return [Run(presets.get("proxynca++", "synthetic", params.profile), seed) for seed in params.seeds]

    a = Artifact(
        id="pnpp_table92_c",
        paper="pnpp",
        label="Table 0",
        title="c",
        description="test",
        parameters={p: {"seeds": [0, 1]} for p in ("smoke", "quick", "paper")},
        runs=runs,
        rows=lambda p, lookup: [],
        figures=(Figure(lambda t: None),),
    )
    smoke = study.make_plan([a], "smoke", device="cpu")
    assert smoke.estimate_s is None and smoke.typical_s is None  # TYPICAL_RUN_S["smoke"] is None
    assert study.train_run(smoke.missing[0].run).status == "ok"
    quick = study.make_plan([a], "quick", device="cpu")
    assert len(quick.missing) == 2 and quick.typical_s == TYPICAL_RUN_S["quick"]
    assert quick.estimate_s == pytest.approx(2 * TYPICAL_RUN_S["quick"])
    assert f"no stored quick run yet: {study._duration(TYPICAL_RUN_S['quick'])} per run" in study.format_plan(
        quick, jobs=2
    )
    monkeypatch.setitem(TYPICAL_RUN_S, "quick", None)
    assert study.make_plan([a], "quick", device="cpu").estimate_s is None  # no basis at all
    again = study.make_plan([a], "smoke", device="cpu")  # a stored smoke run: the basis, not a typical run
    assert again.typical_s is None and again.estimate_s == pytest.approx(again.runs[0].wall_s)


def test_last_duration_reads_papermills_metadata(tmp_path):
    import json

    nb = tmp_path / "a.ipynb"
    assert study._last_duration(nb) == 0.0  # never executed here
    nb.write_text(json.dumps({"metadata": {"papermill": {"duration": 12.5}}}))
    assert study._last_duration(nb) == 12.5
    for bad in (
        "{not json",
        json.dumps({"metadata": {}}),
        json.dumps({"metadata": {"papermill": {"duration": None}}}),
    ):
        nb.write_text(bad)
        assert study._last_duration(nb) == 0.0


def test_notebooks_start_longest_first_by_their_last_execution(store_env, tmp_path, monkeypatch):
    """The notebook phase submits the notebooks that took longest last time first (unknown ones after, in
    artifact order), so that a long notebook does not start last and run alone."""
    import json

    executed = tmp_path / "executed"
    executed.mkdir()
    ids = ["pnpp_table1_settings", "pnpp_fig3_two_moons", "ps_fig2_gaussian"]
    (executed / "ps_fig2_gaussian.ipynb").write_text(
        json.dumps({"metadata": {"papermill": {"duration": 30.0}}})
    )
    (executed / "pnpp_fig3_two_moons.ipynb").write_text(
        json.dumps({"metadata": {"papermill": {"duration": 5.0}}})
    )
    submitted = {}

    def fake_pool(items, fn, name, *, jobs, desc, progress):
        submitted[desc.split(" ")[0]] = [name(i) for i in items]
        return [study.JobResult(name(i), "ok", 0.0, output="x") for i in items]

    monkeypatch.setattr(study, "_run_pool", fake_pool)
    monkeypatch.setattr(study, "ensure_kernel", lambda: "python3")
    result = study.run_study(
        "smoke",
        only=",".join(ids),
        jobs=2,
        device="cpu",
        progress=False,
        report=False,
        executed_dir=executed,
        say=lambda s: None,
    )
    assert submitted["notebooks"] == ["ps_fig2_gaussian", "pnpp_fig3_two_moons", "pnpp_table1_settings"]
    from dmllab.experiments import registry

    assert [r.name for r in result.notebooks] == [
        a.id for a in registry.select(",".join(ids))
    ]  # artifact order


def _fake_papermill(monkeypatch, outcomes):
    """papermill.execute_notebook replaced by one that plays ``outcomes`` in turn: an exception to raise (after
    writing the output notebook with ``ran`` cells executed) or None for success; returns the calls made."""
    import json

    import papermill

    calls = []

    def fake(inp, out, *, start_timeout, **kwargs):
        err, ran = outcomes[len(calls)]
        calls.append(start_timeout)
        cell = {"cell_type": "code", "execution_count": 1 if ran else None, "source": "", "outputs": []}
        Path(out).write_text(json.dumps({"cells": [cell]}))
        if err is not None:
            raise err

    monkeypatch.setattr(papermill, "execute_notebook", fake)
    return calls


def test_a_kernel_that_does_not_start_is_relaunched(tmp_path, monkeypatch):
    no_reply = RuntimeError("Kernel didn't respond in 120 seconds")
    calls = _fake_papermill(
        monkeypatch, [(no_reply, False), (RuntimeError("Kernel died before replying"), False), (None, False)]
    )
    res = study.execute_notebook(tmp_path / "a.ipynb", tmp_path / "out" / "a.ipynb", {})
    assert res.status == "ok" and calls == [study.KERNEL_START_TIMEOUT_S] * 3


def test_kernel_start_retries_are_bounded_and_reported(tmp_path, monkeypatch):
    no_reply = RuntimeError("Kernel didn't respond in 120 seconds")
    calls = _fake_papermill(monkeypatch, [(no_reply, False)] * 5)
    res = study.execute_notebook(tmp_path / "a.ipynb", tmp_path / "out" / "a.ipynb", {}, attempts=2)
    assert res.status == "FAILED" and len(calls) == 2
    assert "Kernel didn't respond" in res.error and "after 2 kernel launches" in res.error


def test_no_relaunch_once_a_cell_has_run(tmp_path, monkeypatch):
    calls = _fake_papermill(monkeypatch, [(RuntimeError("Kernel died"), True), (None, False)])
    res = study.execute_notebook(tmp_path / "a.ipynb", tmp_path / "out" / "a.ipynb", {})
    assert res.status == "FAILED" and len(calls) == 1 and "Kernel died" in res.error
