"""What every notebook calls, and how every notebook is generated.

Every notebook has the same shape: a markdown title cell, one cell tagged ``parameters`` (``profile``,
``seeds``, ``device``, ``data_root`` and the artifact's own scalars; ``None`` means "the profile's default"),
the setup cell ``P = nb.setup(globals(), "<name>")``, then the artifact's body cells (compute, write results,
plot), all of which call into dmllab. Notebooks are generated from their :class:`Artifact` by
:func:`write_notebook` and committed without outputs.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmllab import paths
from dmllab.pipeline.artifacts import ARTIFACTS, PROFILES, Artifact, Cell, load_all

if TYPE_CHECKING:
    import nbformat
    import pandas as pd
    from matplotlib.figure import Figure

# Names the IPython kernel puts into a notebook's globals; never parameters.
_KERNEL_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})
_STANDARD_HELP = {
    "profile": "smoke (seconds, tests) | quick (offline, 2 CPU cores) | paper (the settings of the authors)",
    "seeds": "list of seeds (None: profile default)",
    "device": "auto (cuda, then mps, then cpu) | cpu | cuda | mps",
    "data_root": "folder of the benchmark datasets (None where none is needed)",
}


def notebooks_dir() -> Path:
    """The folder holding the source notebooks: ``<repo>/notebooks``."""
    return paths.repo_root() / "notebooks"


def resolve_device(device: str) -> str:
    """``"auto"`` -> cuda if available, else mps, else cpu; other names are returned unchanged."""
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


@dataclass(frozen=True)
class NotebookContext:
    """What the setup cell returns: the resolved parameters and where the notebook writes.

    Attributes:
        artifact: the notebook's :class:`Artifact`.
        params: every parameter, defaults filled in (``profile``, ``seeds``, ``device``, ``data_root``, ...).
        csv_path: ``results/<name>.csv`` (``$DMLLAB_RESULTS`` honoured).
        figure_prefix: ``figures/<name>`` for the quick profile, ``figures/<profile>/<name>`` otherwise
            (``$DMLLAB_FIGURES`` honoured).
    """

    artifact: Artifact
    params: Mapping[str, Any]
    csv_path: Path
    figure_prefix: Path

    @property
    def name(self) -> str:
        return self.artifact.name

    @property
    def profile(self) -> str:
        return self.params["profile"]

    @property
    def seeds(self) -> list[int]:
        return list(self.params["seeds"])

    @property
    def device(self) -> str:
        return self.params["device"]

    @property
    def data_root(self) -> str | None:
        return self.params["data_root"]

    def __getitem__(self, key: str) -> Any:
        try:
            return self.params[key]
        except KeyError:
            raise KeyError(
                f"no parameter {key!r} in notebook {self.name}; parameters: {sorted(self.params)}"
            ) from None

    def rows(self, records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Complete tidy rows with this notebook's experiment, paper, artifact and profile columns."""
        base = {
            "experiment": self.name,
            "paper": self.artifact.paper,
            "artifact": self.artifact.artifact,
            "profile": self.profile,
        }
        return [{**base, **dict(r)} for r in records]

    def write_results(self, records: Iterable[Mapping[str, Any]]) -> Path:
        """Replace this notebook's rows of this profile in ``csv_path`` (other profiles' rows stay)."""
        from dmllab.results import replace_experiment

        replace_experiment(
            self.csv_path, self.name, self.rows(records), profile=self.profile, device=self.device
        )
        return self.csv_path

    def read_results(self) -> pd.DataFrame:
        """This notebook's rows of this profile, read back from ``csv_path`` (figures are made from these)."""
        from dmllab.results import read_rows

        rows = read_rows(self.csv_path)
        return rows[(rows["experiment"] == self.name) & (rows["profile"] == self.profile)].reset_index(
            drop=True
        )

    def save_figure(self, fig: Figure, suffix: str = "") -> list[Path]:
        """Save ``fig`` as ``figures/<name><suffix>.png`` and ``.pdf``."""
        from dmllab.plots import save_figure

        return save_figure(fig, self.figure_prefix.with_name(self.figure_prefix.name + suffix))


