"""Checks of the papers' reference numbers in results/reference/*.csv.

Two kinds of checks:
- schema: exact columns, unique (paper, artifact, row, column) keys, finite values, R@K in [0, 100];
- transcription: every value (and its printed std, where the note has one) must occur as a printed number
  in the paper's plain text, inside the region of its table: from the caption "Table N" to the next caption
  for papers whose captions sit above their tables, from the previous caption to the caption for papers
  whose captions sit below. ProxyNCA++ has two extractions; a number counts as found in either.
  A self-check makes sure that deliberately wrong values (value + 13.37) are not found.
"""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
REF_DIR = REPO / "results" / "reference"
COLUMNS = ["paper", "artifact", "row", "column", "dataset", "metric", "value", "note"]
FILES = {
    "pnpp": "pnpp.csv",
    "proxy_anchor": "proxy_anchor.csv",
    "heated_softmax": "heated_softmax.csv",
    "proxy_synthesis": "proxy_synthesis.csv",
}
# paper -> (text-file prefixes in shared/papers, caption position relative to the table body)
SOURCES = {
    "pnpp": (("000", "001"), "above"),
    "proxy_anchor": (("002",), "below"),
    "heated_softmax": (("003",), "above"),
    "proxy_synthesis": (("004",), "below"),
}
DATASETS = {"", "cub", "cars", "sop", "inshop", "imagenet", "cifar10", "cifar100", "svhn", "tinyimagenet"}
CAPTION = re.compile(r"^(?:\*\*)?Table (?P<id>\d+|[A-Z])(?:\.\*\*|[.:])(?:\s|$)")
MAX_REGION_LINES = 150


def _papers_dir() -> Path | None:
    for cand in (REPO.parent / "shared" / "papers", REPO / "shared" / "papers", Path("/work/shared/papers")):
        if cand.is_dir() and any(cand.glob("000_*.txt")):
            return cand
    return None


def _load(paper: str) -> pd.DataFrame:
    return pd.read_csv(REF_DIR / FILES[paper], dtype={"value": float}, keep_default_na=False)


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    missing = [f for f in FILES.values() if not (REF_DIR / f).is_file()]
    assert not missing, f"missing reference CSVs in {REF_DIR}: {missing}"
    return {paper: _load(paper) for paper in FILES}


# --------------------------------------------------------------------------------------------- schema
@pytest.mark.parametrize("paper", sorted(FILES))
def test_schema(paper: str) -> None:
    with open(REF_DIR / FILES[paper], encoding="utf-8") as f:
        header = f.readline().strip().split(",")
    assert header == COLUMNS
    df = _load(paper)
    assert len(df) > 0
    assert set(df["paper"]) == {paper}
    assert df["artifact"].str.fullmatch(r"(Table \d+|Table [A-Z]|Fig\. \d+[a-z]?)").all()
    assert (df["row"].str.len() > 0).all() and (df["column"].str.len() > 0).all()
    assert (df["metric"].str.len() > 0).all()
    assert set(df["dataset"]) <= DATASETS, set(df["dataset"]) - DATASETS
    values = df["value"].to_numpy()
    assert all(math.isfinite(v) for v in values)
    dup = df.duplicated(["paper", "artifact", "row", "column"], keep=False)
    assert not dup.any(), df.loc[dup, ["artifact", "row", "column"]].to_string()
    rk = df["metric"].str.fullmatch(r"R@\d+")
    assert df.loc[rk, "value"].between(0, 100).all()
    retrieval = df["metric"].isin(["NMI", "P@1", "RP", "MAP@R", "accuracy", "train_accuracy"])
    assert df.loc[retrieval, "value"].between(0, 100).all()
    std = df["note"].str.extract(r"\+-(\d+(?:\.\d+)?)")[0].dropna().astype(float)
    assert (std >= 0).all()


# ------------------------------------------------------------------------------------ text regions
_STRIP = ("<b>", "</b>", "<u>", "</u>", "<math>", "</math>", "$", "**", "\\,")


def _normalise(text: str) -> str:
    text = text.replace("plus-or-minus", " ").replace("\\pm", " ± ")
    for token in _STRIP:
        text = text.replace(token, " ")
    return re.sub(r"(\d)\s*\.\s*(\d)", r"\1.\2", text)  # "64 . 7" -> "64.7"


@cache
def _lines(prefix: str) -> tuple[str, ...]:
    papers = _papers_dir()
    assert papers is not None
    (path,) = papers.glob(f"{prefix}_*.txt")
    return tuple(path.read_text(encoding="utf-8").splitlines())


