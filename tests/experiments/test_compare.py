"""Paired per-seed effects (and the runs they read), the paper-vs-reproduced join and the verdict table."""

import pandas as pd
import pytest

from dmllab.experiments import Artifact, Claim, Figure
from dmllab.experiments.compare import (
    arms_of,
    averaged,
    extremes,
    members,
    paired,
    paper_vs_reproduced,
    per_seed,
)
from dmllab.experiments.verdicts import verdict_table


def _rows():
    recs = []
    for seed, (a, b) in enumerate([(50.0, 40.0), (52.0, 41.0), (51.0, 43.0)]):
        recs += [
            {"variant": "A", "dataset": "synthetic", "seed": seed, "metric": "R@1", "value": a},
            {"variant": "B", "dataset": "synthetic", "seed": seed, "metric": "R@1", "value": b},
        ]
    return pd.DataFrame(recs)


def test_paired_is_per_seed():
    eff = paired(_rows(), "R@1", {"variant": "A"}, {"variant": "B"})
    assert list(eff) == [10.0, 11.0, 8.0]
    assert per_seed(_rows(), "R@1", variant="A").tolist() == [50.0, 52.0, 51.0]


def test_effects_record_the_runs_each_side_read():
    rows = _rows().assign(run_id=lambda d: d["variant"] + "/seed" + d["seed"].astype(str))
    eff = paired(rows, "R@1", {"variant": "A"}, {"variant": "B"})
    assert arms_of(eff) == ({"A/seed0", "A/seed1", "A/seed2"}, {"B/seed0", "B/seed1", "B/seed2"})
    assert arms_of(paired(_rows(), "R@1", {"variant": "A"}, {"variant": "B"})) == (frozenset(), frozenset())
    both = members({"x": eff, "y": paired(rows, "R@1", {"variant": "B"}, {"variant": "A"})})
    assert list(both.columns) == ["x", "y"] and both["y"].tolist() == [-10.0, -11.0, -8.0]
    assert arms_of(both)[0] == arms_of(eff)[0] | arms_of(eff)[1]
    mean = averaged([eff, eff * 0.0 + 2.0])
    assert mean.tolist() == [6.0, 6.5, 5.0] and arms_of(mean)[0] == arms_of(eff)[0]


def test_extremes_low_minus_high():
    df = pd.DataFrame(
        [
            {"seed": s, "metric": "m", "param_t": t, "value": v}
            for s in (0, 1)
            for t, v in ((0.1, 5.0 + s), (1.0, 2.0))
        ]
    )
    assert extremes(df, "m", "t").tolist() == [3.0, 4.0]


def _artifact(**kw):
    return Artifact(
        id="pnpp_table0_test",
        paper="pnpp",
        label="Table 3",
        title="t",
        description="d",
        parameters={p: {"seeds": [0, 1, 2]} for p in ("smoke", "quick", "paper")},
        rows=lambda p, lookup: [],
        figures=(Figure(lambda t: None),),
        **kw,
    )


def test_paper_vs_reproduced_joins_the_printed_cell():
    reference = pd.DataFrame(
        [
            {
                "paper": "pnpp",
                "artifact": "Table 3",
                "row": "ProxyNCA++",
                "column": "R@1",
                "dataset": "cub",
                "metric": "R@1",
                "value": 50.0,
                "note": "+-1.5; arch=R50",
            },
            {
                "paper": "pnpp",
                "artifact": "Table 3",
                "row": "ProxyNCA++",
                "column": "R@1",
                "dataset": "cars",
                "metric": "R@1",
                "value": 80.0,
                "note": "",
            },
        ]
    )
    art = _artifact(reference=lambda r: ("Table 3", "ProxyNCA++", "R@1") if r["variant"] == "A" else None)
    table = paper_vs_reproduced(art, _rows(), reference)
    assert len(table) == 1
    line = table.iloc[0]
    assert line["paper"] == 50.0 and line["paper +-"] == 1.5  # synthetic faces the CUB cell
    assert line["reproduced"] == pytest.approx(51.0) and line["seeds"] == 3
    assert pd.isna(line["delta"]) and line["within paper +-"] == ""  # a stand-in: side by side, no difference
    on_cub = paper_vs_reproduced(art, _rows().assign(dataset="cub"), reference).iloc[0]
    assert on_cub["delta"] == pytest.approx(1.0) and on_cub["within paper +-"] == "yes"


def test_verdict_table():
    art = _artifact(
        claims=(
            Claim(
                "A beats B", lambda df: paired(df, "R@1", {"variant": "A"}, {"variant": "B"}), unit="points"
            ),
            Claim("B beats A", lambda df: paired(df, "R@1", {"variant": "B"}, {"variant": "A"})),
            Claim("missing variant", lambda df: paired(df, "R@1", {"variant": "C"}, {"variant": "A"})),
        )
    )
    table = verdict_table(art, _rows())
    assert table["verdict"].tolist() == ["yes", "no", "inconclusive"]
    assert table.loc[0, "95% low"] > 0 and table.loc[0, "seeds"] == 3
    assert "cannot decide" in table.loc[2, "why"]
    assert table.loc[2, "verdict"] == "inconclusive" and table["paper effect"].isna().all()


def test_lookup_rows_mark_diverged_runs_and_raise_for_missing_ones():
    from types import SimpleNamespace

    from dmllab.experiments import Lookup, MissingRunError, Params, Run
    from dmllab.experiments.execution import Execution
    from dmllab.training import DivergedRunError, presets

    cfg = presets.get("proxynca++", "synthetic", "smoke")
    ok, diverged, missing = Run(cfg, 0, variant="BN"), Run(cfg, 1, variant="SM+ α"), Run(cfg, 2, variant="X")

    class Stored(Lookup):
        def result(self, run):
            if run.seed == 1:
                raise DivergedRunError("recorded as diverged")
            if run.seed == 2:
                raise MissingRunError("not stored")
            return SimpleNamespace(
                metrics={"R@1": 0.5},
                wall_time_s=1.0,
                config_hash="h",
                device="cpu",
                run_dir=None,
                train_metrics={},
            )

    lookup = Stored(Params({"profile": "smoke", "seeds": [0]}, Execution("cpu")))
    rows = pd.DataFrame(lookup.rows([ok, diverged]))
    assert set(rows.loc[rows["variant"] == "SM+ α", "metric"]) == {"diverged"}
    assert rows.loc[rows["variant"] == "SM+ α", "value"].tolist() == [1.0]
    assert rows.loc[(rows["variant"] == "BN") & (rows["metric"] == "R@1"), "value"].item() == pytest.approx(
        50.0
    )
    assert set(rows["run_id"]) == {ok.key, diverged.key}
    with pytest.raises(MissingRunError):
        lookup.rows([ok, missing])
