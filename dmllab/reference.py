"""The papers dmllab reproduces (:data:`PAPER_TABLE`, the one table of their names) and their own numbers,
transcribed into ``results/reference/*.csv``.

Schema (one printed table cell per row): ``paper, artifact, row, column, dataset, metric, value, note``, with
``paper`` in :data:`REFERENCE_PAPERS`, ``artifact`` such as ``"Table 2"``, and ``value`` the number as printed
(percent for R@K).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dmllab import paths
from dmllab.fileio import naming, regular_file

if TYPE_CHECKING:
    import pandas as pd

REFERENCE_COLUMNS: tuple[str, ...] = (
    "paper",
    "artifact",
    "row",
    "column",
    "dataset",
    "metric",
    "value",
    "note",
)


@dataclass(frozen=True)
class Paper:
    """One paper: ``key`` (an artifact's ``paper``), its title, ``reference`` (its ``paper`` as spelled in
    ``results/reference/*.csv``; None where it prints none), ``prefix`` (artifact ids read
    ``<prefix>_<table|fig|sec|app><n>_<topic>``; None: no rule) and ``package`` (``dmllab/experiments/<package>/``
    holds its artifacts)."""

    key: str
    title: str
    reference: str | None
    prefix: str | None
    package: str


#: The papers in report order; "dmllab" holds the package's own artifacts (the offline benchmark).
PAPER_TABLE: tuple[Paper, ...] = (
    Paper("pnpp", "ProxyNCA++ (Teh, DeVries, Taylor, ECCV 2020)", "pnpp", "pnpp", "pnpp"),
    Paper(
        "proxy_anchor",
        "Proxy Anchor Loss (Kim, Kim, Cho, Kwak, CVPR 2020)",
        "proxy_anchor",
        "pa",
        "proxy_anchor",
    ),
    Paper(
        "heated",
        "Heated-up Softmax Embedding (Zhang, Lan, Wang, Chen, 2018)",
        "heated_softmax",
        "heated",
        "heated",
    ),
    Paper(
        "proxy_synthesis",
        "Proxy Synthesis (Gu, Ko, Kim, AAAI 2021)",
        "proxy_synthesis",
        "ps",
        "proxy_synthesis",
    ),
    Paper("dmllab", "dmllab (this package)", None, None, "benchmark"),
)
REFERENCE_PAPERS: tuple[str, ...] = tuple(p.reference for p in PAPER_TABLE if p.reference)


def reference_dir() -> Path:
    """``<repo>/results/reference``: committed data, so not moved by ``$DMLLAB_RESULTS``."""
    return paths.repo_root() / "results" / "reference"


def load_reference(paper: str | None = None, directory: str | os.PathLike | None = None) -> pd.DataFrame:
    """Every transcribed cell of every ``*.csv`` in ``directory`` (default :func:`reference_dir`).

    Args:
        paper: keep only this paper's cells (one of :data:`REFERENCE_PAPERS`).
        directory: folder of the reference CSVs.

    Returns:
        A DataFrame with :data:`REFERENCE_COLUMNS` (``value`` float, the rest strings) and a ``source`` column
        naming the file each row came from; empty (with those columns) when there are no files.

    Raises:
        ValueError: an unknown ``paper``, a file with missing or extra columns, an unknown paper in a file or
            a value that is not a number.
    """
    import pandas as pd

    from dmllab.results import check_plausible

    if paper is not None and paper not in REFERENCE_PAPERS:
        raise ValueError(f"unknown paper {paper!r}; valid papers: {', '.join(REFERENCE_PAPERS)}")
    directory = Path(directory) if directory is not None else reference_dir()
    frames = []
    for path in sorted(directory.glob("*.csv")):
        with naming(regular_file(path, "reference file"), "reading"):
            frame = pd.read_csv(path, dtype={c: "string" for c in REFERENCE_COLUMNS if c != "value"})
        if set(frame.columns) != set(REFERENCE_COLUMNS):
            missing = sorted(set(REFERENCE_COLUMNS) - set(frame.columns))
            extra = sorted(set(frame.columns) - set(REFERENCE_COLUMNS))
            raise ValueError(
                f"{path}: columns must be {list(REFERENCE_COLUMNS)}; missing {missing}, extra {extra}"
            )
        bad_paper = sorted(set(frame["paper"].dropna()) - set(REFERENCE_PAPERS))
        if bad_paper or frame["paper"].isna().any():
            raise ValueError(
                f"{path}: unknown or empty paper {bad_paper}; valid papers: {', '.join(REFERENCE_PAPERS)}"
            )
        values = pd.to_numeric(frame["value"], errors="coerce")
        bad = frame.loc[values.isna(), "value"]
        if len(bad):
            raise ValueError(
                f"{path}: non-numeric value(s) {list(bad.astype(str))[:5]} in rows {list(bad.index)[:5]}"
            )
        frame["value"] = values.astype(float)
        check_plausible(frame, path, "reference file")  # a value outside its metric's range, or infinite
        frame["source"] = path.name
        frames.append(frame[list(REFERENCE_COLUMNS) + ["source"]])
    if not frames:
        return pd.DataFrame(
            {c: pd.Series(dtype="float" if c == "value" else "string") for c in REFERENCE_COLUMNS}
        )
    out = pd.concat(frames, ignore_index=True)
    if paper is not None:
        out = out[out["paper"] == paper].reset_index(drop=True)
    return out
