"""Rows -> the tables every artifact shows (notebook and report alike): the reproduced numbers over seeds and the
paper's printed numbers side by side; the claims' verdicts are :mod:`dmllab.experiments.verdicts`'.

Also the small helpers artifacts use to state a claim's per-seed effect (:func:`per_seed`, :func:`paired`,
:func:`diff_at`, :func:`extremes`, :func:`members`), which record the runs each side read (:func:`arms_of`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dmllab.experiments.artifact import REFERENCE_PAPER, STAND_IN_DATASET, Artifact

if TYPE_CHECKING:
    import pandas as pd


def summarise(rows: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Mean, std and count over seeds for each (variant, dataset, ``by``, param_*, metric)."""
    params = sorted(c for c in rows.columns if c.startswith("param_"))
    keys = ["variant", "dataset", *by] + params + ["metric"]
    keys = [k for k in keys if k in rows.columns and rows[k].notna().any()]
    grouped = rows.groupby(keys or ["metric"], dropna=False, sort=False)["value"]
    return grouped.agg(mean="mean", std="std", n="count").reset_index()


def _paper_std(note: Any) -> float:
    """The ``+-x`` a paper prints next to a value (transcribed into the reference note), NaN when none."""
    match = re.search(r"\+-\s*([0-9.]+)", note) if isinstance(note, str) else None  # NaN / pd.NA: none
    return float(match.group(1)) if match else math.nan


def _printed(artifact: Artifact, rows: pd.DataFrame, reference: pd.DataFrame) -> list[dict[str, Any]]:
    """Each summarised row (:func:`summarise`) that faces a printed cell, with the cell (``cell``, ``faces``: the
    paper dataset), its value (``paper``) and its printed ``+-`` (``paper +-``, NaN where none)."""
    if artifact.reference is None or rows.empty or artifact.paper not in REFERENCE_PAPER:
        return []
    ref = reference[reference["paper"] == REFERENCE_PAPER[artifact.paper]] if len(reference) else reference
    out = []
    for rec in summarise(rows).to_dict("records"):
        key = artifact.reference(rec)
        if key is None:
            continue
        label, row, column = key[:3]
        given = rec.get("dataset")
        dataset = key[3] if len(key) > 3 else STAND_IN_DATASET.get(str(given), given)
        hit = ref[(ref["artifact"] == label) & (ref["row"] == row) & (ref["column"] == column)]
        if len(hit) > 1:
            hit = hit[hit["dataset"] == dataset]
        if len(hit) > 1:
            hit = hit[hit["metric"] == rec["metric"]]
        value = float(hit["value"].iloc[0]) if len(hit) else math.nan
        pstd = _paper_std(hit["note"].iloc[0]) if len(hit) else math.nan
        out.append(
            {**rec, "cell": f"{label} / {row} / {column}", "faces": dataset, "paper": value, "paper +-": pstd}
        )
    return out


