"""Where dmllab reads and writes: caches (outside git), results and figures (inside the repository).

Every location can be moved with an environment variable, which the tests use to stay in temporary folders.

:func:`destination` decides where an execution's tidy CSVs and figures go: only a study (``dmllab study``,
``dmllab report``) of the committed profile on the committed device writes the tracked ``results/*.csv`` and
``figures/``; a notebook run by hand (papermill, Jupyter), another profile or another device writes under the
git-ignored ``results/scratch/<profile>/`` and ``figures/scratch/<profile>/``, so exploring never dirties the
repository.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dmllab.numerics import claim_cache, cpu_isa_mode

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


#: The folder variables a command resolves at its start (:func:`resolve_folders`).
FOLDER_VARIABLES: tuple[str, ...] = ("DMLLAB_CACHE", "DMLLAB_RESULTS", "DMLLAB_FIGURES")


def resolve_folders(environ: MutableMapping[str, str] = os.environ) -> None:
    """Once, at the start of a command: a relative ``DMLLAB_CACHE`` / ``DMLLAB_RESULTS`` / ``DMLLAB_FIGURES`` is
    made absolute (against the current folder) in ``environ``, so that the workers and notebook kernels a study
    starts in other folders find the same runs; a folder (given or default) that is a dangling link is refused.

    Raises ValueError: naming the variable, the folder and the link's missing target."""
    for name in FOLDER_VARIABLES:
        if environ.get(name, "").strip():
            environ[name] = os.path.abspath(os.path.expanduser(environ[name]))
    defaults = {"DMLLAB_RESULTS": _REPO_ROOT / "results", "DMLLAB_FIGURES": _REPO_ROOT / "figures"}
    for name in FOLDER_VARIABLES:
        folder = Path(
            os.path.expanduser(environ.get(name) or defaults.get(name, Path.home() / ".cache" / "dmllab"))
        )
        if folder.is_symlink() and not folder.exists():
            raise ValueError(
                f"{name} folder {folder} is a dangling link (to {os.readlink(folder)}, which does not exist): "
                "create its target or point the link elsewhere"
            )


def cache_dir() -> Path:
    """Generated data, pre-trained weights and checkpoints: ``$DMLLAB_CACHE`` or ``~/.cache/dmllab``; its
    ``native/`` subfolder with ``DMLLAB_CPU_ISA=native`` (:mod:`dmllab.numerics`: what the machine's own CPU
    kernels build never mixes with what the pinned ones build). A folder it makes, or finds empty, is stamped as
    built by a dmllab that pins (:func:`dmllab.numerics.claim_cache`)."""
    base = Path(os.environ.get("DMLLAB_CACHE", Path.home() / ".cache" / "dmllab")).expanduser()
    root = base / "native" if _native() else base
    claim_cache(root)  # new or empty: this pin's (dmllab.numerics.stale_cache_message)
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


#: The profile and device whose rows and figures are committed (``results/*.csv``, ``figures/``).
COMMITTED_PROFILE = "quick"
COMMITTED_DEVICE = "cpu"
#: The git-ignored folder, under ``results/`` and ``figures/``, of every other execution's CSVs and figures.
SCRATCH = "scratch"
#: Set (to "1") by ``dmllab study`` and ``dmllab report`` for themselves and the notebook kernels they start.
STUDY_ENV = "DMLLAB_STUDY"


@dataclass(frozen=True)
class Destination:
    """Where an execution's tidy CSVs (``results``) and figures and report (``figures``) go; ``tracked``: the
    committed folders."""

    results: Path
    figures: Path
    tracked: bool

    def note(self) -> str:
        """One line saying where this execution writes, and why not to the committed folders."""
        return (
            f"results go to {_shown(self.results)}/ and figures to {_shown(self.figures)}/ (git-ignored: only "
            f"`dmllab study --profile {COMMITTED_PROFILE}` on the {COMMITTED_DEVICE} writes the committed "
            "results/ and figures/)"
        )


def _shown(path: Path) -> str:
    """``path`` relative to the checkout where it lies inside it."""
    try:
        return str(path.resolve().relative_to(_REPO_ROOT))
    except ValueError:
        return str(path)


def in_study() -> bool:
    """Whether this process runs for ``dmllab study`` or ``dmllab report`` (:data:`STUDY_ENV`)."""
    return os.environ.get(STUDY_ENV) == "1"


@contextmanager
def study() -> Iterator[None]:
    """Within the block this process, and every process it starts, runs for a study (:func:`in_study`)."""
    saved = os.environ.get(STUDY_ENV)
    os.environ[STUDY_ENV] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(STUDY_ENV, None)
        else:
            os.environ[STUDY_ENV] = saved


def destination(profile: str, device: str | None = None) -> Destination:
    """Where the CSVs and figures of ``profile`` on ``device`` (None: :data:`COMMITTED_DEVICE`; ``"cuda:1"``
    counts as ``"cuda"``) go: ``<results>`` and ``<figures>`` for a study (:func:`in_study`) of
    :data:`COMMITTED_PROFILE` on :data:`COMMITTED_DEVICE`, else ``<results>/scratch/<profile>`` and
    ``<figures>/scratch/<profile>`` (one CSV per artifact holds every device's rows, each row naming its device).
    """
    kind = str(device or COMMITTED_DEVICE).split(":", 1)[0]
    if profile == COMMITTED_PROFILE and kind == COMMITTED_DEVICE and in_study():
        return Destination(results_dir(), figures_dir(), True)
    return Destination(results_dir() / SCRATCH / profile, figures_dir() / SCRATCH / profile, False)


def checkpoints_dir() -> Path:
    """Epoch checkpoints for resuming interrupted runs (never committed): ``<cache>/checkpoints``."""
    return cache_dir() / "checkpoints"
