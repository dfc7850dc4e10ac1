"""One look for every figure: the seaborn theme, the palette and the backend choice for headless runs."""

from __future__ import annotations

import os
import sys

# Colour-blind safe palette used by every figure of the report.
PALETTE = "colorblind"
_GUI_BACKENDS = {"qtagg", "qt5agg", "tkagg", "gtk3agg", "gtk4agg", "wxagg", "macosx", "qtcairo", "tkcairo"}


def is_headless() -> bool:
    """True where no display can show a window (no ``DISPLAY``/``WAYLAND_DISPLAY`` on Linux)."""
    if sys.platform.startswith("linux"):
        return not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return False


def use_headless_backend() -> str:
    """Switch matplotlib to ``Agg`` when running headless with a GUI backend; return the backend in use.

    The notebook kernel's inline backend is left alone (it renders without a display).
    """
    import matplotlib

    backend = matplotlib.get_backend()
    if is_headless() and backend.lower() in _GUI_BACKENDS:
        matplotlib.use("Agg", force=True)
        backend = "Agg"
    return backend


def set_theme(context: str = "notebook", font_scale: float = 1.0) -> None:
    """Apply the dmllab figure style (seaborn whitegrid, colour-blind palette). Call it explicitly.

    Args:
        context: seaborn context (``"paper"``, ``"notebook"``, ``"talk"``).
        font_scale: seaborn font scale.
    """
    use_headless_backend()
    import seaborn as sns

    sns.set_theme(context=context, style="whitegrid", palette=PALETTE, font_scale=font_scale)
    import matplotlib as mpl

    mpl.rcParams.update({"figure.dpi": 100, "savefig.bbox": "tight", "axes.titlesize": "medium"})
