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
    if not artifact.figures:  # one setting is one number per metric: a table row, not a one-bar chart
        configs = {r.key.split("/")[0] for r in artifact.runs(artifact.params("quick", device="cpu"))}
        assert len(configs) == 1, "an artifact without a figure trains one setting"
    quick = artifact.defaults("quick")
    if artifact.claims:
        assert len(quick["seeds"]) >= 3, "claims are judged over at least 3 seeds on the quick profile"
    for profile in ("smoke", "quick"):  # runs are declared as data: listing them needs no training
        for run in planned_runs(artifact, artifact.params(profile, device="cpu")):
            assert run.config.profile in ("smoke", "quick"), run.config.profile
            assert run.key.endswith(f"/seed{run.seed}")


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
