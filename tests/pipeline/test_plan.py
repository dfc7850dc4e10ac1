"""The study's plan: de-duplication by run key, the stored count, the estimate and its basis."""

from __future__ import annotations

import pytest

from dmllab.experiments import Artifact, Figure, Run
from dmllab.experiments.execution import Execution
from dmllab.pipeline.jobs import train_run
from dmllab.pipeline.plan import make_plan
from dmllab.pipeline.plan_text import duration, estimate, format_plan
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
    plan = make_plan([a, b], "smoke", Execution(device="cpu"))
    assert plan.requested == 6 and len(plan.runs) == 4
    shared = [r for r in plan.runs if len(r.artifacts) == 2]
    assert len(shared) == 2 and all(r.artifacts == ("pnpp_table90_a", "pnpp_table91_b") for r in shared)
    assert not any(r.stored for r in plan.runs) and plan.estimate_s is None
    text = format_plan(plan)
    assert "6 runs requested by the artifacts, 4 unique after de-duplication; 0 stored, 4 to train" in text


def test_plan_counts_stored_runs_and_estimates_from_their_wall_time(store_env):
    a = _artifact("pnpp_table90_a", {"full": {}})
    plan = make_plan([a], "smoke", Execution(device="cpu"))
    results = [train_run(plan.missing[0].run)]
    assert results[0].status == "ok", results[0].error
    again = make_plan([a], "smoke", Execution(device="cpu"))
    assert sum(r.stored for r in again.runs) == 1 and len(again.missing) == 1
    assert again.estimate_s is not None and again.estimate_s > 0  # the stored run's wall time is the basis


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
    smoke = make_plan([a], "smoke", Execution(device="cpu"))
    assert smoke.estimate_s is None and smoke.typical_s is None  # TYPICAL_RUN_S["smoke"] is None
    assert train_run(smoke.missing[0].run).status == "ok"
    quick = make_plan([a], "quick", Execution(device="cpu"))
    assert len(quick.missing) == 2 and quick.typical_s == TYPICAL_RUN_S["quick"]
    assert quick.estimate_s == pytest.approx(2 * TYPICAL_RUN_S["quick"])
    text = " ".join(format_plan(quick, jobs=2).split())  # the plan wraps its lines at 120 columns
    assert f"no stored quick run yet: {duration(TYPICAL_RUN_S['quick'])} per run" in text
    monkeypatch.setitem(TYPICAL_RUN_S, "quick", None)
    assert make_plan([a], "quick", Execution(device="cpu")).estimate_s is None  # no basis at all
    again = make_plan(
        [a], "smoke", Execution(device="cpu")
    )  # a stored smoke run: the basis, not a typical run
    assert again.typical_s is None and again.estimate_s == pytest.approx(again.runs[0].wall_s)


def test_estimate_divides_by_the_workers_really_used(store_env):
    a = Artifact(
        id="pnpp_table93_d",
        paper="pnpp",
        label="Table 0",
        title="d",
        description="test",
        parameters={p: {"seeds": [0, 1]} for p in ("smoke", "quick", "paper")},
        runs=lambda params: [Run(presets.get("proxynca++", "synthetic", "quick"), s) for s in params.seeds],
        figures=(Figure(lambda t: None),),
    )
    plan = make_plan(
        [a], "quick", Execution(device="cpu")
    )  # 2 missing runs at the quick profile's typical time
    assert "with 2 workers" in estimate(plan, 8) and "with 8" not in estimate(plan, 8)
    assert "workers" not in estimate(plan, 1)
