"""The verdict layer's four classes and checks: not testable (by the profile, by an arm that does not train),
checks apart from verdicts, a shared comparison counted once, Holm's adjustment against a hand computation, and
what differs from the paper printed with the verdict."""

import math

import pandas as pd
import pytest
from scipy import stats as sps

from dmllab.experiments import Artifact, Claim, Figure, stats, verdicts
from dmllab.experiments.compare import paired

SEEDS = (0, 1, 2)


def _rows(gaps: dict[str, tuple[float, float, float]], profile: str = "quick") -> pd.DataFrame:
    """Rows of variant "B" at 40 and of every other variant at 40 + its gap per seed."""
    recs = []
    for seed in SEEDS:
        recs.append({"variant": "B", "seed": seed, "metric": "R@1", "value": 40.0, "profile": profile})
        for variant, gap in gaps.items():
            recs.append(
                {
                    "variant": variant,
                    "seed": seed,
                    "metric": "R@1",
                    "value": 40.0 + gap[seed],
                    "profile": profile,
                }
            )
    return pd.DataFrame(recs)


def _beats(variant: str):
    return lambda df: paired(df, "R@1", {"variant": variant}, {"variant": "B"})


def _artifact(aid: str, claims: tuple[Claim, ...], paper: str = "pnpp") -> Artifact:
    return Artifact(
        id=aid,
        paper=paper,
        label="Table 3",
        title="t",
        description="d",
        parameters={p: {"seeds": list(SEEDS)} for p in ("smoke", "quick", "paper")},
        rows=lambda p, lookup: [],
        figures=(Figure(lambda t: None),),
        claims=claims,
    )


def _benchmark_csv(folder, gains: dict[str, tuple[float, float]], profile: str = "quick") -> None:
    """A fake ``offline_benchmark.csv`` with ``gain_over_pretrained`` rows: ``{label: (gain per seed, threshold)}``."""
    recs = [
        {
            "experiment": "offline_benchmark",
            "variant": label,
            "profile": profile,
            "seed": seed,
            "metric": "gain_over_pretrained",
            "value": gain + seed - 1.0,  # mean over the 3 seeds = gain
            "param_threshold": threshold,
        }
        for label, (gain, threshold) in gains.items()
        for seed in SEEDS
    ]
    pd.DataFrame(recs).to_csv(folder / "offline_benchmark.csv", index=False)


def test_training_status_reads_the_benchmark_rows(tmp_path):
    assert verdicts.training_status("quick", tmp_path) == {}  # no file: unknown
    _benchmark_csv(tmp_path, {"proxynca++": (14.0, 10.0), "proxy_anchor": (5.0, 8.0)})
    status = verdicts.training_status("quick", tmp_path)
    assert status == {"proxynca++": (pytest.approx(14.0), 10.0), "proxy_anchor": (pytest.approx(5.0), 8.0)}
    assert verdicts.training_status("paper", tmp_path) == {}


def test_not_testable_when_an_arm_does_not_train(tmp_path):
    _benchmark_csv(tmp_path, {"proxynca++": (14.0, 10.0), "proxy_anchor": (5.0, 8.0)})
    status = verdicts.training_status("quick", tmp_path)
    rows = _rows({"A": (10.0, 11.0, 8.0)})
    claim = Claim("A beats B", _beats("A"), arms=("proxynca++", "proxy_anchor"))
    j = verdicts.assess(claim, rows, "quick", status)
    assert j.verdict == "not testable"
    assert "proxy_anchor does not train on quick" in j.why and "+5.0" in j.why and "below 8" in j.why
    assert j.interval is not None and j.interval.mean == pytest.approx(29 / 3)  # still shown
    trains = Claim("A beats B", _beats("A"), arms=("proxynca++",))
    assert verdicts.assess(trains, rows, "quick", status).verdict == "yes"


def test_unknown_training_status_judges_normally_and_says_so():
    rows = _rows({"A": (10.0, 11.0, 8.0)})
    claim = Claim("A beats B", _beats("A"), arms=("proxynca++",))
    interval, verdict, why = verdicts.judge(claim, rows, "quick", None)
    assert verdict == "yes" and "whether proxynca++ trains on quick is unknown" in why
    plain = Claim("A beats B", _beats("A"))
    assert verdicts.judge(plain, rows, "quick", None)[1:] == ("yes", "")


def test_not_testable_on_a_named_profile_only():
    claim = Claim(
        "A beats B", _beats("A"), not_testable={"quick": "heating needs a converged model"}, differs="one run"
    )
    rows = _rows({"A": (10.0, 11.0, 8.0)})
    assert verdicts.assess(claim, rows, "quick").verdict == "not testable"
    assert verdicts.assess(claim, rows, "quick").why == "heating needs a converged model"
    assert verdicts.assess(claim, rows.assign(profile="paper"), "paper").verdict == "yes"


def test_checks_are_apart_from_verdicts():
    art = _artifact(
        "pnpp_table0_checks",
        (
            Claim("A beats B", _beats("A")),
            Claim("property holds", _beats("A"), kind="check", unit="x"),
            Claim("property fails on a seed", _beats("C"), kind="check"),
            Claim("property without rows", _beats("Z"), kind="check"),
        ),
    )
    rows = _rows({"A": (10.0, 11.0, 8.0), "C": (1.0, -1.0, 2.0)})
    table = verdicts.verdict_table(art, rows)
    assert table["claim"].tolist() == ["A beats B"]
    checks = verdicts.check_table(art, rows)
    assert checks["result"].tolist() == ["passes", "fails", "cannot decide"]
    assert checks.loc[0, "measured"] == pytest.approx(29 / 3) and checks.loc[0, "lowest seed"] == 8.0
    assert checks.loc[1, "why"] == "1 of 3 seed(s) fail"
    frame = verdicts.claims_frame([art], {art.id: rows}, "quick")
    assert (frame.loc[frame["kind"] == "check", "holm p"].isna()).all()
    counts = verdicts.counts(frame, ["pnpp"]).iloc[0]
    assert (counts["yes"], counts["tested"], counts["checks"], counts["checks passed"]) == (1, 1, 3, 1)


