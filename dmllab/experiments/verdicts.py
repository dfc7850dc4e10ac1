"""The verdict layer: each claim of an artifact judged on one profile's rows (the profile's claims taken together,
with multiplicity: :mod:`dmllab.experiments.multiplicity`). The rules, levels and margins are pre-registered in
docs/preregistration.md; this is how they are applied.

A claim's effect is measured once per seed (paired: both arms share the seed); every test is one-sided at
:data:`~dmllab.experiments.stats.ALPHA_PER_SIDE` per side, its p-value written on the two-sided scale. With the 95%
t interval ``[low, high]``, the margin ``delta`` (:func:`~dmllab.experiments.yardstick.margin`) and, on the paper
profile only, the paper's printed effect ``E``, a claim of kind ``"verdict"`` is, tried in this order, **no**
(``high < 0``), **yes** (``low > 0``), **equivalent** (the interval inside ``(-delta, +delta)``: TOST), **smaller
than the paper** (``E > 0`` and ``high < E``), else **inconclusive** (also with fewer than 2 seeds, or 2 seeds of one
effect). It is **not testable** when ``claim.not_testable`` names the profile, a method of ``claim.arms`` does not
learn there (:mod:`dmllab.experiments.gate`; the worse arms are never gated) or a ``claim.training_fit`` claim is
outside the papers' regime; its numbers are still shown. A stated equivalence (``paper_says == "equivalent"``) is
judged by equivalence only.

A claim about every member of a set (one effect column per member) is an intersection-union test: **yes** only when
every member's interval is above 0; **no**, **smaller** when one member's test at the Bonferroni level ``alpha / K``
rejects; **equivalent** when every member is. Its p-value for yes and equivalent is the largest member's, for no or
smaller the member's times ``K``; an inconclusive claim's is the smallest of its yes, no and equivalence p-values.
Each claim also carries its methods' learning relative to ProxyNCA++ (:func:`dmllab.experiments.gate.learning`, a
caveat, never a gate) and the seeds a two-sided t test at 5% needs for 80% power at the observed effect and at the
yardstick (:func:`dmllab.experiments.stats.seeds_needed`, with the observed per-seed sd).

A claim of kind ``"check"`` (an analytic property of a toy, or a design target of the offline benchmark) **passes**
when its effect is positive on every seed, **fails** otherwise, **cannot decide** when the rows cannot measure it
and is **not testable** on a profile its ``not_testable`` names; checks are shown apart, never counted as verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dmllab.experiments import stats
from dmllab.experiments.artifact import Artifact, Claim
from dmllab.experiments.compare import arms_of
from dmllab.experiments.gate import (
    GAIN_METRIC,
    STATUS_ARTIFACT,
    Gate,
    Regime,
    TrainingStatus,
    fails,
    learning,
    regime,
    testability,
    training_status,
)
from dmllab.experiments.yardstick import (
    DELTA_POINTS,
    effect_of,
    margin,
    paper_effect,
    smaller_bound,
    yardstick,
)

__all__ = ["CHECKS", "GAIN_METRIC", "NOT_TESTABLE", "SMALLER", "STATUS_ARTIFACT", "VERDICTS", "Gate"]
__all__ += ["Judgement", "Regime", "TrainingStatus", "assess", "check_table", "DELTA_POINTS", "effect_of"]
__all__ += ["margin", "paper_effect", "regime", "smaller_bound", "yardstick", "seeds_cover", "testability"]
__all__ += ["training_status", "verdict_table"]

if TYPE_CHECKING:
    import pandas as pd

SMALLER = "smaller than the paper"
NOT_TESTABLE = "not testable"
VERDICTS: tuple[str, ...] = ("yes", "no", "equivalent", SMALLER, "inconclusive", NOT_TESTABLE)
CHECKS: tuple[str, ...] = ("passes", "fails", "cannot decide", NOT_TESTABLE)
LEVEL = 1.0 - stats.CONFIDENCE
POWER = 0.8
SEEDS_COVER = (
    "Seeds vary the initialisation and the batch order on one draw of the data (and one pre-trained trunk): an "
    "interval covers that noise, not a new draw of the data."
)
DATA_SEEDS_COVER = (
    "Seed k trains on draw k of the offline benchmark (other classes, other images, its own pre-trained trunk): "
    "an interval covers a new draw of the data as well as the initialisation and the batch order."
)
TOY_SEEDS_COVER = "Seeds redraw the toy's initialisation (and its samples where the toy draws them)."


@dataclass(frozen=True)
class Judgement:
    """A claim judged on one profile's rows (module docstring): ``verdict`` one of :data:`VERDICTS` (:data:`CHECKS`
    for a check); ``interval`` and ``effects`` the shown member's; ``p`` the decision's p-value (the IUT's for a
    set); ``seeds_observed`` / ``seeds_paper`` the seeds for 80% power at the observed effect / at the
    ``yardstick`` (None: not reachable); ``runs`` and ``reads`` what each side read (empty where unknown)."""

    claim: Claim
    verdict: str
    why: str
    interval: stats.Interval | None
    p: float
    effects: tuple[float, ...]
    members: int = 1
    paper: float = math.nan
    yardstick: float = math.nan
    delta: float = math.nan
    seeds_observed: int | None = None
    seeds_paper: int | None = None
    runs: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
    reads: tuple[Any, ...] = ()
    learning: str = ""


def _members(claim: Claim, rows: pd.DataFrame) -> tuple[dict[str, tuple[float, ...]], Any, str]:
    """The claim's per-seed effects per member (``{"": effects}`` for a plain claim), the effect object (for its
    runs) and, when there are none, why."""
    import pandas as pd

    try:
        effect = claim.effect(rows)
    except KeyError as err:  # a result file without a column the claim reads (a seed or parameter column)
        return {}, None, f"the rows lack the column {str(err.args[0] if err.args else err)[:80]!r}"
    except Exception as err:  # a claim that cannot be evaluated on these rows is reported, not fatal
        return {}, None, f"{type(err).__name__}: {err}"
    if effect is None or len(effect) == 0:
        return {}, effect, "the rows cannot decide (a variant or metric is missing)"
    columns = effect.items() if isinstance(effect, pd.DataFrame) else [("", effect)]
    out = {str(name): tuple(float(v) for v in values) for name, values in columns}
    bad = [name for name, values in out.items() if not all(math.isfinite(v) for v in values)]
    if bad:
        return {}, effect, f"non-finite per-seed effect in {bad[0] or 'the effect'}: {list(out[bad[0]])}"
    return out, effect, ""


def _leave_out(
    claim: Claim,
    effect: Any,
    members: dict[str, tuple[float, ...]],
    status: TrainingStatus | None,
    profile: str | None,
) -> tuple[dict[str, tuple[float, ...]], str, bool]:
    """``(members, why, every member out)``: the members of ``claim.member_arms`` whose method does not learn
    left out of the set (one column each) or of the mean (an effect averaged over named members,
    :func:`dmllab.experiments.compare.averaged`)."""
    import pandas as pd

    from dmllab.experiments.compare import AVERAGE_OF

    status = status or {}
    out = {m for m, arm in claim.member_arms.items() if arm in status and not status[arm].trains}
    average = getattr(effect, "attrs", {}).get(AVERAGE_OF) if effect is not None else None
    pool = average if average else members
    left = [m for m in pool if m in out]
    if not left:
        return members, "", False
    arm = claim.member_arms
    why = join_why(*(fails(arm[m], status[arm[m]], profile) + f": {m} left out" for m in left))
    if len(left) == len(pool):
        return members, why, True
    if average:
        mean = pd.concat([e for m, e in average.items() if m not in out], axis=1).dropna().mean(axis=1)
        return {"": tuple(float(v) for v in mean)}, why, False
    return {m: e for m, e in members.items() if m not in out}, why, False


def _check(claim: Claim, effects: tuple[float, ...], missing: str, profile: str | None) -> Judgement:
    if profile in claim.not_testable:  # shown, never a failed check
        return Judgement(claim, NOT_TESTABLE, claim.not_testable[profile], None, math.nan, effects)
    if not effects:
        return Judgement(claim, "cannot decide", missing, None, math.nan, ())
    verdict = "passes" if min(effects) > 0 else "fails"
    why = "" if verdict == "passes" else f"{sum(e <= 0 for e in effects)} of {len(effects)} seed(s) fail"
    return Judgement(claim, verdict, why, None, math.nan, effects)


def _tstat(effects: tuple[float, ...]) -> float:
    """The t statistic of at least 2 ``effects`` against 0 (+-inf with zero spread)."""
    mean, sd = sum(effects) / len(effects), stats.sd(effects)
    if sd > 0:
        return mean / (sd / math.sqrt(len(effects)))
    return math.copysign(math.inf, mean) if mean else 0.0


def _two_sided(p: float) -> float:
    """A one-sided p-value on the two-sided scale (the scale every decision p-value is written on)."""
    return min(1.0, 2.0 * p)


def _classify(
    members: Mapping[str, tuple[float, ...]], bound: float, delta: float, states_equivalence: bool = False
) -> tuple[str, str, float]:
    """``(verdict, the member shown, decision p on the two-sided scale)`` of effects with at least 2 seeds each
    (module docstring); ``bound``: the paper's effect "smaller" tests against (NaN: not tested)."""
    k = len(members)

    def p_under(at: float) -> dict[str, float]:  # per member, Bonferroni at alpha / k
        return {
            m: min(1.0, k * _two_sided(stats.one_sided_p(e, at, greater=False))) for m, e in members.items()
        }

    p_yes = {m: _two_sided(stats.one_sided_p(e)) for m, e in members.items()}
    p_no = p_under(0.0)
    p_eq = {m: _two_sided(stats.tost_p(e, delta)) for m, e in members.items()} if math.isfinite(delta) else {}
    weakest = min(members, key=lambda m: _tstat(members[m]))
    eq = max(p_eq.values()) if p_eq else math.nan
    least_equal = max(p_eq, key=lambda m: p_eq[m]) if p_eq else weakest
    if states_equivalence:
        return ("equivalent" if eq < LEVEL else "inconclusive"), least_equal, eq
    below = [m for m in members if p_no[m] < LEVEL]
    if below:
        shown = min(below, key=lambda m: p_no[m])
        return "no", shown, p_no[shown]
    yes = max(p_yes.values())
    if yes < LEVEL:
        return "yes", weakest, yes
    if eq < LEVEL:
        return "equivalent", least_equal, eq
    if math.isfinite(bound) and bound > 0:
        p_short = p_under(bound)
        short = [m for m in members if p_short[m] < LEVEL]
        if short:
            shown = min(short, key=lambda m: p_short[m])
            return SMALLER, shown, p_short[shown]
    return "inconclusive", weakest, min(p for p in (yes, min(p_no.values()), eq) if p == p)


