"""A profile's claims taken together, as docs/preregistration.md pre-registers them: every claim judged
(:mod:`dmllab.experiments.verdicts`), every paper statement counted, and the p-values adjusted per paper.

Claims whose effects read the same comparison (the run ids of both sides, :func:`dmllab.experiments.compare.arms_of`,
and the metric, split and conditions, :func:`~dmllab.experiments.compare.reads_of`) are shown together ("shared
with", a display grouping that changes no count; rows without run ids are never grouped). Within each paper the
tested primary claims are adjusted by Holm, the others by Benjamini-Hochberg (both at :data:`Q`), each with its
decision p-value; the adjusted verdict is the raw one where its adjusted p-value is below :data:`Q`, else
"inconclusive", and a claim outside every family keeps its raw verdict. The counts (:func:`counts`) are the adjusted
verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dmllab.experiments import stats
from dmllab.experiments.artifact import Artifact
from dmllab.experiments.verdicts import (
    NOT_TESTABLE,
    VERDICT_COLUMNS,
    VERDICTS,
    Regime,
    TrainingStatus,
    assess,
    join_why,
    judged_without,
    paper_effect,
    record,
)

if TYPE_CHECKING:
    import pandas as pd

Q = 0.05  # Benjamini-Hochberg's false discovery rate and Holm's family-wise level (two-sided scale; pre-registered)
PRIMARY, SECONDARY = "primary (Holm)", "secondary (BH)"
TRAIN_METRIC = "train_R@1"

# The claim's artifact, then :data:`~dmllab.experiments.verdicts.VERDICT_COLUMNS` ("paper" renamed "paper says"),
# then the profile's columns.
FRAME_COLUMNS = ("artifact", "paper", "label", "key", "kind", "primary", "claim", "paper says")
FRAME_COLUMNS += ("paper effect", "yardstick", *VERDICT_COLUMNS[3:], "train better", "train worse", "runs")
FRAME_COLUMNS += ("shared with", "counted", "family", "adjusted p", "adjusted")


def _train(rows: pd.DataFrame, ids: frozenset[str]) -> float:
    """Mean :data:`TRAIN_METRIC` (training R@1, percent) of the runs ``ids`` in ``rows``; NaN where absent."""
    if not ids or "run_id" not in rows.columns:
        return math.nan
    sel = rows[(rows["metric"] == TRAIN_METRIC) & rows["run_id"].astype(str).isin(ids)]
    return float(sel["value"].mean()) if len(sel) else math.nan


def claims_frame(
    artifacts: Sequence[Artifact],
    rows: Mapping[str, pd.DataFrame],
    profile: str,
    status: TrainingStatus | None = None,
    reference: pd.DataFrame | None = None,
    fit: Regime | None = None,
) -> pd.DataFrame:
    """Every claim of ``artifacts`` judged on ``rows[artifact id]`` (artifacts without rows are left out), one
    line each (:data:`FRAME_COLUMNS`), grouped for display and adjusted per paper (module docstring).
    ``reference``: the papers' printed cells (default :func:`dmllab.reference.load_reference`); ``fit``: the
    profile's regime (:func:`dmllab.experiments.gate.regime`; None: unknown)."""
    import pandas as pd

    if reference is None:
        from dmllab.reference import load_reference

        reference = load_reference()
    out = []
    for artifact in artifacts:
        frame = rows.get(artifact.id)
        if frame is None or frame.empty:
            continue
        gap = judged_without(artifact, frame, profile)  # datasets a --datasets study left out
        for claim in artifact.claims:
            j = assess(
                claim, frame, profile, status, paper_effect(claim, artifact.paper, reference, profile), fit
            )
            line = record(j, profile)
            line["paper says"] = line.pop("paper")
            if claim.kind == "verdict":
                line["why"] = join_why(str(line["why"]), gap)
            better, worse = j.runs
            shows_fit = claim.training_fit
            out.append(
                {"artifact": artifact.id, "paper": artifact.paper, "label": artifact.label, "key": claim.key}
                | {"kind": claim.kind, "primary": claim.primary, **line, "yardstick": j.yardstick}
                | {
                    "train better": _train(frame, better) if shows_fit else math.nan,
                    "train worse": _train(frame, worse) if shows_fit else math.nan,
                    "runs": (better, worse, j.reads) if (better or worse) and j.reads else (),
                    "shared with": "",
                    "counted": True,
                }
            )
    frame = pd.DataFrame(out, columns=list(FRAME_COLUMNS)).assign(family="", adjusted="")
    frame["adjusted p"] = math.nan
    if frame.empty:
        return frame
    _group(frame)
    _adjust(frame)
    return frame


