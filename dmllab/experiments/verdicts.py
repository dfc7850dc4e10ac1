"""The verdict layer: each claim of an artifact judged on one profile's rows, and the claims of a whole profile
taken together.

A claim of kind ``"verdict"`` (:class:`~dmllab.experiments.artifact.Claim`) gets one of four verdicts:

* **yes** / **no** / **inconclusive**: its effect's 95% t interval over seeds lies above zero / below zero /
  contains zero or rests on fewer than 2 seeds (:func:`dmllab.experiments.stats.verdict`);
* **not testable**: the paper's procedure cannot be kept on the profile (``claim.not_testable``), or one of the
  methods it compares (``claim.arms``) does not train there (:func:`training_status`). Its effect and interval are
  still computed and shown, with the reason.

A claim of kind ``"check"`` is an analytic property of a toy: it **passes** when its effect is positive on every
seed and **fails** otherwise; checks are shown apart and never counted among the verdicts.

Across a profile (:func:`claims_frame`), a claim whose ``same_as`` names another artifact's claim is the same
comparison on the same runs and is counted once; every tested verdict claim (counted once; not the not-testable
ones, not the checks) gets its two-sided p-value (:func:`dmllab.experiments.stats.p_value`) Holm-adjusted across
the profile (:func:`dmllab.experiments.stats.holm`). The raw verdict stays the headline; the Holm column stands
beside it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dmllab.experiments import stats
from dmllab.experiments.artifact import Artifact, Claim

if TYPE_CHECKING:
    import pandas as pd

VERDICTS: tuple[str, ...] = ("yes", "no", "inconclusive", "not testable")
CHECKS: tuple[str, ...] = ("passes", "fails", "cannot decide")
NOT_TESTABLE = "not testable"
# The offline benchmark's rows that say whether a method trains on a profile: test R@1 of the method's default
# tuned run minus the pre-trained network's without training (same pooling), one row per seed, with the
# ``param_threshold`` the mean gain must reach.
STATUS_ARTIFACT = "offline_benchmark"
GAIN_METRIC = "gain_over_pretrained"
# {method label: (mean gain over seeds, threshold)}
TrainingStatus = Mapping[str, tuple[float, float]]

SEEDS_COVER = (
    "Seeds vary the initialisation and the batch order on one draw of the benchmark and one pre-trained trunk: "
    "an interval covers that noise, not a new draw of the data."
)
DATA_SEEDS_COVER = (
    "Seeds also redraw the benchmark's classes and pre-train its trunk once per draw: the interval covers a new "
    "draw of the data too."
)


# ------------------------------------------------------------------------------------------- one claim


def training_status(
    profile: str, results_dir: str | os.PathLike | None = None
) -> dict[str, tuple[float, float]]:
    """``{method label: (mean gain, threshold)}`` from the offline benchmark's ``gain_over_pretrained`` rows of
    ``profile`` in ``<results>/offline_benchmark.csv``; a method trains when its mean gain reaches the threshold.
    Empty when the file or the rows are absent (the status is then unknown)."""
    from dmllab import paths
    from dmllab.results import read_rows

    path = Path(results_dir if results_dir is not None else paths.results_dir()) / f"{STATUS_ARTIFACT}.csv"
    if not path.exists():
        return {}
    rows = read_rows(path)
    if "param_threshold" not in rows.columns:
        return {}
    rows = rows[(rows["profile"] == profile) & (rows["metric"] == GAIN_METRIC)]
    return {
        str(label): (float(part["value"].mean()), float(part["param_threshold"].astype(float).iloc[0]))
        for label, part in rows.groupby("variant", sort=False)
    }


def testability(claim: Claim, profile: str | None, status: TrainingStatus | None) -> tuple[bool, str]:
    """``(testable, why)``: not testable when ``claim.not_testable`` names ``profile`` or one of ``claim.arms``
    does not train there; a testable claim whose arms' status is unknown says so in ``why``."""
    if profile in claim.not_testable:
        return False, claim.not_testable[profile]
    if not claim.arms:
        return True, ""
    status = status or {}
    failing = [a for a in claim.arms if a in status and status[a][0] < status[a][1]]
    if failing:
        return False, "; ".join(
            f"{a} does not train on {profile} ({status[a][0]:+.1f} R@1 points over the pre-trained network, "
            f"below {status[a][1]:g})"
            for a in failing
        )
    unknown = [a for a in claim.arms if a not in status]
    if unknown:
        return True, (
            f"whether {', '.join(unknown)} train{'s' if len(unknown) == 1 else ''} on {profile} is unknown "
            f"(no {GAIN_METRIC} row in results/{STATUS_ARTIFACT}.csv yet)"
        )
    return True, ""


@dataclass(frozen=True)
class Judgement:
    """A claim judged on one profile's rows.

    ``verdict`` is one of :data:`VERDICTS` for a verdict claim and one of :data:`CHECKS` for a check; ``why``
    explains it (the reason a claim is not testable, an interval containing 0, an unknown training status);
    ``p`` is the two-sided p-value of the per-seed effects (NaN without an interval).
    """

    claim: Claim
    verdict: str
    why: str
    interval: stats.Interval | None
    p: float
    effects: tuple[float, ...]


