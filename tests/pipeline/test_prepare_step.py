"""The pre-trained SmallCNN trunk is a planned dependency: the plan lists the trunks its missing runs start from,
and the study builds each once before its training phase (building a model never pre-trains)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dmllab.experiments import Artifact, Figure, Run
from dmllab.experiments.execution import Execution
from dmllab.pipeline import study
from dmllab.pipeline.plan import make_plan
from dmllab.pipeline.plan_text import format_plan
from dmllab.training import presets, pretrain
from dmllab.training.smallcnn_weights import trunk


@pytest.fixture
def store_env(tmp_path, monkeypatch):
    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    return tmp_path


def _cfg(pretrained: bool, draw: int):
    cfg = presets.get("proxynca++", "synthetic", "quick")
    backbone = cfg.model.backbone.with_kw(pretrain_seed=draw)
    return replace(cfg, model=replace(cfg.model, pretrained=pretrained, backbone=backbone))


def _artifact(seeds: list[int], pretrained: bool = True) -> Artifact:
    """Two runs per seed; a seed is a draw (its trunk is the one pre-trained on that draw)."""

    def runs(params):
        return [Run(_cfg(pretrained, s), s, variant=v) for s in params.seeds for v in ("a", "b")]

    return Artifact(
        id="pnpp_table0_trunks",
        paper="pnpp",
        label="Table 0",
        title="trunks",
        description="test",
        parameters={p: {"seeds": seeds} for p in ("smoke", "quick", "paper")},
        runs=runs,
        rows=lambda p, lookup: [],
        figures=(Figure(lambda t: None),),
    )


def test_the_plan_lists_each_missing_trunk_once(store_env, monkeypatch):
    monkeypatch.setattr(pretrain, "is_fresh", lambda w, d, **_: d == 2)  # draw 2 is built already
    plan = make_plan([_artifact([0, 1, 2, 3])], "quick", Execution(device="cpu"))
    width, _ = trunk(plan.missing[0].run.config.model.backbone.kw)
    assert len(plan.missing) == 4  # the two variants of a seed are one run (one key)
    assert plan.dependencies == [(width, 0), (width, 1), (width, 3)]
    assert (
        f"prepared first: 3 pre-trained SmallCNN trunk(s) (width {width} draw 0, width {width} draw 1, "
        f"width {width} draw 3)" in format_plan(plan)
    )


def test_the_quick_estimate_includes_the_trunks_prepared_first(store_env, monkeypatch):
    from dmllab.pipeline.plan_text import duration, estimate
    from dmllab.profiles import TYPICAL_RUN_S, TYPICAL_TRUNK_S

    monkeypatch.setattr(pretrain, "is_fresh", lambda w, d, **_: False)
    plan = make_plan([_artifact([0, 1, 2])], "quick", Execution(device="cpu"))
    width, _ = trunk(plan.missing[0].run.config.model.backbone.kw)
    prep = 3 * TYPICAL_TRUNK_S * (width / 16) ** 2  # three draws, one after another
    runs = 3 * TYPICAL_RUN_S["quick"] / 2  # three runs on two workers
    text = " ".join(format_plan(plan, jobs=2).split())
    assert f"plus about {duration(prep)} preparing 3 SmallCNN trunk(s) first" in text
    assert f"about {duration(prep + runs)} in all" in text
    built = make_plan([_artifact([0, 1, 2], pretrained=False)], "quick", Execution(device="cpu"))
    assert "trunk" not in estimate(built, 2)  # nothing to prepare: the runs alone


def test_a_plan_without_stored_runs_says_what_it_can_estimate(store_env, monkeypatch):
    from dmllab.pipeline.plan_text import estimate

    monkeypatch.setattr(pretrain, "is_fresh", lambda w, d, **_: True)
    plan = make_plan([_artifact([0])], "paper", Execution(device="cpu"))
    assert plan.estimate_s is None
    text = estimate(plan, 2, gpu_hours=1378.5)
    assert text.startswith("1,378.5 GPU-hours from the cost model") and "unknown" not in text
    assert "only from stored paper runs on cpu" in text
    assert "unknown" not in estimate(plan, 2) and estimate(plan, 2).startswith("not estimated")


def test_runs_from_random_initialisation_need_no_trunk(store_env, monkeypatch):
    monkeypatch.setattr(pretrain, "is_fresh", lambda w, d, **_: False)
    plan = make_plan([_artifact([0, 1], pretrained=False)], "quick", Execution(device="cpu"))
    assert plan.dependencies == []
    assert "prepared first" not in format_plan(plan)


def test_the_study_builds_the_trunks_before_training(store_env, monkeypatch):
    monkeypatch.setattr(pretrain, "is_fresh", lambda w, d, **_: False)
    plan = make_plan([_artifact([3, 1])], "quick", Execution(device="cpu"))
    built, said = [], []
    monkeypatch.setattr(
        study, "ensure_pretrained_smallcnn", lambda **kw: built.append((kw["width"], kw["seed"]))
    )
    s = study._Study("quick", Execution(device="cpu"), [], None, store_env, None, said.append)
    s.prepare(plan, progress=False)
    assert built == plan.dependencies and [d for _, d in built] == [1, 3]
    assert said and said[0].startswith("prepared first: 2 pre-trained SmallCNN trunk(s)")


def test_prepare_for_one_run_is_a_no_op_without_a_pretrained_smallcnn(monkeypatch):
    built = []
    monkeypatch.setattr(pretrain, "is_fresh", lambda w, d, **_: False)
    monkeypatch.setattr(pretrain, "ensure_pretrained_smallcnn", lambda **kw: built.append(kw["seed"]))
    pretrain.prepare(_cfg(False, 4))
    assert built == []
    pretrain.prepare(_cfg(True, 4))
    assert built == [4]
