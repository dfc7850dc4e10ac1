"""Resolve once: a smoke study resolves its device once (in the placement) and places each of its runs once, from the
plan to its trained runs and its notebooks, which read them from the study's manifest; the trainer resolves a device
only for a library user who passes "auto"."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

from dmllab import profiles
from dmllab.experiments import lookup
from dmllab.experiments.execution import Execution
from dmllab.pipeline import execute, study
from dmllab.pipeline.executors import LocalExecutor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from walk import execute_in_process  # noqa: E402  (the benchmark of the same walk)

ONLY = "pnpp_table11_pooling,pa_fig5_embedding"  # two artifacts that share runs


@pytest.fixture
def store_env(tmp_path, monkeypatch):
    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    return tmp_path


def _count_resolutions(monkeypatch) -> list[str]:
    """Every call of :func:`dmllab.profiles.resolve_device`, wherever it was imported, as its argument."""
    calls: list[str] = []
    original = profiles.resolve_device

    def counted(device: str) -> str:
        calls.append(device)
        return original(device)

    for module in list(sys.modules.values()):
        if module is not None and getattr(module, "resolve_device", None) is original:
            monkeypatch.setattr(module, "resolve_device", counted)
    return calls


def _count_placements(monkeypatch) -> Counter:
    """Every call of :func:`dmllab.experiments.lookup.place`, per key of the run it placed."""
    placed: Counter = Counter()
    original = lookup.place

    def counted(run, params):
        out = original(run, params)
        placed[out.key] += 1
        return out

    monkeypatch.setattr(lookup, "place", counted)
    return placed


def test_a_smoke_study_resolves_its_device_once_and_places_each_run_once(store_env, monkeypatch):
    """From the plan to the notebooks: each notebook reads its placed runs from the study's manifest (it places
    only what no run of the plan is, such as an untrained network it evaluates itself)."""

    def in_process(self, fn, items, name, *, desc):  # train and execute here, so that the counters see them
        return [fn(item) for item in items]

    monkeypatch.setattr(LocalExecutor, "map", in_process)
    monkeypatch.setattr(execute, "ensure_kernel", lambda: "python3")
    monkeypatch.setattr(execute, "execute_notebook", execute_in_process)
    monkeypatch.setattr(execute, "run_plots", lambda *a, **k: [])
    resolutions = _count_resolutions(monkeypatch)
    placements = _count_placements(monkeypatch)
    result = study.run_study(
        "smoke", Execution(), only=ONLY, jobs=1, progress=False, report=False, say=lambda s: None
    )
    trained = [r for r in result.training if r.status == "ok"]
    keys = {r.run.key for r in result.plan.runs}
    assert len(trained) == len(result.plan.missing) == len(keys) > 0
    assert any(len(r.artifacts) > 1 for r in result.plan.runs)  # a shared run: placed once all the same
    assert [r.status for r in result.notebooks] == ["ok", "ok"]
    assert resolutions == ["auto"]
    assert keys <= set(placements)
    assert placements == Counter(dict.fromkeys(placements, 1)), placements


def test_the_trainer_resolves_only_auto(monkeypatch):
    from dmllab.training import presets
    from dmllab.training.trainer import Trainer

    resolutions = _count_resolutions(monkeypatch)
    cfg = presets.get("proxynca++", "synthetic", "smoke")
    assert Trainer(cfg.replace("run.device", "cpu")).device.type == "cpu"
    assert resolutions == []
    assert Trainer(cfg.replace("run.device", "auto")).device.type in ("cpu", "cuda", "mps")
    assert resolutions == ["auto"]


def test_a_lone_dmllab_train_resolves_its_device_once_and_stores_it(store_env, monkeypatch, capsys):
    import json

    from dmllab.cli import main
    from dmllab.training import RunStore

    resolutions = _count_resolutions(monkeypatch)
    args = ["train", "--method", "proxynca++", "--dataset", "synthetic", "--profile", "smoke", "--quiet"]
    args += ["--set", "run.device=auto"]  # as the paper presets say
    assert main(args) == 0
    assert resolutions == ["auto"]
    (config,) = RunStore().root.glob("*/seed0/config.json")
    assert json.loads(config.read_text())["run"]["device"] == profiles.resolve_device("auto")


def test_the_plans_execution_reaches_every_placed_run_as_it_is(store_env, monkeypatch):
    """The plan's Execution is passed to the placement as one value (never rebuilt from a dict of its parameters):
    its torch threads, which no notebook parameter carries, reach every placed run."""
    from dmllab.experiments import registry
    from dmllab.pipeline.plan import make_plan

    seen: list = []
    original = lookup.place

    def spy(run, params):
        seen.append(params.execution)
        return original(run, params)

    monkeypatch.setattr(lookup, "place", spy)
    execution = Execution("cpu", threads=3)
    plan = make_plan(registry.select(ONLY), "smoke", execution)
    assert plan.runs and {r.run.config.run.threads for r in plan.runs} == {3}
    assert seen and all(ex is execution for ex in seen)


def test_parameters_built_by_hand_build_their_execution_once():
    from dmllab.experiments.registry import select

    (artifact,) = select("pnpp_table11_pooling")
    params = artifact.params("smoke", "device=cpu,fast_dev_run=2")
    assert params.execution is params.execution  # built once, not per placed run
    assert params.execution == Execution("cpu", fast_dev_run=2)