def test_differs_is_printed_with_the_verdict():
    art = _artifact(
        "pnpp_table0_differs",
        (
            Claim("A beats B", _beats("A"), differs="8 epochs, not 50"),
            Claim("C beats B", _beats("C"), differs={"paper": "the release's schedule"}),
        ),
    )
    rows = _rows({"A": (10.0, 11.0, 8.0), "C": (1.0, -1.0, 2.0)})
    table = verdicts.verdict_table(art, rows)  # the profile is read from the rows
    assert table["differs"].tolist() == ["8 epochs, not 50", ""]
    assert verdicts.verdict_table(art, rows.assign(profile="paper"))["differs"].tolist() == [
        "",
        "the release's schedule",
    ]


def test_p_value_is_the_one_sample_t_test():
    effects = [1.0, 2.5, 0.2, 1.1]
    assert stats.p_value(effects) == pytest.approx(sps.ttest_1samp(effects, 0.0).pvalue)
    assert stats.p_value([0.5, 0.5, 0.5]) == 0.0 and stats.p_value([0.0, 0.0]) == 1.0
    assert math.isnan(stats.p_value([3.0]))
    # p < 0.05 exactly when the 95% interval excludes 0
    for effects in ([1.0, 1.2, 0.9], [3.0, 0.1, -0.2], [-1.0, -1.2, -0.9]):
        iv = stats.interval(effects)
        assert (stats.p_value(effects) < 0.05) == (stats.verdict(iv) != "inconclusive")


def test_holm_against_a_hand_computation():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> max 0.06)
    assert stats.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert stats.holm([]) == []
    with pytest.raises(ValueError):
        stats.holm([0.1, math.nan])


def test_shared_comparison_counted_once_and_holm_across_the_profile():
    a = _artifact(
        "pnpp_table0_a",
        (
            Claim("A beats B", _beats("A"), key="a"),
            Claim("C beats B", _beats("C"), key="c"),
            Claim("D beats B", _beats("D"), not_testable={"quick": "not kept"}),
            Claim("missing", _beats("Z")),
        ),
    )
    b = _artifact("pnpp_fig0_b", (Claim("A beats B (as Fig. 0)", _beats("A"), same_as="pnpp_table0_a:a"),))
    rows = _rows({"A": (10.0, 11.0, 8.0), "C": (0.3, 0.5, 0.4), "D": (5.0, 5.0, 6.0)})
    frame = verdicts.claims_frame([a, b], {a.id: rows, b.id: rows}, "quick")
    assert frame["counted"].tolist() == [True, True, True, True, False]
    assert frame["same as"].tolist() == ["pnpp_fig0_b", "", "", "", "pnpp_table0_a"]
    assert frame["tested"].tolist() == [True, True, False, False, False]  # not testable, no rows, shared: out
    pa, pc = stats.p_value([10.0, 11.0, 8.0]), stats.p_value([0.3, 0.5, 0.4])
    expected = stats.holm([pa, pc])
    assert frame.loc[0, "holm p"] == pytest.approx(expected[0])
    assert frame.loc[1, "holm p"] == pytest.approx(expected[1])
    assert frame.loc[4, "holm p"] == frame.loc[0, "holm p"]  # the shared claim shows its original's
    assert math.isnan(frame.loc[2, "holm p"]) and frame.loc[2, "verdict"] == "not testable"
    assert frame.loc[2, "effect"] == pytest.approx(16 / 3)  # shown though not testable
    assert frame.loc[0, "holm verdict"] == ("yes" if expected[0] < 0.05 else "inconclusive")
    counts = verdicts.counts(frame, ["pnpp", "heated"])
    assert counts["paper"].tolist() == ["pnpp"]
    line = counts.iloc[0]
    assert (line["yes"], line["no"], line["inconclusive"], line["not testable"]) == (2, 0, 1, 1)
    assert (line["tested"], line["shared"]) == (2, 1)


def test_seeds_cover_reads_data_seed():
    art = _artifact("pnpp_table0_cover", ())
    assert verdicts.seeds_cover(art, "quick") == verdicts.SEEDS_COVER
    drawn = Artifact(
        **{
            **{
                f: getattr(art, f)
                for f in ("id", "paper", "label", "title", "description", "rows", "figures")
            }
        },
        parameters={p: {"seeds": [0, 1], "data_seed": p != "smoke"} for p in ("smoke", "quick", "paper")},
    )
    assert verdicts.seeds_cover(drawn, "quick") == verdicts.DATA_SEEDS_COVER
    assert verdicts.seeds_cover(drawn, "smoke") == verdicts.SEEDS_COVER


def test_every_same_as_names_an_original():
    """A shared claim names ``<artifact id>:<claim key>`` of a claim that is itself no copy."""
    from dmllab.experiments import registry

    keys = {f"{a.id}:{c.key}": c for a in registry.all_artifacts() for c in a.claims if c.key}
    for artifact in registry.all_artifacts():
        for claim in artifact.claims:
            if claim.same_as:
                assert claim.same_as in keys, (artifact.id, claim.text, claim.same_as)
                assert not keys[claim.same_as].same_as, (artifact.id, claim.same_as)
                assert claim.kind == keys[claim.same_as].kind == "verdict"
