"""Qualitative figures from index tables: top-k retrieval grids and images laid out on a grid (t-SNE).

The tables hold dataset indices (results CSVs); the images are read back from the dataset when drawing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def thumbnail(image: Any, size: int = 64) -> np.ndarray:
    """A PIL image as a ``size x size`` uint8 RGB array."""
    return np.asarray(image.convert("RGB").resize((size, size)))


def retrieval_grid(
    ax: Any, rows: Sequence[Sequence[tuple[np.ndarray, bool | None]]], *, pad: int = 4
) -> None:
    """Draw rows of (image, correct) tiles: the query first (correct=None), then its neighbours framed green
    (same class) or red (another class)."""
    if not rows or not rows[0]:
        ax.set_axis_off()
        return
    h, w = rows[0][0][0].shape[:2]
    n_cols = max(len(r) for r in rows)
    canvas = np.full((len(rows) * (h + 2 * pad), n_cols * (w + 2 * pad), 3), 255, dtype=np.uint8)
    colours = {True: (40, 160, 60), False: (210, 40, 40), None: (255, 255, 255)}
    for i, row in enumerate(rows):
        for j, (img, ok) in enumerate(row):
            y, x = i * (h + 2 * pad), j * (w + 2 * pad)
            canvas[y : y + h + 2 * pad, x : x + w + 2 * pad] = colours[ok]
            canvas[y + pad : y + pad + h, x + pad : x + pad + w] = img[:, :, :3]
    ax.imshow(canvas, interpolation="nearest")
    ax.set_axis_off()


def grid_assignment(coords: np.ndarray, seed: int = 0) -> np.ndarray:
    """Cells (N, 2) of a ``ceil(sqrt(N))``-square grid for 2-D points, minimising the summed squared distance
    between each point (scaled to the unit square) and its cell centre: a linear assignment problem solved
    exactly with ``scipy.optimize.linear_sum_assignment`` (as the Jonker-Volgenant layout of the paper)."""
    from scipy.optimize import linear_sum_assignment
    from scipy.spatial.distance import cdist

    n = len(coords)
    side = int(np.ceil(np.sqrt(n)))
    lo, hi = coords.min(axis=0), coords.max(axis=0)
    unit = (coords - lo) / np.where(hi - lo > 0, hi - lo, 1.0)
    gy, gx = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    cells = np.stack([gx.ravel(), gy.ravel()], axis=1)  # (side^2, 2) as (x, y)
    centres = (cells + 0.5) / side
    rows, cols = linear_sum_assignment(cdist(unit, centres, "sqeuclidean"))
    out = np.zeros((n, 2), dtype=int)
    out[rows] = cells[cols]
    return out


def neighbour_agreement(cells: np.ndarray, labels: np.ndarray) -> float:
    """Share of horizontally/vertically adjacent occupied grid cells whose images have the same label."""
    where = {(int(x), int(y)): int(lab) for (x, y), lab in zip(cells, labels)}
    same = total = 0
    for (x, y), lab in where.items():
        for nb in ((x + 1, y), (x, y + 1)):
            if nb in where:
                total += 1
                same += where[nb] == lab
    return same / total if total else float("nan")


def image_grid(ax: Any, cells: np.ndarray, images: Sequence[np.ndarray]) -> None:
    """Paste ``images`` at their grid ``cells`` ((x, y) integer pairs)."""
    h, w = images[0].shape[:2]
    side_x, side_y = int(cells[:, 0].max()) + 1, int(cells[:, 1].max()) + 1
    canvas = np.full((side_y * h, side_x * w, 3), 255, dtype=np.uint8)
    for (x, y), img in zip(cells, images):
        canvas[y * h : (y + 1) * h, x * w : (x + 1) * w] = img[:, :, :3]
    ax.imshow(canvas, interpolation="nearest")
    ax.set_axis_off()
