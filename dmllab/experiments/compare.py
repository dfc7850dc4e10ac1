"""Rows -> the tables every artifact shows (notebook and report alike): the reproduced numbers over seeds and the
paper's printed numbers side by side; the claims' verdicts are :mod:`dmllab.experiments.verdicts`' (``judge`` and
``verdict_table`` are re-exported here).

Also the small helpers artifacts use to state a claim's per-seed effect (:func:`per_seed`, :func:`paired`,
:func:`extremes`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dmllab.experiments.artifact import REFERENCE_PAPER, STAND_IN_DATASET, Artifact
from dmllab.experiments.verdicts import judge, training_status, verdict_table

__all__ = [
    "extremes",
    "judge",
    "paired",
    "paper_vs_reproduced",
    "per_seed",
    "summarise",
    "training_status",
    "verdict_table",
]

if TYPE_CHECKING:
    import pandas as pd


# ---------------------------------------------------------------------------------------- summaries


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


def paper_vs_reproduced(artifact: Artifact, rows: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """One line per reproduced row that corresponds to a printed cell: the paper's value (and its ``+-`` where
    printed), the reproduced mean +- std over seeds, the difference, and whether it lies within the paper's +-.

    On the quick/smoke profiles the offline benchmark's rows face the paper's CUB cells
    (:data:`STAND_IN_DATASET`): the absolute numbers are not comparable, the table shows them side by side.
    """
    import pandas as pd

    columns = [
        "paper cell",
        "dataset",
        "metric",
        "paper",
        "paper +-",
        "reproduced",
        "std",
        "seeds",
        "delta",
        "within paper +-",
    ]
    if artifact.reference is None or rows.empty or artifact.paper not in REFERENCE_PAPER:
        return pd.DataFrame(columns=columns)
    ref = reference[reference["paper"] == REFERENCE_PAPER[artifact.paper]] if len(reference) else reference
    out = []
    for rec in summarise(rows).to_dict("records"):
        key = artifact.reference(rec)
        if key is None:
            continue
        label, row, column = key[:3]
        dataset = (
            key[3] if len(key) > 3 else STAND_IN_DATASET.get(str(rec.get("dataset")), rec.get("dataset"))
        )
        hit = ref[(ref["artifact"] == label) & (ref["row"] == row) & (ref["column"] == column)]
        if len(hit) > 1:
            hit = hit[hit["dataset"] == dataset]
        if len(hit) > 1:
            hit = hit[hit["metric"] == rec["metric"]]
        value = float(hit["value"].iloc[0]) if len(hit) else math.nan
        pstd = _paper_std(hit["note"].iloc[0]) if len(hit) else math.nan
        delta = rec["mean"] - value
        out.append(
            {
                "paper cell": f"{label} / {row} / {column}",
                "dataset": f"{rec.get('dataset')} vs {dataset}",
                "metric": rec["metric"],
                "paper": value,
                "paper +-": pstd,
                "reproduced": rec["mean"],
                "std": rec["std"],
                "seeds": int(rec["n"]),
                "delta": delta,
                "within paper +-": ""
                if math.isnan(pstd) or math.isnan(delta)
                else ("yes" if abs(delta) <= pstd else "no"),
            }
        )
    return pd.DataFrame(out, columns=columns)


# ------------------------------------------------------------------------------------- claim effects


def _select(df: pd.DataFrame, metric: str, where: Mapping[str, Any]) -> pd.DataFrame:
    sel = df[df["metric"] == metric]
    for key, value in where.items():
        col = key if key in sel.columns else f"param_{key}"
        if col not in sel.columns:
            return sel.iloc[0:0]
        sel = (
            sel[sel[col].astype(str) == str(value)]
            if not isinstance(value, float)
            else sel[sel[col] == value]
        )
    return sel


def per_seed(df: pd.DataFrame, metric: str, **where: Any) -> pd.Series:
    """Mean value of ``metric`` per seed over the rows matching ``where`` (column or ``param_`` name = value)."""
    return _select(df, metric, where).groupby("seed")["value"].mean()


def paired(df: pd.DataFrame, metric: str, better: Mapping[str, Any], worse: Mapping[str, Any]) -> pd.Series:
    """Per-seed ``metric(better) - metric(worse)``, on the seeds both have (a paired comparison)."""
    a, b = per_seed(df, metric, **better), per_seed(df, metric, **worse)
    return (a - b).dropna()


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
    return (diff if low_minus_high else -diff).dropna()
