"""A profile's claims taken together, as a study would pre-register them: every claim judged
(:mod:`dmllab.experiments.verdicts`), comparisons read twice counted once, and the p-values adjusted per paper.

* **Counted once.** Two claims whose effects read the same runs (the run ids of both sides,
  :func:`dmllab.experiments.compare.arms_of`) are one comparison: the first primary claim of the group (else the
  first in the papers' order) is counted, the others are shown with it ("shared with") and left out of the counts
  and of the adjustment.
* **Families.** Within each paper the primary claims (``Claim.primary``: what an artifact exists to test) are
  adjusted together by Holm's step-down method (family-wise error 5%), the paper's other claims by
  Benjamini-Hochberg (false discovery rate q = 5%). Only tested claims enter a family: counted, testable, with a
  p-value. The adjusted verdict says whether a raw yes / no survives (adjusted p < 0.05).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dmllab.experiments import stats
from dmllab.experiments.artifact import Artifact
from dmllab.experiments.verdicts import (
    NOT_TESTABLE,
    VERDICTS,
    TrainingStatus,
    assess,
    join_why,
    judged_without,
    paper_effect,
    record,
)

if TYPE_CHECKING:
    import pandas as pd

Q = 0.05  # Benjamini-Hochberg's false discovery rate, and Holm's family-wise level
PRIMARY, SECONDARY = "primary (Holm)", "secondary (BH)"
TRAIN_METRIC = "train_R@1"

# The claim's artifact, then :data:`~dmllab.experiments.verdicts.VERDICT_COLUMNS` ("paper" renamed "paper says"),
# then the profile's columns.
FRAME_COLUMNS = (
    "artifact",
    "paper",
    "label",
    "key",
    "kind",
    "primary",
    "claim",
    "paper says",
    "paper effect",
    "yardstick",
    "effect",
    "95% low",
    "95% high",
    "seeds",
    "unit",
    "verdict",
    "why",
    "seeds to resolve",
    "seeds for the paper's effect",
    "differs",
    "p",
    "train better",
    "train worse",
    "runs",
    "shared with",
    "counted",
    "family",
    "adjusted p",
    "adjusted",
)


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
) -> pd.DataFrame:
    """Every claim of ``artifacts`` judged on ``rows[artifact id]`` (artifacts without rows are left out), one
    line each (:data:`FRAME_COLUMNS`), counted once and adjusted per paper (module docstring). ``reference``: the
    papers' printed cells (default :func:`dmllab.reference.load_reference`)."""
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
            j = assess(claim, frame, profile, status, paper_effect(claim, artifact.paper, reference, profile))
            line = record(j, profile)
            line["paper says"] = line.pop("paper")
            if claim.kind == "verdict":
                line["why"] = join_why(str(line["why"]), gap)
            better, worse = j.runs
            fit = claim.training_fit
            out.append(
                {"artifact": artifact.id, "paper": artifact.paper, "label": artifact.label, "key": claim.key}
                | {"kind": claim.kind, "primary": claim.primary, **line, "yardstick": j.yardstick}
                | {
                    "train better": _train(frame, better) if fit else math.nan,
                    "train worse": _train(frame, worse) if fit else math.nan,
                    "runs": better | worse,
                    "shared with": "",
                    "counted": True,
                }
            )
    frame = pd.DataFrame(out, columns=list(FRAME_COLUMNS)).assign(family="", adjusted="")
    frame["adjusted p"] = math.nan
    if frame.empty:
        return frame
    _count_once(frame)
    _adjust(frame)
    return frame


def _name(frame: pd.DataFrame, i: int) -> str:
    return f"{frame.loc[i, 'artifact']}:{frame.loc[i, 'key']}"


def _count_once(frame: pd.DataFrame) -> None:
    """Mark the claims that read the same runs as another: all but the first primary claim of such a group (else
    its first claim) are not ``counted`` (nor adjusted), and their ``shared with`` names the claim counted; the
    counted claim's names the others."""
    groups: dict[frozenset[str], list[int]] = {}
    for i, (kind, runs) in enumerate(zip(frame["kind"], frame["runs"])):
        if kind == "verdict" and runs:
            groups.setdefault(runs, []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        first = next((i for i in members if frame.loc[i, "primary"]), members[0])
        frame.loc[first, "shared with"] = ", ".join(_name(frame, j) for j in members if j != first)
        for i in members:
            if i != first:
                frame.loc[i, "shared with"] = _name(frame, first)
                frame.loc[i, "counted"] = False


def _adjust(frame: pd.DataFrame) -> None:
    """Holm over each paper's tested primary claims, Benjamini-Hochberg over its other tested claims."""
    tested = (
        frame["counted"]
        & (frame["kind"] == "verdict")
        & (frame["verdict"] != NOT_TESTABLE)
        & frame["p"].notna()
    )
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
    for i in frame.index[frame["family"] != ""]:
        raw = frame.loc[i, "verdict"]
        if raw in ("yes", "no"):
            frame.loc[i, "adjusted"] = raw if frame.loc[i, "adjusted p"] < Q else "inconclusive"


def counts(frame: pd.DataFrame, papers: Sequence[str]) -> pd.DataFrame:
    """Per paper of ``papers`` (those with claims in ``frame``): the verdict classes counted once, the primary and
    secondary claims tested with the yes / no that survive their adjustment, the shared claims, and the checks
    passed out of the checks."""
    import pandas as pd

    out = []
    for paper in papers:
        mine = frame[frame["paper"] == paper]
        if mine.empty:
            continue
        verdicts = mine[(mine["kind"] == "verdict") & mine["counted"]]
        checks = mine[mine["kind"] == "check"]
        line: dict[str, object] = {"paper": paper}
        line.update({v: int((verdicts["verdict"] == v).sum()) for v in VERDICTS})
        for family, name in ((PRIMARY, "primary"), (SECONDARY, "secondary")):
            fam = verdicts[verdicts["family"] == family]
            line[name] = len(fam)
            line[f"{name} yes"] = int((fam["adjusted"] == "yes").sum())
            line[f"{name} no"] = int((fam["adjusted"] == "no").sum())
        line |= {
            "shared": int((~mine["counted"]).sum()),
            "checks": len(checks),
            "checks passed": int((checks["verdict"] == "passes").sum()),
        }
        out.append(line)
    columns = ["paper", *VERDICTS, "primary", "primary yes", "primary no", "secondary", "secondary yes"]
    columns += ["secondary no", "shared", "checks", "checks passed"]
    # integer columns even without a paper: the totals of no claims are zeros
    return pd.DataFrame(out, columns=columns).astype({c: int for c in columns[1:]})