def join_why(*parts: str) -> str:
    """The non-empty parts of a claim's "why", joined."""
    return "; ".join(p for p in parts if p)


def assess(
    claim: Claim,
    rows: pd.DataFrame,
    profile: str | None = None,
    status: TrainingStatus | None = None,
    paper: float = math.nan,
    fit: Regime | None = None,
) -> Judgement:
    """Judge ``claim`` on ``rows`` of ``profile`` (the module docstring's classes); ``status`` is
    :func:`training_status` of the profile (``None``: unknown), ``paper`` the paper's effect
    (:func:`paper_effect`; NaN: none printed), ``fit`` the profile's :func:`regime` (None: unknown)."""
    from dmllab.experiments.compare import reads_of

    members, effect, missing = _members(claim, rows)
    runs = arms_of(effect) if effect is not None else (frozenset(), frozenset())
    if claim.kind == "check":
        return _check(claim, members.get("", ()) if len(members) <= 1 else (), missing, profile)
    testable, reason = testability(claim, profile, status)
    members, left_out, every = _leave_out(claim, effect, members, status, profile)
    testable, reason = testable and not every, join_why(reason, left_out)
    if claim.training_fit and fit is not None and not fit.fits and profile != "paper":
        testable, reason = False, join_why(reason, fit.why(profile))
    yard, delta = yardstick(paper, profile), margin(claim, paper, profile)
    base = {"members": max(len(members), 1), "paper": paper, "yardstick": yard, "delta": delta, "runs": runs}
    base |= {"reads": reads_of(effect) if effect is not None else (), "learning": learning(claim, status)}
    undecided = NOT_TESTABLE if not testable else "inconclusive"
    if not members:
        return Judgement(claim, undecided, join_why(missing, reason), None, math.nan, (), **base)
    n = min(len(e) for e in members.values())
    flat = next((m for m, e in members.items() if n < 3 and len(set(e)) == 1), None)
    if n < stats.MIN_SEEDS or flat is not None:  # a zero-width interval from 2 seeds measures no noise
        shown = next(iter(members)) if n < stats.MIN_SEEDS else flat
        few = (
            f"only {n} seed(s)"
            if n < stats.MIN_SEEDS
            else f"no variation: {n} seeds with one effect ({flat or 'the effect'})"
        )
        iv = stats.interval(members[shown])
        return Judgement(claim, undecided, join_why(few, reason), iv, math.nan, members[shown], **base)
    bound = smaller_bound(paper, profile)
    verdict, shown, p = _classify(members, bound, delta, claim.paper_says == "equivalent")
    effects = members[shown]
    iv, sd = stats.interval(effects), stats.sd(effects)
    need = stats.seeds_needed(iv.mean, sd, POWER, LEVEL)
    need_paper = stats.seeds_needed(yard, sd, POWER, LEVEL) if math.isfinite(yard) and yard > 0 else None
    if not testable:
        verdict = NOT_TESTABLE
    why = join_why(_explain(verdict, bound, delta, len(members), shown, claim), reason)
    return Judgement(claim, verdict, why, iv, p, effects, **base, seeds_observed=need, seeds_paper=need_paper)


