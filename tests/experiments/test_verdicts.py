"""The verdict layer: the six classes against their definitions (yes / no / equivalent / smaller than the paper /
inconclusive / not testable) under the pre-registered rules (docs/preregistration.md), intersection-union claims, the
paper's effect from its printed cells, the validation gate, every statement counted, Holm over each paper's primary
claims and Benjamini-Hochberg over the others (every class), and what an interval covers."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from dmllab.experiments import (
    Artifact,
    Claim,
    Figure,
    Printed,
    Smallest,
    gate,
    multiplicity,
    printed,
    stats,
    verdicts,
)
from dmllab.experiments.compare import averaged, members, paired

SEEDS = (0, 1, 2)


def _rows(gaps: dict[str, tuple[float, ...]], profile: str = "quick", runs: bool = True) -> pd.DataFrame:
    """Rows of variant "B" at 40 and of every other variant at 40 + its gap per seed, each with its run id."""
    recs = []
    n = len(next(iter(gaps.values()))) if gaps else len(SEEDS)
    for seed in range(n):
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
    frame = pd.DataFrame(recs)
    if runs:
        frame["run_id"] = frame["variant"] + "/seed" + frame["seed"].astype(str)
    return frame


def _beats(variant: str, other: str = "B"):
    return lambda df: paired(df, "R@1", {"variant": variant}, {"variant": other})


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


def _verdict(gaps, paper=math.nan, profile="quick", **claim):
    c = Claim("A beats B", _beats("A"), unit="R@1 points", **claim)
    return verdicts.assess(c, _rows({"A": gaps}, profile), profile, None, paper)


# ------------------------------------------------------------------------------------------- the six classes


def test_yes_and_no_are_the_interval_beyond_zero():
    assert _verdict((10.0, 11.0, 8.0)).verdict == "yes"
    assert _verdict((-10.0, -11.0, -8.0)).verdict == "no"
    j = _verdict((3.0, 0.1, -0.2))
    assert j.verdict == "inconclusive" and "contains 0" in j.why
    assert _verdict((5.0,)).verdict == "inconclusive"  # one seed never decides


def test_equivalent_is_tost_inside_the_margin():
    gaps = (0.1, -0.2, 0.05, 0.0, 0.15)
    iv95 = stats.interval(gaps)
    assert -1.0 < iv95.low and iv95.high < 1.0
    # +-1 point for an effect in points on every profile, whatever the paper's effect (pre-registered)
    for profile in ("quick", "paper"):
        for paper in (math.nan, 0.2, 20.0):
            j = _verdict(gaps, paper=paper, profile=profile)
            assert j.delta == verdicts.DELTA_POINTS == 1.0 and j.verdict == "equivalent", (profile, paper)
    wide = (0.9, -0.9, 0.5, -0.6, 0.8)  # inside +-1 on average, but the 95% interval is not
    assert stats.interval(wide).high > 1.0 and _verdict(wide).verdict == "inconclusive"
    # TOST at 2.5% per side: the 95% interval, not the 90% one
    edge = (0.4, 1.0, 0.2, 0.9, 0.5)
    assert stats.interval(edge, confidence=0.90).high < 1.0 < stats.interval(edge).high
    assert _verdict(edge, paper_says="equivalent").verdict == "inconclusive"
    # another unit without a stated margin: no equivalence off the paper profile, half the paper's effect on it
    other = Claim("A beats B", _beats("A"), unit="%")
    rows = _rows({"A": gaps})
    assert math.isnan(verdicts.assess(other, rows, "quick", None, 2.0).delta)
    assert verdicts.assess(other, rows.assign(profile="paper"), "paper", None, 2.0).delta == 1.0


def test_smaller_than_the_paper_is_tested_on_the_paper_profile_only():
    gaps = (-1.0, -2.0, 0.5)  # 95% interval about [-4.0, 2.3]: contains 0, leans below
    iv = stats.interval(gaps)
    assert (
        _verdict(gaps, paper=iv.high + 0.1, profile="paper").verdict == verdicts.SMALLER
    )  # high < its effect
    assert _verdict(gaps, paper=iv.high - 0.1, profile="paper").verdict == "inconclusive"
    assert _verdict(gaps, paper=2 * (iv.high + 0.1)).verdict == "inconclusive"  # quick: dropped
    assert _verdict(gaps, paper=-iv.high, profile="paper").verdict == "inconclusive"  # no effect claimed
    assert _verdict((4.0, 5.0, 4.5), paper=40.0, profile="paper").verdict == "yes"  # the claimed sign wins
    # its p-value: the one-sided test of mean >= the paper's effect, on the two-sided scale
    j = _verdict(gaps, paper=iv.high + 0.1, profile="paper")
    one_sided = sps.ttest_1samp(gaps, iv.high + 0.1, alternative="less").pvalue
    assert j.p == pytest.approx(2 * one_sided) and j.p < 0.05


def test_a_claim_that_states_an_equivalence_is_judged_by_equivalence_only():
    gaps = (0.3, 0.35, 0.32)  # significantly positive, but well inside 1 point
    assert _verdict(gaps).verdict == "yes"
    j = _verdict(gaps, paper_says="equivalent", margin=1.0)
    tost = max(
        sps.ttest_1samp(gaps, -1.0, alternative="greater").pvalue,
        sps.ttest_1samp(gaps, 1.0, alternative="less").pvalue,
    )
    assert j.verdict == "equivalent" and j.p == pytest.approx(2 * tost)
    far = (-5.0, -6.0, -5.5)  # clearly below 0: never "no" for a stated equivalence
    assert _verdict(far).verdict == "no"
    j = _verdict(far, paper_says="equivalent", margin=1.0)
    assert j.verdict == "inconclusive" and "equivalence only" in j.why


def test_power_columns_follow_the_noncentral_t():
    gaps = (3.0, -2.0, 4.0, -1.0)
    j = _verdict(gaps, paper=6.0)
    sd = stats.sd(gaps)
    assert j.verdict == "inconclusive"
    assert j.seeds_observed == stats.seeds_needed(np.mean(gaps), sd)
    assert j.seeds_paper == stats.seeds_needed(3.0, sd)  # quick: half the paper's effect
    assert j.seeds_paper < j.seeds_observed


def test_not_testable_on_a_named_profile_only():
    claim = Claim("A beats B", _beats("A"), not_testable={"quick": "heating needs a converged model"})
    rows = _rows({"A": (10.0, 11.0, 8.0)})
    j = verdicts.assess(claim, rows, "quick")
    assert j.verdict == "not testable" and j.why == "heating needs a converged model"
    assert j.interval is not None and j.interval.mean == pytest.approx(29 / 3)  # still shown
    assert verdicts.assess(claim, rows.assign(profile="paper"), "paper").verdict == "yes"


# --------------------------------------------------------------------------------- intersection-union tests


def _set_claim(**kw):
    return Claim(
        "A beats B and C",
        lambda df: members({"vs B": _beats("A")(df), "vs C": _beats("A", "C")(df)}),
        unit="R@1 points",
        **kw,
    )


def _three(a, c):
    rows = _rows({"A": a, "C": c})
    return rows


def test_a_set_claim_is_yes_only_when_every_member_is():
    strong, weak = (10.0, 11.0, 9.0), (9.0, 11.5, 12.0)  # A - C = 1, -0.5, -3: not above 0 on its own
    j = verdicts.assess(_set_claim(), _three(strong, weak), "quick")
    assert j.verdict == "inconclusive" and j.members == 2 and "weakest of 2: vs C" in j.why
    assert j.effects == pytest.approx((1.0, -0.5, -3.0))
    j = verdicts.assess(_set_claim(), _three(strong, (1.0, 2.0, 1.5)), "quick")
    assert j.verdict == "yes"
    # the IUT p-value: the largest member p
    p = max(sps.ttest_1samp(v, 0.0).pvalue for v in ([10.0, 11.0, 9.0], [9.0, 9.0, 7.5]))
    assert j.p == pytest.approx(p)


def test_a_set_claim_is_no_when_a_member_is_below_zero_at_the_bonferroni_level():
    a = (10.0, 11.0, 9.0)
    c_mild = (11.0, 12.5, 10.5)  # A - C = -1, -1.5, -1.5
    members_ = [-1.0, -1.5, -1.5]
    plain, wide = stats.interval(members_), stats.interval(members_, confidence=1 - 0.05 / 2)
    assert plain.high < 0 and wide.high < 0
    j = verdicts.assess(_set_claim(), _three(a, c_mild), "quick")
    assert j.verdict == "no" and j.p == pytest.approx(min(1.0, 2 * sps.ttest_1samp(members_, 0.0).pvalue))


def test_only_the_arms_a_claim_says_are_better_are_gated():
    status = {
        "c": verdicts.Gate(2.0, -1.0, 0.0, 3),
        "b": verdicts.Gate(20.0, 15.0, 0.0, 3),
        "proxynca++": verdicts.Gate(16.0, 12.0, 0.0, 3),
    }
    rows = _three((10.0, 11.0, 9.0), (1.0, 2.0, 1.5))
    worse = _set_claim(worse_arms=("b", "c"))
    j = verdicts.assess(worse, rows, "quick", status)
    assert j.verdict == "yes" and j.members == 2  # the baseline c does not learn: it is what the claim says
    assert j.learning == "learns relative to proxynca++ (validation gain ratio): b 1.25, c 0.12"
    worse_arm = Claim("A beats B", _beats("A"), arms=("b",), worse_arms=("c",))
    assert verdicts.assess(worse_arm, rows, "quick", status).verdict == "yes"
    better = Claim("A beats B", _beats("A"), arms=("c",), worse_arms=("b",))
    j = verdicts.assess(better, rows, "quick", status)
    assert j.verdict == "not testable" and "c does not learn on quick" in j.why


def test_a_better_member_that_does_not_learn_is_left_out_of_the_set_or_the_mean():
    status = {"c": verdicts.Gate(2.0, -1.0, 0.0, 3), "b": verdicts.Gate(20.0, 15.0, 0.0, 3)}
    rows = _three((10.0, 11.0, 9.0), (9.0, 11.5, 12.0))  # A - C = 1, -0.5, -3
    claim = _set_claim(member_arms={"vs B": "b", "vs C": "c"})
    j = verdicts.assess(claim, rows, "quick", status)
    assert j.verdict == "yes" and j.members == 1 and "c does not learn" in j.why and "vs C left out" in j.why
    mean = Claim(
        "A beats B and C on average",
        lambda df: averaged({"vs B": _beats("A")(df), "vs C": _beats("A", "C")(df)}),
        member_arms={"vs B": "b", "vs C": "c"},
    )
    j = verdicts.assess(mean, rows, "quick", status)
    assert (
        j.effects == pytest.approx((10.0, 11.0, 9.0)) and "vs C left out" in j.why
    )  # the mean of vs B alone
    assert verdicts.assess(mean, rows, "quick", {}).effects == pytest.approx((5.5, 5.25, 3.0))
    gone = {"b": status["c"], "c": status["c"]}
    assert verdicts.assess(mean, rows, "quick", gone).verdict == "not testable"


def test_a_regularisers_claim_outside_the_papers_regime_is_not_testable():
    rows = _rows({"A": (10.0, 11.0, 8.0)})
    claim = Claim("A beats B", _beats("A"), training_fit=True)
    low, high = verdicts.Regime(51.1, "measured here"), verdicts.Regime(90.0, "measured here")
    j = verdicts.assess(claim, rows, "quick", None, math.nan, low)
    assert j.verdict == "not testable" and "optimisation-limited (train R@1 51.1 %" in j.why
    assert verdicts.assess(claim, rows, "quick", None, math.nan, high).verdict == "yes"
    plain = Claim("A beats B", _beats("A"))
    assert verdicts.assess(plain, rows, "quick", None, math.nan, low).verdict == "yes"
    assert verdicts.assess(claim, rows.assign(profile="paper"), "paper", None, math.nan, low).verdict == "yes"


# ------------------------------------------------------------------------------------------- the inputs


def test_paper_effect_from_printed_cells():
    ref = pd.DataFrame(
        [
            {"paper": "pnpp", "artifact": "Table 7", "row": r, "column": "R@1", "dataset": "cub", "value": v}
            for r, v in (("all", 72.2), ("-max", 69.0), ("-fast", 70.3))
        ]
    )
    cell = {r: ("Table 7", r, "R@1", "cub") for r in ("all", "-max", "-fast", "absent")}
    assert verdicts.effect_of(printed(cell["all"], cell["-max"]), "pnpp", ref) == pytest.approx(3.2)
    both = printed(cell["all"], [cell["-max"], cell["-fast"]])
    assert verdicts.effect_of(both, "pnpp", ref) == pytest.approx(72.2 - (69.0 + 70.3) / 2)
    worst = Smallest((printed(cell["all"], cell["-max"]), printed(cell["all"], cell["-fast"])))
    assert verdicts.effect_of(worst, "pnpp", ref) == pytest.approx(1.9)
    assert math.isnan(verdicts.effect_of(Printed((cell["absent"],)), "pnpp", ref))
    assert verdicts.effect_of({"quick": 2.0, "paper": 3.0}, "pnpp", ref, "paper") == 3.0
    assert verdicts.effect_of(0.98, "pnpp", ref) == 0.98 and math.isnan(verdicts.effect_of(None, "pnpp", ref))


def _gate_csv(folder, gains: dict[str, tuple[tuple[float, ...], float]], profile: str = "quick") -> None:
    recs = [
        {
            "experiment": "offline_benchmark",
            "variant": label,
            "profile": profile,
            "seed": seed,
            "metric": verdicts.GAIN_METRIC,
            "value": value,
            "param_threshold": threshold,
        }
        for label, (values, threshold) in gains.items()
        for seed, value in enumerate(values)
    ]
    pd.DataFrame(recs).to_csv(folder / "offline_benchmark.csv", index=False)


def test_the_gate_asks_whether_the_lower_bound_is_above_zero(tmp_path):
    assert verdicts.training_status("quick", tmp_path) == {}  # no file: unknown
    # a threshold the rows still carry (an older rule's) is not read: the pre-registered bar is 0
    _gate_csv(
        tmp_path,
        {
            "margin": ((9.0, 12.0, 10.5), 10.0),
            "flat": ((1.0, -2.0, 0.5), 10.0),
            "pnpp": ((20.0, 21.0, 19.5), 10.0),
            "diverged": ((20.0, float("nan"), 19.5), 10.0),
        },
    )
    status = verdicts.training_status("quick", tmp_path)
    iv = stats.interval([9.0, 12.0, 10.5])
    assert status["margin"].mean == pytest.approx(10.5) and status["margin"].low == pytest.approx(iv.low)
    assert status["margin"].threshold == 0.0 and status["margin"].trains and status["pnpp"].trains
    assert not status["flat"].trains  # its lower bound is below 0
    assert status["diverged"].diverged == 1 and not status["diverged"].trains  # no seed may diverge
    assert verdicts.training_status("paper", tmp_path) == {}
    claim = Claim("A beats B", _beats("A"), arms=("pnpp", "diverged"))
    j = verdicts.assess(claim, _rows({"A": (10.0, 11.0, 8.0)}), "quick", status)
    assert j.verdict == "not testable" and "diverged does not train on quick (1 seed(s) diverged)" in j.why


def test_seeds_cover_reads_the_run_keys():
    drawn = pd.DataFrame({"run_id": ["k0/seed0", "k1/seed1", "k2/seed2"]})
    fixed = pd.DataFrame({"run_id": ["k/seed0", "k/seed1", "k/seed2"]})
    toy = _artifact("pnpp_table0_cover", ())
    trains = Artifact(**{**toy.__dict__, "runs": lambda params: []})
    assert trains.trains and not toy.trains
    assert verdicts.seeds_cover(trains, drawn) == verdicts.DATA_SEEDS_COVER
    assert verdicts.seeds_cover(trains, fixed) == verdicts.SEEDS_COVER
    assert verdicts.seeds_cover(toy, drawn) == verdicts.TOY_SEEDS_COVER
    # rows derived from the runs, without run ids: the artifact's data_seed on the rows' profile
    derived = pd.DataFrame({"seed": [0, 1], "profile": ["quick", "quick"], "run_id": [None, None]})
    assert verdicts.seeds_cover(trains, derived) == verdicts.DATA_SEEDS_COVER  # quick: per-seed draws
    assert verdicts.seeds_cover(trains, derived.assign(profile="paper")) == verdicts.SEEDS_COVER  # one draw
    fixed_quick = Artifact(
        **{
            **trains.__dict__,
            "parameters": {**trains.parameters, "quick": {"seeds": [0, 1], "data_seed": "fixed"}},
        }
    )
    assert verdicts.seeds_cover(fixed_quick, derived) == verdicts.SEEDS_COVER


def test_checks_are_apart_from_verdicts():
    art = _artifact(
        "pnpp_table0_checks",
        (
            Claim("A beats B", _beats("A")),
            Claim("property holds", _beats("A"), kind="check", unit="x"),
            Claim("property fails on a seed", _beats("C"), kind="check"),
            Claim("property without rows", _beats("Z"), kind="check"),
            Claim("a limit", _beats("C"), kind="check", not_testable={"quick": "beyond the grid"}),
        ),
    )
    rows = _rows({"A": (10.0, 11.0, 8.0), "C": (1.0, -1.0, 2.0)})
    assert verdicts.verdict_table(art, rows)["claim"].tolist() == ["A beats B"]
    checks = verdicts.check_table(art, rows)
    assert checks["result"].tolist() == ["passes", "fails", "cannot decide", "not testable"]
    assert checks.loc[3, "why"] == "beyond the grid" and checks.loc[3, "seeds"] == 3  # shown, not failed
    assert checks.loc[1, "why"] == "1 of 3 seed(s) fail"
    frame = multiplicity.claims_frame([art], {art.id: rows}, "quick", reference=pd.DataFrame())
    assert (frame.loc[frame["kind"] == "check", "adjusted p"].isna()).all()
    line = multiplicity.counts(frame, ["pnpp"]).iloc[0]
    assert (line["yes"], line["checks"], line["checks passed"]) == (1, 3, 1)


# ------------------------------------------------------------------------------------- a whole profile


def test_every_statement_is_counted_and_the_same_comparison_is_shown_together():
    a = _artifact(
        "pnpp_table0_a",
        (
            Claim("A beats B", _beats("A"), key="a"),
            Claim("A beats B, primary", _beats("A"), key="a2", primary=True),
            Claim("C beats B", _beats("C"), key="c"),
            Claim(
                "A beats B in NMI", lambda df: paired(df, "NMI", {"variant": "A"}, {"variant": "B"}), key="n"
            ),
        ),
    )
    b = _artifact("pnpp_fig0_b", (Claim("A beats B (as Fig. 0)", _beats("A"), key="b"),))
    rows = _rows({"A": (10.0, 11.0, 8.0), "C": (0.3, 0.5, 0.4)})
    rows = pd.concat([rows, rows.assign(metric="NMI")], ignore_index=True)
    frame = multiplicity.claims_frame([a, b], {a.id: rows, b.id: rows}, "quick", reference=pd.DataFrame())
    assert frame["counted"].all()  # one counted claim per statement
    assert frame.loc[0, "shared with"] == "pnpp_table0_a:a2, pnpp_fig0_b:b"
    assert frame.loc[4, "shared with"] == "pnpp_table0_a:a, pnpp_table0_a:a2"
    assert frame.loc[2, "shared with"] == frame.loc[3, "shared with"] == ""  # other runs; the same runs, NMI
    assert (
        frame["family"].tolist()
        == [multiplicity.SECONDARY, multiplicity.PRIMARY] + [multiplicity.SECONDARY] * 3
    )
    line = multiplicity.counts(frame, ["pnpp"]).iloc[0]
    assert line["yes"] + line["equivalent"] + line["inconclusive"] == 5 and line["shared"] == 3
    # without run ids nothing is grouped
    bare = multiplicity.claims_frame(
        [b, a],
        {b.id: rows.drop(columns="run_id"), a.id: rows.drop(columns="run_id")},
        "quick",
        reference=pd.DataFrame(),
    )
    assert (bare["shared with"] == "").all()


def test_holm_over_each_papers_primary_claims_and_bh_over_the_rest():
    gaps = {
        "A": (10.0, 11.0, 8.0),
        "C": (0.3, 0.5, 0.4),
        "D": (1.0, 3.0, 0.5),
        "E": (2.0, 2.1, 1.9),
        "F": (0.2, -0.4, 0.1),
    }
    claims = (
        Claim("A", _beats("A"), key="a", primary=True),
        Claim("C", _beats("C"), key="c", primary=True),
        Claim("D", _beats("D"), key="d"),
        Claim("E", _beats("E"), key="e"),
        Claim("F", _beats("F"), key="f", not_testable={"quick": "no"}),
    )
    rows = _rows(gaps)
    pnpp = _artifact("pnpp_table0_a", claims)
    heated = _artifact("heated_table0_b", (Claim("E", _beats("E"), key="e", primary=True),), paper="heated")
    frame = multiplicity.claims_frame(
        [pnpp, heated],
        {pnpp.id: rows, heated.id: rows.assign(run_id="x" + rows["run_id"])},
        "quick",
        reference=pd.DataFrame(),
    )
    p = {
        v: sps.ttest_1samp(g, 0.0).pvalue for v, g in gaps.items()
    }  # each a yes or an inconclusive leaning positive
    holm, bh = stats.holm([p["A"], p["C"]]), stats.benjamini_hochberg([p["D"], p["E"]])
    assert frame.loc[:1, "adjusted p"].tolist() == pytest.approx(holm)
    assert frame.loc[2:3, "adjusted p"].tolist() == pytest.approx(bh)
    assert math.isnan(frame.loc[4, "adjusted p"]) and frame.loc[4, "family"] == ""  # not testable: out
    assert frame.loc[5, "adjusted p"] == pytest.approx(p["E"])  # the other paper's family: alone
    for i in range(4):
        raw, adjusted = frame.loc[i, "verdict"], frame.loc[i, "adjusted"]
        assert adjusted == (raw if frame.loc[i, "adjusted p"] < 0.05 else "inconclusive")
    assert frame.loc[4, "adjusted"] == "not testable"
    counts = multiplicity.counts(frame, ["pnpp", "heated"])
    assert counts["paper"].tolist() == ["pnpp", "heated"]
    line = counts.iloc[0]
    assert (line["primary"], line["secondary"], line["not testable"]) == (2, 2, 1)
    # the counts are the adjusted verdicts
    adjusted = frame.loc[frame["paper"] == "pnpp", "adjusted"]
    assert [line[v] for v in verdicts.VERDICTS] == [int((adjusted == v).sum()) for v in verdicts.VERDICTS]


def test_an_equivalence_joins_its_family():
    gaps = {"A": (0.1, -0.2, 0.05, 0.0, 0.15), "C": (5.0, 6.0, 5.5, 4.0, 5.0)}
    claims = (Claim("A", _beats("A"), key="a", unit="R@1 points"), Claim("C", _beats("C"), key="c"))
    art = _artifact("pnpp_table0_eq", claims)
    frame = multiplicity.claims_frame([art], {art.id: _rows(gaps)}, "quick", reference=pd.DataFrame())
    assert frame["verdict"].tolist() == ["equivalent", "yes"]
    tost = max(
        sps.ttest_1samp(gaps["A"], -1.0, alternative="greater").pvalue,
        sps.ttest_1samp(gaps["A"], 1.0, alternative="less").pvalue,
    )
    p = [2 * tost, sps.ttest_1samp(gaps["C"], 0.0).pvalue]
    assert frame["p"].tolist() == pytest.approx(p)
    assert frame["adjusted p"].tolist() == pytest.approx(stats.benjamini_hochberg(p))


def test_a_study_without_claims_has_an_empty_frame():
    art = _artifact("pnpp_table0_none", ())
    frame = multiplicity.claims_frame(
        [art], {art.id: _rows({"A": (1.0, 2.0, 3.0)})}, "quick", reference=pd.DataFrame()
    )
    assert frame.empty and multiplicity.counts(frame, ["pnpp"]).empty


def test_the_same_comparison_is_the_same_measurement_of_the_same_runs():
    """Claims on the same runs under different conditions (here a deformation the caller filters on first) are
    not shown together; the same rows read by two artifacts are."""
    clean = _rows({"A": (10.0, 11.0, 8.0)}).assign(param_deformation="none")
    cut = clean.assign(param_deformation="cutout", value=clean["value"] - 1.0)
    rows = pd.concat([clean, cut], ignore_index=True)

    def under(deformation):
        return lambda df: _beats("A")(df[df["param_deformation"] == deformation])

    art = _artifact(
        "pnpp_table0_cond",
        (
            Claim("A beats B", under("none"), key="none"),
            Claim("A beats B under cutout", under("cutout"), key="cut"),
        ),
    )
    other = _artifact("pnpp_fig0_cond", (Claim("A beats B (Fig. 0)", under("none"), key="fig"),))
    frame = multiplicity.claims_frame(
        [art, other], {art.id: rows, other.id: rows}, "quick", reference=pd.DataFrame()
    )
    assert frame["shared with"].tolist() == ["pnpp_fig0_cond:fig", "", "pnpp_table0_cond:none"]


def _regime_csv(folder, rows: list[tuple[str, str, float, float, bool, bool]]) -> None:
    """The regime benchmark's CSV: (method, knobs, train R@1, projected study min, fits, in budget) per row."""
    (folder / "benchmarks").mkdir(exist_ok=True)
    keys = ("method", "knobs", "train_R1", "projected_study_min", "fits", "in_budget")
    recs = [{**dict(zip(keys, r)), "test_R1": 40.0, "profile": "quick"} for r in rows]
    pd.DataFrame(recs).to_csv(folder / gate.REGIME_BENCHMARK, index=False)


