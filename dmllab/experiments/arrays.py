"""Figure data that is not a tidy metric (a decision-boundary grid, 2-D embeddings) as a long CSV table.

``arrays_to_frame({"prob/0.5": grid, "x": points})`` gives one line per array element (``array, i, j, value``);
:func:`frame_to_arrays` inverts it, so figures are drawn from CSV files only. Nested dicts are flattened with
"/" in the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = np.asarray(value, dtype=float)
    return out


def arrays_to_frame(data: Mapping[str, Any]) -> pd.DataFrame:
    """Long table ``array, i, j, value`` of every 0-, 1- or 2-D array in ``data`` (nested dicts flattened)."""
    import pandas as pd

    parts = []
    for name, arr in _flatten(data).items():
        if arr.ndim > 2:
            raise ValueError(f"array {name!r} has {arr.ndim} dimensions; at most 2 go into a table")
        a2 = arr.reshape(arr.shape[0] if arr.ndim else 1, -1) if arr.ndim != 2 else arr
        i, j = np.indices(a2.shape)
        columns = {"array": name, "ndim": arr.ndim, "i": i.ravel(), "j": j.ravel(), "value": a2.ravel()}
        parts.append(pd.DataFrame(columns))
    empty = pd.DataFrame(columns=["array", "ndim", "i", "j", "value"])
    return pd.concat(parts, ignore_index=True) if parts else empty


def frame_to_arrays(frame: pd.DataFrame) -> dict[str, Any]:
    """Inverse of :func:`arrays_to_frame`: nested dict of numpy arrays (keys split on "/")."""
    out: dict[str, Any] = {}
    for name, part in frame.groupby("array", sort=False):
        ndim = int(part["ndim"].iloc[0])
        shape = (int(part["i"].max()) + 1, int(part["j"].max()) + 1)
        arr = np.full(shape, np.nan)
        arr[part["i"].to_numpy(int), part["j"].to_numpy(int)] = part["value"].to_numpy(float)
        arr = arr.reshape(-1) if ndim == 1 else (arr.reshape(()) if ndim == 0 else arr)
        node = out
        keys = str(name).split("/")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = arr
    return out
