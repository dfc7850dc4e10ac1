"""Rows of a table compared by content: a key per row that is the same for a number however it was typed or read
back (``1``, ``1.0``, an ``Int64`` 1), and what the result writers build on it (:mod:`dmllab.results`): carrying
columns over from the rows a block replaces (:func:`carry_over`), putting a block back where the replaced rows were
(:func:`splice`), finding two rows that say the same (:func:`first_duplicate`)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported lazily: ``import dmllab`` must stay cheap.
    import pandas as pd


def canonical(value: Any) -> str:
    """``value`` as one string: "" for a missing value (None, NaN, <NA>, ""), ``repr(float(x))`` for a number,
    ``str`` otherwise."""
    import pandas as pd

    if value is None or value is pd.NA or (isinstance(value, float) and value != value) or value == "":
        return ""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return str(bool(value))
    if isinstance(value, numbers.Number):
        return repr(float(value))  # type: ignore[arg-type]
    return str(value)


def keys(frame: pd.DataFrame, columns: Sequence[str]) -> list[tuple[str, ...]]:
    """One key per row of ``frame``: :func:`canonical` of each of ``columns`` ("" where the frame lacks one)."""
    return [tuple(canonical(r.get(c)) for c in columns) for r in frame.to_dict("records")]


def carry_over(new: pd.DataFrame, old: pd.DataFrame, carried: Sequence[str]) -> pd.DataFrame:
    """``new`` where each row that ``old`` also holds (equal in every column but ``carried``) takes the old row's
    ``carried`` columns; each old row lends them once."""
    if new.empty or old.empty:
        return new
    columns = sorted((set(new.columns) | set(old.columns)) - set(carried))
    pool: dict[tuple[str, ...], list[Any]] = {}
    for index, key in zip(old.index, keys(old, columns)):
        pool.setdefault(key, []).append(index)
    new = new.astype({c: object for c in carried if c in new.columns})
    for index, key in zip(new.index, keys(new, columns)):
        if pool.get(key):
            source = pool[key].pop(0)
            for column in carried:
                if column in old.columns:
                    new.at[index, column] = old.at[source, column]
    return new


def splice(existing: pd.DataFrame, drop: pd.Series, block: pd.DataFrame) -> pd.DataFrame:
    """``existing`` without the rows ``drop`` marks and with ``block`` where the first of them was (at the end when
    none is marked): replacing a block keeps the order of the rest."""
    import pandas as pd

    existing = existing.reset_index(drop=True)
    drop = drop.reset_index(drop=True)
    at = int(drop.to_numpy().argmax()) if drop.any() else len(existing)
    kept = existing[~drop]
    parts = [kept[kept.index < at], block, kept[kept.index >= at]]
    return pd.concat([p for p in parts if not p.empty] or [block], ignore_index=True)


def first_duplicate(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[int, int] | None:
    """The positions of the first two rows of ``frame`` equal in ``columns``, None when every row differs."""
    seen: dict[tuple[str, ...], int] = {}
    for position, key in enumerate(keys(frame, columns)):
        if key in seen:
            return seen[key], position
        seen[key] = position
    return None