def _name(frame: pd.DataFrame, i: int) -> str:
    return f"{frame.loc[i, 'artifact']}:{frame.loc[i, 'key']}"


def _group(frame: pd.DataFrame) -> None:
    """Name, in ``shared with``, the other claims that read the same comparison as each claim (the same ``runs``:
    run ids, metric, split and conditions); every verdict claim stays ``counted`` (one per paper statement)."""
    groups: dict[tuple, list[int]] = {}
    for i, (kind, runs) in enumerate(zip(frame["kind"], frame["runs"])):
        if kind == "verdict" and runs:
            groups.setdefault(runs, []).append(i)
    for members in groups.values():
        for i in members if len(members) > 1 else ():
            frame.loc[i, "shared with"] = ", ".join(_name(frame, j) for j in members if j != i)


def _adjust(frame: pd.DataFrame) -> None:
    """Holm over each paper's tested primary claims, Benjamini-Hochberg over its other tested claims; the
    adjusted verdict of every verdict claim (module docstring)."""
    verdict = frame["kind"] == "verdict"
    tested = frame["counted"] & verdict & (frame["verdict"] != NOT_TESTABLE) & frame["p"].notna()
    for paper in frame["paper"].unique():
        for primary, family, adjust in (
            (True, PRIMARY, stats.holm),
            (False, SECONDARY, stats.benjamini_hochberg),
        ):
            where = frame.index[tested & (frame["paper"] == paper) & (frame["primary"] == primary)]
            if len(where) == 0:
                continue
            frame.loc[where, "family"] = family
            frame.loc[where, "adjusted p"] = adjust(frame.loc[where, "p"].astype(float).tolist())
    frame.loc[verdict, "adjusted"] = frame.loc[verdict, "verdict"]
    for i in frame.index[frame["family"] != ""]:
        if not frame.loc[i, "adjusted p"] < Q:
            frame.loc[i, "adjusted"] = "inconclusive"


def counts(frame: pd.DataFrame, papers: Sequence[str]) -> pd.DataFrame:
    """Per paper of ``papers`` (those with claims in ``frame``): the adjusted verdicts of the counted claims in
    their classes, the primary and secondary claims tested with the yes / no that survive their adjustment, the
    claims that read the same comparison as another (``shared``), and the checks passed out of the checks."""
    import pandas as pd

    out = []
    for paper in papers:
        mine = frame[frame["paper"] == paper]
        if mine.empty:
            continue
        verdicts = mine[(mine["kind"] == "verdict") & mine["counted"]]
        checks = mine[(mine["kind"] == "check") & (mine["verdict"] != NOT_TESTABLE)]
        line: dict[str, object] = {"paper": paper}
        line.update({v: int((verdicts["adjusted"] == v).sum()) for v in VERDICTS})
        for family, name in ((PRIMARY, "primary"), (SECONDARY, "secondary")):
            fam = verdicts[verdicts["family"] == family]
            line[name] = len(fam)
            line[f"{name} yes"] = int((fam["adjusted"] == "yes").sum())
            line[f"{name} no"] = int((fam["adjusted"] == "no").sum())
        line |= {
            "shared": int((verdicts["shared with"] != "").sum()),
            "checks": len(checks),
            "checks passed": int((checks["verdict"] == "passes").sum()),
        }
        out.append(line)
    columns = ["paper", *VERDICTS, "primary", "primary yes", "primary no", "secondary", "secondary yes"]
    columns += ["secondary no", "shared", "checks", "checks passed"]
    # integer columns even without a paper: the totals of no claims are zeros
    return pd.DataFrame(out, columns=columns).astype({c: int for c in columns[1:]})