def _explain(verdict: str, bound: float, delta: float, k: int, shown: str, claim: Claim) -> str:
    """Why, in a few words."""
    member = f"weakest of {k}: {shown}" if k > 1 else ""
    if verdict == "equivalent":
        return join_why(f"95% interval inside ±{delta:.3g}", member)
    if verdict == SMALLER:
        return join_why(f"interval below the paper's effect {bound:+.3g}", member)
    if verdict == "inconclusive" and claim.paper_says == "equivalent":
        margin_text = f"±{delta:.3g}" if math.isfinite(delta) else "a margin (none stated)"
        return join_why(
            f"a stated equivalence, judged by equivalence only: 95% interval not inside {margin_text}", member
        )
    if verdict == "inconclusive" and k > 1:
        return join_why(f"not every member above 0 on its own, none below 0 at the 5%/{k} level", member)
    if verdict == "inconclusive":
        return "interval contains 0"
    return member


def missing_datasets(artifact: Artifact, rows: pd.DataFrame, profile: str | None) -> list[str]:
    """The datasets ``artifact`` lists for ``profile`` (its ``datasets`` parameter) of which ``rows`` hold no row,
    where the rows hold some of the listed ones (rows of a stand-in, the offline benchmark for "cub" on the quick
    profile, name none of them): a study limited to the datasets at hand (``dmllab study --datasets``) judges its
    claims without the others."""
    listed = artifact.parameters.get(profile or "", {}).get("datasets")
    if not isinstance(listed, list) or "dataset" not in rows.columns or rows.empty:
        return []
    present = set(rows["dataset"].dropna().astype(str))
    return [d for d in listed if d not in present] if present & set(listed) else []