def paper_values(artifact: Artifact, rows: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """The paper's printed value beside each summarised row that faces a cell: :func:`summarise`'s columns plus
    ``paper`` (what the figures draw beside the reproduced values)."""
    import pandas as pd

    return pd.DataFrame(_printed(artifact, rows, reference))


def paper_vs_reproduced(artifact: Artifact, rows: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """One line per reproduced row that corresponds to a printed cell: the paper's value (and its ``+-`` where
    printed), the reproduced mean +- std over seeds, and where the row is on the paper's dataset the difference and
    whether it lies within the paper's +-.

    On the quick/smoke profiles the offline benchmark's rows face the paper's CUB cells
    (:data:`STAND_IN_DATASET`): the absolute numbers are not comparable, so the table shows them side by side
    without a difference (the figures draw the paper's differences between rows instead).
    """
    import pandas as pd

    columns = ["paper cell", "dataset", "metric", "paper", "paper +-", "reproduced", "std", "seeds", "delta"]
    columns.append("within paper +-")
    out = []
    for rec in _printed(artifact, rows, reference):
        delta = rec["mean"] - rec["paper"] if str(rec.get("dataset")) == str(rec["faces"]) else math.nan
        pstd, faced = rec["paper +-"], f"{rec.get('dataset')} vs {rec['faces']}"
        within = "" if math.isnan(pstd) or math.isnan(delta) else ("yes" if abs(delta) <= pstd else "no")
        values = (rec["cell"], faced, rec["metric"], rec["paper"], pstd, rec["mean"], rec["std"])
        out.append(dict(zip(columns, (*values, int(rec["n"]), delta, within))))
    return pd.DataFrame(out, columns=columns)


# ------------------------------------------------------------------------------------- claim effects

# ``effect.attrs[ARMS]``: the run ids (``run_id``) each side of a comparison read, ``(better, worse)``;
# ``effect.attrs[READS]``: what else it read (the metric and each side's measured rows, where the helpers know them).
# Two claims that read the same runs, metric and condition read the same comparison (the report shows them
# together: :func:`dmllab.experiments.multiplicity.claims_frame`).
ARMS = "arms"
READS = "reads"
AVERAGE_OF = "average_of"


def run_ids(rows: pd.DataFrame) -> frozenset[str]:
    """The run ids (``run_id``) of ``rows`` (empty where the rows come from no stored run)."""
    if "run_id" not in rows.columns:
        return frozenset()
    return frozenset(str(r) for r in rows["run_id"].dropna().unique())


def with_arms(effect: Any, better: pd.DataFrame, worse: pd.DataFrame, reads: tuple[Any, ...] = ()) -> Any:
    """``effect`` with ``attrs[ARMS]`` = the run ids of the ``better`` and the ``worse`` rows it was read from, and
    ``attrs[READS]`` = ``reads`` (the metric and conditions)."""
    effect.attrs[ARMS] = (run_ids(better), run_ids(worse))
    effect.attrs[READS] = reads
    return effect


def reads_of(effect: Any) -> tuple[Any, ...]:
    """What an effect read beside its runs (:func:`with_arms`): ``()`` where unknown."""
    return tuple(getattr(effect, "attrs", {}).get(READS) or ())


def _condition(rows: pd.DataFrame) -> frozenset[tuple[str, float]]:
    """What a side read, as measured: each row's run id and value. Two sides read the same runs under the same
    condition (split, deformation, bin) exactly when they read the same values of the same runs (a filter the
    caller applied before counts too; the labels an artifact gives its runs do not)."""
    if "run_id" not in rows.columns:
        return frozenset()
    return frozenset((str(r), round(float(v), 9)) for r, v in zip(rows["run_id"], rows["value"]))


def arms_of(effect: Any) -> tuple[frozenset[str], frozenset[str]]:
    """``(better, worse)`` run ids an effect was read from (:func:`with_arms`); empty where unknown."""
    arms = getattr(effect, "attrs", {}).get(ARMS)
    return arms if arms else (frozenset(), frozenset())


def _select(df: pd.DataFrame, metric: str, where: Mapping[str, Any]) -> pd.DataFrame:
    sel = df[df["metric"] == metric]
    for key, value in where.items():
        col = key if key in sel.columns else f"param_{key}"
        if col not in sel.columns:
            return sel.iloc[0:0]
        sel = sel[sel[col] == value if isinstance(value, float) else sel[col].astype(str) == str(value)]
    return sel


def per_seed(df: pd.DataFrame, metric: str, **where: Any) -> pd.Series:
    """Mean value of ``metric`` per seed over the rows matching ``where`` (column or ``param_`` name = value)."""
    return _select(df, metric, where).groupby("seed")["value"].mean()


def paired(df: pd.DataFrame, metric: str, better: Mapping[str, Any], worse: Mapping[str, Any]) -> pd.Series:
    """Per-seed ``metric(better) - metric(worse)``, on the seeds both have (a paired comparison); the runs each
    side read in ``attrs`` (:func:`with_arms`)."""
    a, b = _select(df, metric, better), _select(df, metric, worse)
    diff = (a.groupby("seed")["value"].mean() - b.groupby("seed")["value"].mean()).dropna()
    return with_arms(diff, a, b, ("paired", metric, _condition(a), _condition(b)))


def _near(df: pd.DataFrame, metric: str, param: str, value: float) -> pd.DataFrame:
    """The ``metric`` rows whose ``param_<param>`` is numerically close to ``value`` (a swept float's grid)."""
    import numpy as np
    import pandas as pd

    sel = df[df["metric"] == metric]
    col = f"param_{param}"
    if col not in sel.columns:
        return sel.iloc[0:0]
    return sel[np.isclose(pd.to_numeric(sel[col], errors="coerce"), value, rtol=1e-6, atol=0)]


def diff_at(df: pd.DataFrame, metric: str, param: str, better: float, worse: float) -> pd.Series:
    """Per seed: ``metric`` at ``param = better`` minus at ``param = worse`` (two values of a swept float
    parameter, matched to a relative 1e-6), on the seeds both have, with the runs each side read
    (:func:`with_arms`)."""
    a, b = _near(df, metric, param, better), _near(df, metric, param, worse)
    diff = (a.groupby("seed")["value"].mean() - b.groupby("seed")["value"].mean()).dropna()
    return with_arms(diff, a, b)


def extremes(
    df: pd.DataFrame, metric: str, by: str, *, low_minus_high: bool = True, **where: Any
) -> pd.Series:
    """Per seed: ``metric`` at the smallest value of ``by`` minus at the largest (or the reverse)."""
    sel = _select(df, metric, where)
    col = by if by in sel.columns else f"param_{by}"
    if sel.empty or sel[col].nunique() < 2:
        return sel.groupby("seed")["value"].mean().iloc[0:0]
    table = sel.pivot_table(index="seed", columns=col, values="value", aggfunc="mean").sort_index(axis=1)
    diff = table.iloc[:, 0] - table.iloc[:, -1]
    values = sorted(sel[col].unique())
    low, high = sel[sel[col] == values[0]], sel[sel[col] == values[-1]]
    reads = ("extremes", metric, by, low_minus_high, _condition(low), _condition(high))
    if low_minus_high:
        return with_arms(diff.dropna(), low, high, reads)
    return with_arms((-diff).dropna(), high, low, reads)


def _all_arms(effects: Any) -> tuple[frozenset[str], frozenset[str]]:
    arms = [arms_of(e) for e in effects]
    return frozenset().union(*(a[0] for a in arms)), frozenset().union(*(a[1] for a in arms))


def averaged(effects: Sequence[pd.Series] | Mapping[str, pd.Series]) -> pd.Series:
    """The per-seed mean of several comparisons (on the seeds all have), with the runs of all of them in
    ``attrs``; empty without comparisons. Named comparisons (a mapping) are also kept, as ``attrs[AVERAGE_OF]``,
    so that the verdict layer can leave a member out of the mean (``Claim.member_arms``)."""
    import pandas as pd

    named = dict(effects) if isinstance(effects, Mapping) else {}
    effects = [e for e in (named.values() if named else effects) if len(e)]
    if not effects:
        return pd.Series(dtype=float)
    mean = pd.concat(effects, axis=1).dropna().mean(axis=1)
    mean.attrs[ARMS] = _all_arms(effects)
    mean.attrs[READS] = ("averaged", *(reads_of(e) for e in effects))
    if named:
        mean.attrs[AVERAGE_OF] = {k: e for k, e in named.items() if len(e)}
    return mean


def members(effects: Mapping[str, pd.Series]) -> pd.DataFrame:
    """One column per member of a set (an intersection-union claim, :class:`~dmllab.experiments.Claim`), on the
    seeds every member has; the runs of every member's comparison in ``attrs``."""
    import pandas as pd

    frame = pd.concat(dict(effects), axis=1).dropna() if effects else pd.DataFrame()
    frame.attrs[ARMS] = _all_arms(effects.values())
    frame.attrs[READS] = ("members", *((str(name), reads_of(e)) for name, e in effects.items()))
    return frame