def _user_globals(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The notebook's own variables: no private names, modules, functions, classes or kernel helpers."""
    return {
        k: v
        for k, v in namespace.items()
        if not k.startswith("_")
        and k not in _KERNEL_NAMES
        and not isinstance(v, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type))
        and not isinstance(v, NotebookContext)  # the setup cell run a second time
    }


def _as_seeds(value: Any, name: str) -> list[int]:
    if isinstance(value, bool):
        raise ValueError(f"notebook {name}: seeds must be an int or a list of ints, got {value!r}")
    if isinstance(value, int):
        return [value]
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(s, int) and not isinstance(s, bool) for s in value)
    ):
        return list(value)
    raise ValueError(f"notebook {name}: seeds must be an int or a non-empty list of ints, got {value!r}")


def _kind(value: Any) -> str:
    """The parameter kind of a default value: bool, int, float, str, list or dict (``type`` name otherwise)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _check_kind(artifact: Artifact, key: str, value: Any) -> None:
    """Raise ValueError when ``value`` has another kind than the non-None defaults of ``key`` in every profile.

    An int is accepted where the defaults are floats. A ``papermill -p temperatures 0.1`` (a scalar where a list
    is expected) or ``-p steps 100.5`` therefore fails in the setup cell, not deep inside the computation.
    """
    kinds = {_kind(artifact.parameters[p][key]) for p in PROFILES if artifact.parameters[p][key] is not None}
    if not kinds:
        return
    kind = _kind(value)
    if kind in kinds or (kind == "int" and "float" in kinds):
        return
    example = next(artifact.parameters[p][key] for p in PROFILES if artifact.parameters[p][key] is not None)
    raise ValueError(
        f"notebook {artifact.name}: parameter {key!r} must be of type {' or '.join(sorted(kinds))} "
        f"(e.g. {example!r}), got {value!r} ({type(value).__name__}). Lists are passed with papermill -y, "
        "e.g. -y 'temperatures: [1.0, 0.5]'."
    )


def resolve_parameters(artifact: Artifact, given: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``given`` against the artifact's parameters and fill the profile's defaults for ``None`` values.

    Raises:
        ValueError: an unknown parameter name (listing the valid ones), an unknown profile, or an
            artifact parameter whose type differs from its defaults' (a scalar for a list, a float for an int).
    """
    valid = artifact.parameter_names
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown parameter {unknown[0]!r} for notebook {artifact.name}; valid parameters: {', '.join(valid)}"
            + (f" (also unknown: {', '.join(unknown[1:])})" if len(unknown) > 1 else "")
            + ". Interactively: restart the kernel before running the setup cell again."
        )
    profile = given.get("profile") or "quick"
    if profile not in PROFILES:
        raise ValueError(
            f"notebook {artifact.name}: unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}"
        )
    defaults = artifact.defaults(profile)
    params: dict[str, Any] = {"profile": profile}
    for key in valid[1:]:
        value = given.get(key)
        if value is not None and key in artifact.specific_parameters:
            _check_kind(artifact, key, value)
        params[key] = defaults.get(key) if value is None else value
    params["seeds"] = _as_seeds(params["seeds"], artifact.name)
    params["device"] = resolve_device(params["device"] or "auto")
    return params


def setup(namespace: Mapping[str, Any], name: str) -> NotebookContext:
    """The setup cell of every notebook: validate the parameters, fill defaults, say where to write.

    Args:
        namespace: the notebook's ``globals()`` right after the parameters cell (and papermill's injected one).
        name: the artifact name (the notebook stem).

    Raises:
        ValueError: a global that is not a declared parameter (a ``-p`` typo): the message lists the valid ones.
    """
    load_all()
    artifact = ARTIFACTS.get(name)
    params = resolve_parameters(artifact, _user_globals(namespace))
    from dmllab.plots import set_theme

    set_theme()
    return NotebookContext(
        artifact=artifact,
        params=params,
        csv_path=paths.results_dir() / f"{name}.csv",
        figure_prefix=paths.profile_figures_dir(params["profile"]) / name,
    )


# --------------------------------------------------------------------------------------------- generation


def _literal(value: Any) -> str:
    return repr(value)


