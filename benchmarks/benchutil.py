"""What the benchmark scripts share (imported as ``benchutil``: they run as ``python benchmarks/x.py``): the CSV
writer, and reading the result a measured child process prints as its last ``RESULT {json}`` line."""

from __future__ import annotations

import csv
import json
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def write_csv(
    out: str | Path, rows: Sequence[Mapping[str, Any]], fields: Sequence[str] | None = None
) -> Path:
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


def child_result(stdout: str) -> dict[str, Any]:
    """The JSON of the last ``RESULT {...}`` line of a child process's ``stdout``.

    Raises:
        RuntimeError: the child printed no such line.
    """
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(f"the child process printed no RESULT line; its last output: {stdout[-2000:]!r}")
    return json.loads(lines[-1][len("RESULT ") :])


def machine() -> str:
    """The CPU a benchmark ran on, for its CSV: model name, family/model numbers and flags that pick kernels, and
    the logical CPU count (e.g. ``AMD EPYC (family 26 model 2), avx2 avx512f avx512_bf16, 2 CPUs``). Timings and,
    with ``DMLLAB_CPU_ISA=native``, the last bits of the metrics depend on it (dmllab.numerics)."""
    from dmllab.numerics import cpuinfo

    info = cpuinfo()
    if info is None:
        return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    flags = set(info.get("flags", "").split())
    kept = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags)
    name = info.get("model name", platform.machine())
    return f"{name} (family {info.get('cpu family', '?')} model {info.get('model', '?')}), {kept}, {os.cpu_count()} CPUs"