def _effects(claim: Claim, rows: pd.DataFrame) -> tuple[tuple[float, ...], str]:
    """The claim's per-seed effects and, when there are none, why."""
    try:
        effect = claim.effect(rows)
    except Exception as err:  # a claim that cannot be evaluated on these rows is reported, not fatal
        return (), f"{type(err).__name__}: {err}"
    if effect is None or len(effect) == 0:
        return (), "the rows cannot decide (a variant or metric is missing)"
    values = tuple(float(v) for v in effect)
    if not all(math.isfinite(v) for v in values):
        return (), f"non-finite per-seed effect in {list(values)}"
    return values, ""


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def assess(
    claim: Claim, rows: pd.DataFrame, profile: str | None = None, status: TrainingStatus | None = None
) -> Judgement:
    """Judge ``claim`` on ``rows`` of ``profile`` (the module docstring's classes); ``status`` is
    :func:`training_status` of the profile (``None``: unknown)."""
    effects, missing = _effects(claim, rows)
    if claim.kind == "check":
        if not effects:
            return Judgement(claim, "cannot decide", missing, None, math.nan, ())
        verdict = "passes" if min(effects) > 0 else "fails"
        why = "" if verdict == "passes" else f"{sum(e <= 0 for e in effects)} of {len(effects)} seed(s) fail"
        return Judgement(claim, verdict, why, None, math.nan, effects)
    testable, reason = testability(claim, profile, status)
    iv = stats.interval(effects) if effects else None
    p = stats.p_value(effects) if effects else math.nan
    if not testable:
        return Judgement(claim, NOT_TESTABLE, reason, iv, p, effects)
    if iv is None:
        return Judgement(claim, "inconclusive", _join(missing, reason), None, math.nan, ())
    verdict = stats.verdict(iv)
    noise = (
        f"only {iv.n} seed(s)"
        if iv.n < stats.MIN_SEEDS
        else ("interval contains 0" if verdict == "inconclusive" else "")
    )
    return Judgement(claim, verdict, _join(noise, reason), iv, p, effects)


def judge(
    claim: Claim, rows: pd.DataFrame, profile: str | None = None, status: TrainingStatus | None = None
) -> tuple[stats.Interval | None, str, str]:
    """``(interval, verdict, why)`` of ``claim`` on ``rows`` (:func:`assess`)."""
    j = assess(claim, rows, profile, status)
    return j.interval, j.verdict, j.why


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


def _without(missing: Sequence[str]) -> str:
    return (
        f"judged without {', '.join(missing)}: no rows (not trained here, e.g. dmllab study --datasets)"
        if missing
        else ""
    )


def rows_profile(rows: pd.DataFrame, profile: str | None = None) -> str | None:
    """``profile``, or the one profile ``rows`` hold (None when they hold none or several)."""
    if profile is not None or "profile" not in rows.columns:
        return profile
    present = set(rows["profile"].dropna().astype(str))
    return present.pop() if len(present) == 1 else None


VERDICT_COLUMNS = (
    "claim",
    "paper",
    "effect",
    "95% low",
    "95% high",
    "seeds",
    "unit",
    "verdict",
    "why",
    "differs",
    "p",
)
CHECK_COLUMNS = ("check", "measured", "lowest seed", "seeds", "unit", "result", "why")


def _record(j: Judgement, profile: str | None) -> dict[str, object]:
    """A verdict claim's line: :data:`VERDICT_COLUMNS`."""
    iv, nan = j.interval, math.nan
    return {
        "claim": j.claim.text,
        "paper": j.claim.paper_says,
        "effect": sum(j.effects) / len(j.effects) if j.effects else nan,  # a check's measured value too
        "95% low": nan if iv is None else iv.low,
        "95% high": nan if iv is None else iv.high,
        "seeds": len(j.effects),
        "unit": j.claim.unit,
        "verdict": j.verdict,
        "why": j.why,
        "differs": j.claim.differs_on(profile) if profile else "",
        "p": j.p,
    }


def verdict_table(
    artifact: Artifact, rows: pd.DataFrame, profile: str | None = None, status: TrainingStatus | None = None
) -> pd.DataFrame:
    """One line per verdict claim (checks excluded: :func:`check_table`): the paper's answer, the effect's mean
    and 95% t interval over seeds, the verdict and why, what differs from the paper on ``profile``, and the
    two-sided p-value."""
    import pandas as pd

    profile = rows_profile(rows, profile)
    gap = _without(missing_datasets(artifact, rows, profile))
    out = []
    for claim in artifact.claims:
        if claim.kind == "verdict":
            line = _record(assess(claim, rows, profile, status), profile)
            out.append({**line, "why": _join(str(line["why"]), gap)})
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
        line = _record(j, None)
        out.append(
            {"check": claim.text, "measured": line["effect"], "lowest seed": low}
            | {"seeds": len(j.effects), "unit": claim.unit, "result": j.verdict, "why": j.why}
        )
    return pd.DataFrame(out, columns=list(CHECK_COLUMNS))


