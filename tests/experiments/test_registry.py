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
        for run in planned_runs(artifact, artifact.params(profile, "device=cpu")):
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


def test_one_table_of_papers():
    """Every paper's names come from dmllab.reference.PAPER_TABLE: its package holds its artifacts, its spelling
    in results/reference is the one the reference CSVs use, and its prefix starts its artifacts' ids."""
    from pathlib import Path

    import dmllab.experiments
    from dmllab.reference import PAPER_TABLE, REFERENCE_PAPERS, load_reference

    assert PAPERS == tuple(p.key for p in PAPER_TABLE)
    here = Path(dmllab.experiments.__file__).parent
    assert all((here / p.package / "__init__.py").is_file() for p in PAPER_TABLE)
    assert set(load_reference()["paper"]) == set(REFERENCE_PAPERS)
    for artifact in ARTIFACTS:
        paper = next(p for p in PAPER_TABLE if p.key == artifact.paper)
        assert paper.prefix is None or artifact.id.startswith(f"{paper.prefix}_")
