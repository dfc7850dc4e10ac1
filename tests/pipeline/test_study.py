"""The study's orchestration: the order of the notebook step, the summary."""

from __future__ import annotations

import pytest

from dmllab.experiments.execution import Execution
from dmllab.pipeline import execute, study
from dmllab.pipeline.executors import LocalExecutor
from dmllab.pipeline.jobs import JobResult


@pytest.fixture
def store_env(tmp_path, monkeypatch):
    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    return tmp_path


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

    def fake_map(self, fn, items, name, *, desc):
        submitted[desc.split(" ")[0]] = [name(i) for i in items]
        return [JobResult(name(i), "ok", 0.0, output="x") for i in items]

    monkeypatch.setattr(LocalExecutor, "map", fake_map)
    monkeypatch.setattr(execute, "ensure_kernel", lambda: "python3")
    result = study.run_study(
        "smoke",
        Execution(device="cpu"),
        only=",".join(ids),
        jobs=2,
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