def seeds_cover(artifact: Artifact, profile: str) -> str:
    """What an interval over the seeds of ``artifact`` covers on ``profile``: a new draw of the data only where
    the artifact sets a ``data_seed`` parameter (neither absent, None nor False)."""
    data_seed = artifact.parameters.get(profile, {}).get("data_seed")
    return DATA_SEEDS_COVER if data_seed not in (None, False) else SEEDS_COVER


# ------------------------------------------------------------------------------------- a whole profile

# The claim's artifact, then :data:`VERDICT_COLUMNS` ("paper" renamed "paper says"), then the profile's columns.
FRAME_COLUMNS = (
    ("artifact", "paper", "label", "key", "kind")
    + tuple("paper says" if c == "paper" else c for c in VERDICT_COLUMNS)
    + ("same as", "counted", "tested", "holm p", "holm verdict")
)


def claims_frame(
    artifacts: Sequence[Artifact],
    rows: Mapping[str, pd.DataFrame],
    profile: str,
    status: TrainingStatus | None = None,
) -> pd.DataFrame:
    """Every claim of ``artifacts`` judged on ``rows[artifact id]`` (artifacts without rows are left out), one
    line each (:data:`FRAME_COLUMNS`).

    ``counted`` is False for a claim whose ``same_as`` names a claim in the frame (the comparison is counted
    there); ``same as`` names the other artifact, both ways. ``tested`` marks the verdict claims, counted once,
    that are testable and have a p-value; their p-values are Holm-adjusted together (``holm p``, ``holm verdict``:
    yes/no only where the adjusted p < 0.05), and a shared claim shows its original's adjustment.
    """
    import pandas as pd

    out = []
    for artifact in artifacts:
        frame = rows.get(artifact.id)
        if frame is None or frame.empty:
            continue
        gap = _without(missing_datasets(artifact, frame, profile))
        for claim in artifact.claims:
            line = _record(assess(claim, frame, profile, status), profile)
            line["paper says"] = line.pop("paper")
            if claim.kind == "verdict":
                line["why"] = _join(str(line["why"]), gap)
            out.append(
                {"artifact": artifact.id, "paper": artifact.paper, "label": artifact.label, "key": claim.key}
                | {"kind": claim.kind, **line, "same as": claim.same_as, "counted": True, "tested": False}
            )
    frame = pd.DataFrame(out, columns=list(FRAME_COLUMNS)).assign(**{"holm p": math.nan, "holm verdict": ""})
    if frame.empty:
        return frame
    where = {f"{a}:{k}": i for i, (a, k) in enumerate(zip(frame["artifact"], frame["key"])) if k}
    original: dict[int, int] = {}
    for i, ref in enumerate(frame["same as"]):
        if ref and ref in where:
            original[i] = where[ref]
            frame.loc[i, "counted"] = False
    for i, j in original.items():
        frame.loc[i, "same as"] = frame.loc[j, "artifact"]
        frame.loc[j, "same as"] = ", ".join(filter(None, [frame.loc[j, "same as"], frame.loc[i, "artifact"]]))
    frame["tested"] = (
        frame["counted"]
        & (frame["kind"] == "verdict")
        & (frame["verdict"] != NOT_TESTABLE)
        & frame["p"].notna()
    )
    tested = frame.index[frame["tested"]]
    frame.loc[tested, "holm p"] = stats.holm(frame.loc[tested, "p"].tolist())
    for i, j in original.items():
        frame.loc[i, "holm p"] = frame.loc[j, "holm p"]
    frame["holm verdict"] = [
        stats.adjusted_verdict(e, p) if p == p else "" for e, p in zip(frame["effect"], frame["holm p"])
    ]
    return frame


def counts(frame: pd.DataFrame, papers: Sequence[str]) -> pd.DataFrame:
    """Per paper of ``papers`` (those with claims in ``frame``): the four verdict classes counted once, the claims
    tested and Holm's yes/no among them, and the checks passed out of the checks."""
    import pandas as pd

    out = []
    for paper in papers:
        mine = frame[frame["paper"] == paper]
        if mine.empty:
            continue
        verdicts = mine[(mine["kind"] == "verdict") & mine["counted"]]
        checks = mine[mine["kind"] == "check"]
        out.append(
            {
                "paper": paper,
                **{v: int((verdicts["verdict"] == v).sum()) for v in VERDICTS},
                "tested": int(verdicts["tested"].sum()),
                "holm yes": int((verdicts["holm verdict"] == "yes").sum()),
                "holm no": int((verdicts["holm verdict"] == "no").sum()),
                "shared": int((~mine["counted"]).sum()),
                "checks": len(checks),
                "checks passed": int((checks["verdict"] == "passes").sum()),
            }
        )
    columns = ["paper", *VERDICTS, "tested", "holm yes", "holm no", "shared", "checks", "checks passed"]
    return pd.DataFrame(out, columns=columns)