def parameters_source(artifact: Artifact) -> str:
    """The tagged parameters cell: standard parameters, then the artifact's own (``None`` = profile default)."""
    lines = [
        "# Parameters (papermill: dmllab study, or papermill -p NAME VALUE). None means the profile default.",
        f'profile = "quick"  # {_STANDARD_HELP["profile"]}',
        f"seeds = None  # {_STANDARD_HELP['seeds']}",
        f'device = "auto"  # {_STANDARD_HELP["device"]}',
        f"data_root = None  # {_STANDARD_HELP['data_root']}",
    ]
    for key in artifact.specific_parameters:
        quick = artifact.parameters["quick"][key]
        note = artifact.parameter_help.get(key, "")
        if "=" in note + _literal(quick):  # papermill skips parameter lines holding a second "="
            raise ValueError(f"artifact {artifact.name!r}: parameter help for {key!r} must not contain '='")
        lines.append(f"{key} = None  # {note + '; ' if note else ''}quick: {_literal(quick)}")
    return "\n".join(lines)


def title_source(artifact: Artifact) -> str:
    """The markdown title cell: paper, artifact and what it shows."""
    from dmllab.pipeline.artifacts import PAPER_TITLES

    return (
        f"# {artifact.title}\n\n"
        f"**{PAPER_TITLES[artifact.paper]}**, {artifact.artifact}.\n\n"
        f"{artifact.description.strip()}\n\n"
        "Run it interactively, or in batch with `dmllab study --only "
        f"{artifact.name}`. Results: `results/{artifact.name}.csv`; figures: `figures/{artifact.name}*.png`."
    )


def setup_source(artifact: Artifact) -> str:
    return f'import dmllab.pipeline.notebook as nb\n\nP = nb.setup(globals(), "{artifact.name}")\nP.params'


def make_notebook(artifact: Artifact, body: Sequence[Cell] | None = None) -> nbformat.NotebookNode:
    """Build the notebook of ``artifact``: title, tagged parameters cell, setup cell, body cells (no outputs)."""
    import nbformat

    body = artifact.cells if body is None else tuple(body)
    if not body:
        raise ValueError(f"artifact {artifact.name!r} has no body cells")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    cells = [
        nbformat.v4.new_markdown_cell(title_source(artifact)),
        nbformat.v4.new_code_cell(parameters_source(artifact), metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(setup_source(artifact)),
    ]
    for kind, source in body:
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        cells.append(make(source.strip("\n")))
    for i, cell in enumerate(cells):  # stable ids keep regenerated notebooks diff-free
        cell["id"] = f"{artifact.name[:50]}-{i}"
    nb.cells = cells
    return nb


def write_notebook(artifact: Artifact | str, directory: str | os.PathLike | None = None) -> Path:
    """Write ``<directory>/<name>.ipynb`` (default ``notebooks/``) from the artifact; return its path."""
    import nbformat

    if isinstance(artifact, str):
        load_all()
        artifact = ARTIFACTS.get(artifact)
    directory = Path(directory) if directory is not None else notebooks_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{artifact.name}.ipynb"
    nbformat.write(make_notebook(artifact), path)
    return path


def write_all(directory: str | os.PathLike | None = None) -> list[Path]:
    """Regenerate the notebook of every registered artifact that has body cells."""
    load_all()
    return [write_notebook(ARTIFACTS.get(n), directory) for n in ARTIFACTS.names() if ARTIFACTS.get(n).cells]


def stale_notebooks(directory: str | os.PathLike | None = None) -> list[str]:
    """Names of artifacts whose committed notebook differs (cell kinds, sources, tags) from the generated one."""
    import nbformat

    load_all()
    directory = Path(directory) if directory is not None else notebooks_dir()
    stale = []
    for name in ARTIFACTS.names():
        artifact = ARTIFACTS.get(name)
        if not artifact.cells:
            continue
        path = directory / f"{name}.ipynb"
        if not path.exists():
            stale.append(name)
            continue
        committed = nbformat.read(path, as_version=4)
        want = make_notebook(artifact)

        def shape(nb: Any) -> list[tuple[str, str, tuple[str, ...]]]:
            return [(c.cell_type, c.source, tuple(c.metadata.get("tags", ()))) for c in nb.cells]

        if shape(committed) != shape(want):
            stale.append(name)
    return stale