@cache
def _region(prefix: str, table_id: str, position: str) -> str:
    """Normalised text of the region of 'Table <table_id>' in one extraction ('' when no caption)."""
    lines = _lines(prefix)
    captions = [(i, m["id"]) for i, ln in enumerate(lines) if (m := CAPTION.match(ln.strip()))]
    hits = [k for k, (_, tid) in enumerate(captions) if tid == table_id]
    if not hits:
        return ""
    k = hits[0]
    at = captions[k][0]
    if position == "above":
        end = captions[k + 1][0] if k + 1 < len(captions) else len(lines)
        chunk = lines[at : min(end, at + MAX_REGION_LINES)]
    else:
        start = captions[k - 1][0] + 1 if k > 0 else 0
        chunk = lines[max(start, at - MAX_REGION_LINES) : at + 1]
    return _normalise("\n".join(chunk))


def _printed_forms(value: float) -> list[str]:
    """The ways a paper may print `value`: 64.7, 64.70, 11,788, 4e-3, 2.4e2 ..."""
    forms: list[str] = []
    for d in range(4):
        s = f"{value:.{d}f}"
        if abs(float(s) - value) < 1e-9:
            forms.append(s)
            if abs(value) >= 1000:
                forms.append(f"{value:,.{d}f}")
    if value != 0:
        for e in range(-5, 6):
            if e in (0,):
                continue
            mant = value / 10**e
            if not 1 <= abs(mant) < 10:
                continue
            for d in range(3):
                ms = f"{mant:.{d}f}"
                if abs(float(ms) * 10**e - value) < 1e-9 * max(1.0, abs(value)):
                    forms.append(f"{ms}e{e}")
    return list(dict.fromkeys(forms))


def _found(value: float, text: str) -> bool:
    for form in _printed_forms(value):
        pattern = r"(?<![\d.])" + re.escape(form) + r"(?![\d]|\.\d|e[+-]?\d)"
        if re.search(pattern, text):
            return True
    return False


def _regions(paper: str, artifact: str) -> list[str]:
    prefixes, position = SOURCES[paper]
    table_id = artifact.split()[-1]
    return [r for p in prefixes if (r := _region(p, table_id, position))]


def _sample(df: pd.DataFrame) -> pd.DataFrame:
    """Deterministic sample: every 7th row, plus the first and last row of every artifact."""
    idx = set(range(0, len(df), 7))
    for _, g in df.groupby("artifact", sort=False):
        idx.update((g.index[0], g.index[-1]))
    return df.loc[sorted(idx)]


needs_papers = pytest.mark.skipif(
    _papers_dir() is None,
    reason="paper texts not found (looked for ../shared/papers beside the repo and /work/shared/papers)",
)


@needs_papers
@pytest.mark.parametrize("paper", sorted(FILES))
def test_every_table_has_a_region(paper: str, tables: dict[str, pd.DataFrame]) -> None:
    for artifact in tables[paper]["artifact"].unique():
        if artifact.startswith("Table"):
            assert _regions(paper, artifact), f"{paper}: no caption found for {artifact}"


@needs_papers
@pytest.mark.parametrize("paper", sorted(FILES))
def test_sampled_values_occur_in_table_text(paper: str, tables: dict[str, pd.DataFrame]) -> None:
    sample = _sample(tables[paper])
    assert len(sample) >= 30 or len(sample) == len(tables[paper])
    missing = []
    for r in sample.itertuples():
        regions = _regions(paper, r.artifact)
        if not any(_found(r.value, text) for text in regions):
            missing.append(f"{r.artifact} | {r.row} | {r.column} = {r.value}")
        std = re.search(r"\+-(\d+(?:\.\d+)?)", r.note)
        if std and not any(_found(float(std.group(1)), text) for text in regions):
            missing.append(f"{r.artifact} | {r.row} | {r.column} std {std.group(1)}")
    assert not missing, f"{len(missing)} sampled cells not found in the paper text:\n" + "\n".join(missing)


@needs_papers
@pytest.mark.parametrize("paper", sorted(FILES))
def test_wrong_values_are_not_found(paper: str, tables: dict[str, pd.DataFrame]) -> None:
    """Self-check that the text search can fail: shifted values must not be found."""
    sample = _sample(tables[paper]).head(5)
    for r in sample.itertuples():
        regions = _regions(paper, r.artifact)
        assert any(_found(r.value, text) for text in regions)
        assert not any(_found(r.value + 13.37, text) for text in regions), (r.artifact, r.row, r.column)
    # a region that does not hold the table must not confirm its numbers
    assert not _found(12345.678, _regions(paper, sample.iloc[0]["artifact"])[0])


def test_printed_forms() -> None:
    assert "64.7" in _printed_forms(64.7) and "64.70" in _printed_forms(64.7)
    assert "78" in _printed_forms(78.0) and "78.0" in _printed_forms(78.0)
    assert "11,788" in _printed_forms(11788.0)
    assert "4e-3" in _printed_forms(0.004) and "2.4e2" in _printed_forms(240.0)
    assert _found(64.7, _normalise("x $64 . 7 \\pm 1.6$ y")) and _found(64.7, "**64.7**")
    assert not _found(64.7, "164.7 64.71 6.47")