def judged_without(artifact: Artifact, rows: pd.DataFrame, profile: str | None) -> str:
    """What a claim's "why" says of :func:`missing_datasets` ("" when none is missing)."""
    if not (missing := missing_datasets(artifact, rows, profile)):
        return ""
    return f"judged without {', '.join(missing)}: no rows (not trained here, e.g. dmllab study --datasets)"


def rows_profile(rows: pd.DataFrame, profile: str | None = None) -> str | None:
    """``profile``, or the one profile ``rows`` hold (None when they hold none or several)."""
    if profile is not None or "profile" not in rows.columns:
        return profile
    present = set(rows["profile"].dropna().astype(str))
    return present.pop() if len(present) == 1 else None


# ------------------------------------------------------------------------------------------- tables

VERDICT_COLUMNS = ("claim", "paper", "paper effect", "effect", "95% low", "95% high", "seeds", "unit")
VERDICT_COLUMNS += ("verdict", "why", "seeds to resolve", "seeds for the paper's effect", "differs", "p")
VERDICT_COLUMNS += ("learning",)
CHECK_COLUMNS = ("check", "measured", "lowest seed", "seeds", "unit", "result", "why")


def record(j: Judgement, profile: str | None) -> dict[str, object]:
    """A verdict claim's line: :data:`VERDICT_COLUMNS`, in their order."""
    iv, c = j.interval, j.claim
    mean, low, high = (math.nan,) * 3 if iv is None else (iv.mean, iv.low, iv.high)
    line = (c.text, c.paper_says, j.paper, mean, low, high, len(j.effects), c.unit, j.verdict, j.why)
    line += (j.seeds_observed, j.seeds_paper, c.differs_on(profile) if profile else "", j.p, j.learning)
    return dict(zip(VERDICT_COLUMNS, line, strict=True))


