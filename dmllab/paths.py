"""Where dmllab reads and writes: caches (outside git), results and figures (inside the repository).

Every location can be moved with an environment variable, which the tests use to stay in temporary folders.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dmllab.numerics import cpu_isa_mode, stamp_cache

_REPO_ROOT = Path(__file__).resolve().parent.parent


def repo_root() -> Path:
    """The checkout that holds the ``dmllab`` package (results/ and figures/ live here)."""
    return _REPO_ROOT


def git_sha() -> str | None:
    """The checkout's commit (``git rev-parse HEAD``), None outside a git checkout or without git (provenance)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(_REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


def cache_dir() -> Path:
    """Generated data, pre-trained weights and checkpoints: ``$DMLLAB_CACHE`` or ``~/.cache/dmllab``; its
    ``native/`` subfolder with ``DMLLAB_CPU_ISA=native`` (:mod:`dmllab.numerics`: what the machine's own CPU
    kernels build never mixes with what the pinned ones build). A folder it makes is stamped as built by a dmllab
    that pins (:func:`dmllab.numerics.stamp_cache`)."""
    base = Path(os.environ.get("DMLLAB_CACHE", Path.home() / ".cache" / "dmllab")).expanduser()
    root = base / "native" if _native() else base
    if not root.exists():  # made by a dmllab that pins: stamped (dmllab.numerics.stale_cache_message)
        stamp_cache(root)
    return root


def results_dir() -> Path:
    """Tidy CSVs and the run store: ``$DMLLAB_RESULTS`` or ``<repo>/results``."""
    return Path(os.environ.get("DMLLAB_RESULTS", _REPO_ROOT / "results")).expanduser()


def tmp_dir() -> Path:
    """Scratch on the results' file system (never committed): ``<results>/tmp``. A SLURM study's submission
    folders go here (the compute nodes must see them, as they see the run store)."""
    return results_dir() / "tmp"


def runs_dir() -> Path:
    """The run store: ``<results>/runs`` (``<results>/runs-native`` with ``DMLLAB_CPU_ISA=native``)."""
    return results_dir() / ("runs-native" if _native() else "runs")


def _native() -> bool:
    return cpu_isa_mode() == "native"


def figures_dir() -> Path:
    """Figures and the HTML report: ``$DMLLAB_FIGURES`` or ``<repo>/figures``."""
    return Path(os.environ.get("DMLLAB_FIGURES", _REPO_ROOT / "figures")).expanduser()


def profile_figures_dir(profile: str) -> Path:
    """Figures of one profile: ``<figures>`` for the committed ``quick`` profile, ``<figures>/<profile>``
    for the others, so that a smoke or paper run never overwrites the committed quick-profile figures."""
    return figures_dir() if profile == "quick" else figures_dir() / profile


def checkpoints_dir() -> Path:
    """Epoch checkpoints for resuming interrupted runs (never committed): ``<cache>/checkpoints``."""
    return cache_dir() / "checkpoints"
