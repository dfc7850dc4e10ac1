"""Figures made from the tidy result CSVs (seaborn/matplotlib).

``set_theme()`` applies the common style (call it explicitly; nothing happens at import) and
``save_figure(fig, prefix)`` writes ``<prefix>.png`` (150 dpi) and ``<prefix>.pdf``. Figure modules of the
artifacts (``dmllab.plots.toys``, ...) build on these two.
"""

# ruff: noqa: F401 - the imports are the package's public names

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dmllab.fileio import write_atomic
from dmllab.plots.style import PALETTE, is_headless, set_theme, use_headless_backend

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_FORMATS = ("png", "pdf")


def save_figure(
    fig: Figure,
    prefix: str | os.PathLike,
    *,
    formats: Sequence[str] = _FORMATS,
    dpi: int = 150,
) -> list[Path]:
    """Save ``fig`` as ``<prefix>.<fmt>`` for each format (folders are created); return the paths. A file that
    already holds the same bytes is not rewritten, and one is written whole or not at all
    (:func:`dmllab.fileio.write_atomic`).

    Args:
        fig: the matplotlib figure.
        prefix: path without extension, e.g. ``figures/pnpp_fig3_two_moons`` or ``..._panel_a``.
        formats: file formats understood by matplotlib.
        dpi: resolution of raster formats.
    """
    prefix = Path(prefix)
    if prefix.suffix in {f".{f}" for f in formats}:
        raise ValueError(f"save_figure takes a prefix without extension, got {prefix}")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = prefix.with_name(prefix.name + f".{fmt}")
        # Fixed metadata keeps PDFs byte-stable across runs (no creation date in the file).
        metadata = {"CreationDate": None} if fmt == "pdf" else ({"Software": None} if fmt == "png" else None)
        image = io.BytesIO()
        fig.savefig(image, format=fmt, dpi=dpi, bbox_inches="tight", metadata=metadata)
        write_atomic(path, image.getvalue())
        paths.append(path)
    return paths