def verdict_table(
    artifact: Artifact,
    rows: pd.DataFrame,
    profile: str | None = None,
    status: TrainingStatus | None = None,
    reference: pd.DataFrame | None = None,
    fit: Regime | None = None,
) -> pd.DataFrame:
    """One line per verdict claim (checks excluded: :func:`check_table`): the paper's answer and effect, the effect's
    mean and 95% t interval over seeds, the verdict and why, the seeds that would resolve it, what differs from the
    paper on ``profile``, and the decision's p-value (unadjusted: the report adjusts them per paper)."""
    import pandas as pd

    profile = rows_profile(rows, profile)
    gap = judged_without(artifact, rows, profile)
    out = []
    for c in artifact.claims:
        if c.kind == "verdict":
            line = record(
                assess(c, rows, profile, status, paper_effect(c, artifact.paper, reference, profile), fit),
                profile,
            )
            out.append({**line, "why": join_why(str(line["why"]), gap)})
    return pd.DataFrame(out, columns=list(VERDICT_COLUMNS))


def check_table(artifact: Artifact, rows: pd.DataFrame, profile: str | None = None) -> pd.DataFrame:
    """One line per check: the measured effect (mean over seeds, and the lowest seed's), passes or fails."""
    import pandas as pd

    out = []
    for claim in artifact.claims:
        if claim.kind != "check":
            continue
        j = assess(claim, rows, rows_profile(rows, profile))
        low = min(j.effects) if j.effects else math.nan
        measured = sum(j.effects) / len(j.effects) if j.effects else math.nan
        out.append(
            {"check": claim.text, "measured": measured, "lowest seed": low}
            | {"seeds": len(j.effects), "unit": claim.unit, "result": j.verdict, "why": j.why}
        )
    return pd.DataFrame(out, columns=list(CHECK_COLUMNS))


def seeds_cover(artifact: Artifact, rows: pd.DataFrame | None = None) -> str:
    """What an interval over the seeds of ``artifact`` covers, read from its rows' run ids where they have them:
    each seed on its own draw of the benchmark when no run key serves two seeds (:data:`DATA_SEEDS_COVER`), else one
    draw (:data:`SEEDS_COVER`); rows without run ids (numbers derived from the runs) cover what the artifact's
    ``data_seed`` on the rows' profile says; a toy's seeds (:data:`TOY_SEEDS_COVER`)."""
    from dmllab.experiments.params import DATA_SEED, DEFAULT_DATA_SEED

    if not artifact.trains:
        return TOY_SEEDS_COVER
    present = rows["run_id"].dropna().astype(str) if rows is not None and "run_id" in rows.columns else None
    if present is None or present.empty:
        profile = rows_profile(rows) if rows is not None else None
        declared = artifact.parameters.get(profile or "", {}).get(
            DATA_SEED, DEFAULT_DATA_SEED.get(profile or "")
        )
        return DATA_SEEDS_COVER if declared == "per_seed" else SEEDS_COVER
    ids = present.str.rsplit("/seed", n=1, expand=True)
    if ids.shape[1] < 2:
        return SEEDS_COVER
    seeds_per_key = ids.groupby(0)[1].nunique()
    several_seeds = ids[1].nunique() > 1
    return DATA_SEEDS_COVER if several_seeds and (seeds_per_key <= 1).all() else SEEDS_COVER
