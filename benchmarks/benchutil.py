"""The benchmark scripts' CSV writer (imported by the scripts as ``benchutil``: they run as ``python benchmarks/x.py``)."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def write_csv(out: str | Path, rows: Sequence[Mapping[str, Any]], fields: Sequence[str] | None = None) -> Path:
    """Write ``rows`` to ``out`` (parents created), floats with 4 decimals; columns ``fields`` (default: the
    first row's keys). Returns the path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(fields if fields is not None else rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})
    return out