def test_the_regime_is_the_committed_runs_train_r1_with_what_the_regime_benchmark_found(tmp_path):
    assert verdicts.regime("quick", tmp_path) is None  # no offline benchmark rows: unknown
    recs = [
        {
            "experiment": "offline_benchmark",
            "variant": "ProxyNCA++",
            "profile": "quick",
            "seed": s,
            "metric": "train_R@1",
            "value": v,
        }
        for s, v in enumerate((50.0, 52.0, 54.0))
    ]
    pd.DataFrame(recs).to_csv(tmp_path / "offline_benchmark.csv", index=False)
    fit = verdicts.regime("quick", tmp_path)
    assert fit.train_r1 == pytest.approx(52.0) and not fit.fits
    assert "mean over 3 seeds" in fit.source and "no regime benchmark committed" in fit.source
    assert verdicts.regime("paper", tmp_path) is None
    _regime_csv(
        tmp_path,
        [
            ("proxynca++", "the preset", 53.0, 100.0, False, True),
            ("proxynca++", "epochs=16", 60.0, 170.0, False, True),
            ("proxynca++", "epochs=64", 80.0, 600.0, False, False),
            ("other", "epochs=16", 95.0, 170.0, True, True),  # another method's rows are not read
        ],
    )
    source = verdicts.regime("quick", tmp_path).source
    assert "no quick setting measured in results/benchmarks/quick_regime.csv fits" in source
    assert "the best within it, epochs=16: train R@1 60.0 %" in source
    assert "at any cost, epochs=64: train R@1 80.0 %, test 40.0 %, a study of about 600 min" in source
    _regime_csv(
        tmp_path,
        [
            ("proxynca++", "epochs=64", 90.0, 170.0, True, True),
            ("proxynca++", "epochs=32", 86.0, 150.0, True, True),
            ("proxynca++", "width=32", 99.0, 900.0, True, False),
        ],
    )
    fit = verdicts.regime("quick", tmp_path)
    assert (
        "the cheapest quick setting measured to fit" in fit.source
        and "epochs=32: train R@1 86.0 %" in fit.source
    )
    assert fit.train_r1 == pytest.approx(52.0)  # the claims' runs are still what the regime judges
