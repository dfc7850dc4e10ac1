"""``--seeds`` is a list of seeds from the command line on (or a count N for 0..N-1)."""

from __future__ import annotations

import pytest

from dmllab.experiments import registry
from dmllab.experiments.execution import Execution
from dmllab.pipeline.plan import check_seeds, make_plan


@pytest.mark.parametrize(
    ("given", "seeds"),
    [
        (None, None),
        (3, (0, 1, 2)),
        ("3", (0, 1, 2)),
        ("0,3,7", (0, 3, 7)),
        ([5, 2], (5, 2)),
        ((1, 4), (1, 4)),
    ],
)
def test_seeds_are_a_list_or_a_count(given, seeds):
    assert check_seeds(given) == seeds


@pytest.mark.parametrize("given", [1, "1", "0,0", "0,-1", "a,b", "0, x", [0], True, [0, True], 2.0])
def test_what_names_no_interval_is_refused(given):
    with pytest.raises(ValueError, match="--seeds"):
        check_seeds(given)


def test_the_plan_runs_the_seeds_listed():
    artifact = registry.select("pnpp_fig4a_temperature")
    plan = make_plan(artifact, "quick", Execution("cpu"), seeds="0,3")
    assert plan.seeds == (0, 3)
    assert sorted({r.run.seed for r in plan.runs}) == [0, 3]
    assert {(r.run.seed, r.run.draw) for r in plan.runs} == {(0, 0), (3, 3)}
