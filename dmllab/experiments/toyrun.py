"""Shared by the toy artifacts: run a toy for every seed, keep the first seed's figure data as a table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dmllab.experiments.arrays import arrays_to_frame


def over_seeds(
    fn: Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]],
    seeds: Sequence[int],
    table: str | None = None,
    **kwargs: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Call ``fn(seed=s, **kwargs)`` for every seed; all rows, and the first seed's plot data as ``{table: frame}``."""
    rows: list[dict[str, Any]] = []
    plot: dict[str, Any] | None = None
    for seed in seeds:
        r, d = fn(seed=seed, **kwargs)
        rows += r
        plot = d if plot is None else plot
    return rows, ({table: arrays_to_frame(plot or {})} if table else {})
