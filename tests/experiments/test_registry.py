"""Every artifact module is discovered, declares a valid artifact, and its notebook is in sync."""

import re

import pytest

from dmllab.experiments import PAPERS, registry
from dmllab.experiments.artifact import ID_PREFIX
from dmllab.experiments.lookup import planned_runs
from dmllab.pipeline.template import stale_notebooks

ARTIFACTS = registry.all_artifacts()
IDS = [a.id for a in ARTIFACTS]


def test_the_existing_artifacts_are_discovered():
    assert {
        "pnpp_fig3_two_moons",
        "pnpp_sec36_proxy_gradients",
        "heated_fig1_gradients",
        "heated_fig2_digits",
        "ps_fig2_gaussian",
        "offline_benchmark",
    } <= set(IDS)


@pytest.mark.parametrize("artifact", ARTIFACTS, ids=IDS)
def test_declaration(artifact):
    if artifact.paper in ID_PREFIX:
        assert re.fullmatch(rf"{ID_PREFIX[artifact.paper]}_(table|fig|sec|app)[0-9a-z_]+", artifact.id)
    for profile in ("smoke", "quick"):  # runs are declared as data: listing them needs no training
        for run in planned_runs(artifact, artifact.params(profile, device="cpu")):
            assert run.config.profile in ("smoke", "quick"), run.config.profile
            assert run.key.endswith(f"/seed{run.seed}")


def test_every_declaration_rule_is_checked_when_the_artifact_is_built():
    """The rules live in Artifact itself (one line naming the artifact), not in this test."""
    import dataclasses

    sweep = registry.get("pnpp_fig4a_temperature")
    quick = {**sweep.parameters["quick"], "seeds": [0, 1]}
    with pytest.raises(
        ValueError, match=r"^artifact 'pnpp_fig4a_temperature': its claims are judged over at least 3"
    ):
        dataclasses.replace(sweep, parameters={**sweep.parameters, "quick": quick})
    with pytest.raises(
        ValueError, match=r"^artifact 'pnpp_fig4a_temperature': without a figure it trains one"
    ):
        dataclasses.replace(sweep, figures=())
    paper = {**sweep.parameters["paper"], "datasets": ["synthetic"]}
    with pytest.raises(
        ValueError, match=r"^artifact 'pnpp_fig4a_temperature': its paper profile trains on synthetic"
    ):
        dataclasses.replace(sweep, parameters={**sweep.parameters, "paper": paper})
    assert dataclasses.replace(
        sweep, parameters={**sweep.parameters, "paper": paper}, benchmark_on_paper=True
    )
    for bad in (dict(tier="main"), dict(paper="nope"), dict(id="pnpp_temperature")):
        with pytest.raises(ValueError, match=r"^artifact"):
            dataclasses.replace(sweep, **bad)


def test_select_patterns():
    assert [a.id for a in registry.select("two_moons")] == ["pnpp_fig3_two_moons"]
    assert {a.id for a in registry.select("heated_*")} >= {"heated_fig1_gradients", "heated_fig2_digits"}
    assert [a.paper for a in registry.select(None)] == sorted((a.paper for a in ARTIFACTS), key=PAPERS.index)
    with pytest.raises(ValueError, match="matches no artifact"):
        registry.select("no_such_thing")
    for empty in ("", " ", ","):  # no pattern at all is an error, not "everything"
        with pytest.raises(ValueError, match="names no artifact"):
            registry.select(empty)
    with pytest.raises(KeyError, match="valid artifacts"):
        registry.get("nope")


def test_notebooks_in_sync():
    assert stale_notebooks() == [], "regenerate with `dmllab notebooks`"
