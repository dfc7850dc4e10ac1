"""What every artifact notebook calls, and how every notebook is generated from one template.

Every artifact notebook has the same cells (:func:`make_notebook`): a title (the paper's claims, what dmllab
varies), one cell tagged ``parameters`` (``profile``, ``seeds``, ``device``, ``data_root``, ``train_missing`` and
the artifact's own parameters; ``None`` means "the profile's default", whose values the comment shows), the setup
cell ``A = nb.setup(globals(), "<id>")`` (prints the resolved values), the runs it reads, its tidy rows (written to
``results/<id>.csv``), the paper-vs-reproduced table, the verdicts and the figures. Notebooks are generated from
their :class:`~dmllab.experiments.Artifact` and committed without outputs; ``dmllab notebooks --check`` says when
one is out of date.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmllab import paths
from dmllab.experiments import registry
from dmllab.experiments.base import PAPER_TITLES, PAPERS, Artifact, Params, RunLookup
from dmllab.profiles import PROFILES, resolve_device

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
    "train_missing": "train runs missing from the run store here (dmllab study trains them beforehand: False)",
}
__all__ = ["PROFILES", "resolve_device", "setup", "make_notebook", "write_all", "stale_notebooks"]


def notebooks_dir() -> Path:
    """The folder holding the source notebooks: ``<repo>/notebooks``."""
    return paths.repo_root() / "notebooks"


@dataclass(frozen=True)
class ArtifactContext:
    """What the setup cell returns (``A``): the artifact, its resolved parameters, and its steps.

    Every method reads or writes files; the figures are drawn from the CSVs only.
    """

    artifact: Artifact
    params: Params
    train_missing: bool = True

    @property
    def name(self) -> str:
        return self.artifact.id

    @property
    def profile(self) -> str:
        return self.params.profile

    @property
    def seeds(self) -> list[int]:
        return self.params.seeds

    @property
    def device(self) -> str:
        return self.params.device

    @property
    def csv_path(self) -> Path:
        return paths.results_dir() / f"{self.name}.csv"

    def table_path(self, table: str) -> Path:
        return paths.results_dir() / f"{self.name}.{table}.csv"

    @property
    def figure_prefix(self) -> Path:
        return paths.profile_figures_dir(self.profile) / self.name

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    # ------------------------------------------------------------------------------------------ steps
    def runs(self) -> list:
        """The training runs this artifact reads (:class:`~dmllab.experiments.Run`)."""
        return self.artifact.planned_runs(self.params)

    def runs_table(self) -> pd.DataFrame:
        """One line per run: variant, seed, config summary, run key, stored or not, wall time."""
        return runs_frame(self.runs())

    def derive_rows(self) -> list[dict[str, Any]]:
        """The artifact's tidy rows (and extra tables, written by :meth:`write_results`), from the stored runs
        (or computed, for toys). Runs missing from the store are trained here only when ``train_missing``."""
        lookup = RunLookup(train_missing=self.train_missing, progress=True)
        out = self.artifact.rows(self.params, lookup)
        rows, tables = out if isinstance(out, tuple) else (out, {})
        object.__setattr__(self, "_tables", dict(tables))
        return rows

    def write_results(self, records: Iterable[Mapping[str, Any]]) -> Path:
        """Replace this artifact's rows of this profile in ``results/<id>.csv`` (other profiles' rows stay), and
        write the extra tables the rows came with to ``results/<id>.<table>.csv``."""
        from dmllab.results import replace_experiment

        base = {
            "experiment": self.name,
            "paper": self.artifact.paper,
            "artifact": self.artifact.label,
            "profile": self.profile,
        }
        replace_experiment(
            self.csv_path,
            self.name,
            [{**base, **dict(r)} for r in records],
            profile=self.profile,
            device=self.device,
        )
        for table, frame in getattr(self, "_tables", {}).items():
            write_table(self.table_path(table), frame, profile=self.profile)
        return self.csv_path

    def read_results(self) -> pd.DataFrame:
        """This artifact's rows of this profile, read back from ``results/<id>.csv``."""
        return read_artifact_rows(self.artifact, self.profile)

    def results_table(self) -> pd.DataFrame:
        """Mean, std and seed count of every (variant, dataset, parameters, metric)."""
        from dmllab.experiments.compare import summarise

        return summarise(self.read_results())

    def paper_vs_reproduced(self) -> pd.DataFrame:
        from dmllab.experiments.compare import paper_vs_reproduced
        from dmllab.pipeline.reference import load_reference

        return paper_vs_reproduced(self.artifact, self.read_results(), load_reference())

    def verdicts(self) -> pd.DataFrame:
        from dmllab.experiments.compare import verdict_table

        return verdict_table(self.artifact, self.read_results())

    def figures(self, save: bool = False) -> list[Figure]:
        """Draw every figure of the artifact from its CSVs (and save it under ``figures/`` with ``save``)."""
        return draw_figures(self.artifact, self.profile, save=save)


def runs_frame(runs: Sequence[Any]) -> pd.DataFrame:
    """A table of runs: variant, seed, method, dataset, config summary, run key, stored, wall time (s)."""
    import pandas as pd

    from dmllab.training import presets
    from dmllab.training.store import RunStore

    store = RunStore()
    out = []
    for run in runs:
        stored = store.load(run.config, run.seed)
        out.append(
            {
                "variant": run.variant,
                "seed": run.seed,
                "config": presets.describe(run.config),
                "run key": run.key,
                "stored": stored is not None,
                "wall time (s)": None if stored is None else round(float(stored.wall_time_s), 1),
            }
        )
    return pd.DataFrame(out, columns=["variant", "seed", "config", "run key", "stored", "wall time (s)"])


def write_table(path: Path, frame: Any, *, profile: str) -> None:
    """Write an extra figure table (a DataFrame) with a ``profile`` column, replacing that profile's lines."""
    import pandas as pd

    frame = pd.DataFrame(frame).assign(profile=profile)
    if path.exists():
        old = pd.read_csv(path)
        if "profile" in old.columns:
            frame = pd.concat([old[old["profile"] != profile], frame], ignore_index=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    frame.to_csv(tmp, index=False, float_format="%.6g")
    os.replace(tmp, path)


def read_artifact_rows(artifact: Artifact, profile: str) -> pd.DataFrame:
    """The rows of ``artifact`` for ``profile`` in ``results/<id>.csv`` (empty when there are none)."""
    from dmllab.results import read_rows

    path = paths.results_dir() / f"{artifact.id}.csv"
    if not path.exists():
        import pandas as pd

        return pd.DataFrame(
            columns=["experiment", "profile", "variant", "dataset", "seed", "metric", "value"]
        )
    rows = read_rows(path)
    return rows[(rows["experiment"] == artifact.id) & (rows["profile"] == profile)].reset_index(drop=True)


def read_tables(artifact: Artifact, profile: str) -> dict[str, pd.DataFrame]:
    """``{"rows": ..., <table>: ...}``: everything a figure of ``artifact`` may draw from, read from CSVs."""
    import pandas as pd

    tables = {"rows": read_artifact_rows(artifact, profile)}
    for name in artifact.tables:
        path = paths.results_dir() / f"{artifact.id}.{name}.csv"
        frame = pd.read_csv(path) if path.exists() else pd.DataFrame()
        if "profile" in frame.columns:
            frame = frame[frame["profile"] == profile].drop(columns="profile").reset_index(drop=True)
        tables[name] = frame
    return tables


def draw_figures(artifact: Artifact, profile: str, *, save: bool = False) -> list[Figure]:
    """Every figure of ``artifact`` drawn from its CSVs; with ``save`` written to ``figures/<id><suffix>``.

    Each figure is drawn with numpy's global generator seeded 0 (and the caller's random state restored after):
    seaborn's strip-plot jitter draws from it unseeded, and the same CSV must give the same picture whatever
    ran before in the process."""
    from dmllab.plots import save_figure, set_theme
    from dmllab.rng import random_state_kept

    set_theme()
    tables = read_tables(artifact, profile)
    if tables["rows"].empty:
        raise FileNotFoundError(
            f"no {profile} rows for {artifact.id} in results/{artifact.id}.csv: run its notebook first "
            f"(dmllab study --only {artifact.id} --profile {profile})"
        )
    figs = []
    for figure in artifact.figures:
        with random_state_kept(numpy_seed=0):
            fig = figure.draw(tables)
        if save:
            prefix = paths.profile_figures_dir(profile) / f"{artifact.id}{figure.suffix}"
            save_figure(fig, prefix)
        figs.append(fig)
    return figs


def _user_globals(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The notebook's own variables: no private names, modules, functions, classes or kernel helpers."""
    return {
        k: v
        for k, v in namespace.items()
        if not k.startswith("_")
        and k not in _KERNEL_NAMES
        and not isinstance(v, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type))
        and not isinstance(v, ArtifactContext)  # the setup cell run a second time
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
        ValueError: an unknown parameter name (listing the valid ones), an unknown profile, an artifact
            parameter whose type differs from its defaults' (a scalar for a list, a float for an int), or a
            negative seed.
    """
    valid = artifact.parameter_names + ("train_missing",)
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown parameter {unknown[0]!r} for notebook {artifact.id}; valid parameters: {', '.join(valid)}"
            + (f" (also unknown: {', '.join(unknown[1:])})" if len(unknown) > 1 else "")
            + ". Interactively: restart the kernel before running the setup cell again."
        )
    profile = given.get("profile") or "quick"
    if profile not in PROFILES:
        raise ValueError(
            f"notebook {artifact.id}: unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}"
        )
    defaults = artifact.defaults(profile)
    params: dict[str, Any] = {"profile": profile}
    for key in artifact.parameter_names[1:]:
        value = given.get(key)
        if value is not None and key in artifact.specific_parameters:
            _check_kind(artifact, key, value)
        params[key] = defaults.get(key) if value is None else value
    params["seeds"] = _as_seeds(params["seeds"], artifact.id)
    if any(s < 0 for s in params["seeds"]):
        raise ValueError(f"notebook {artifact.id}: seeds must be non-negative, got {params['seeds']}")
    params["device"] = resolve_device(params["device"] or "auto")
    return params


def setup(namespace: Mapping[str, Any], name: str) -> ArtifactContext:
    """The setup cell of every artifact notebook: validate the parameters, fill defaults, return the context.

    Args:
        namespace: the notebook's ``globals()`` right after the parameters cell (and papermill's injected one).
        name: the artifact id (the notebook stem).

    Raises:
        ValueError: a global that is not a declared parameter (a ``-p`` typo): the message lists the valid ones.
    """
    artifact = registry.get(name)
    given = _user_globals(namespace)
    train_missing = given.pop("train_missing", None)
    params = Params(resolve_parameters(artifact, given))
    return ArtifactContext(
        artifact, params, train_missing=True if train_missing is None else bool(train_missing)
    )


# --------------------------------------------------------------------------------------------- generation

Cell = tuple[str, str]  # ("markdown" | "code", source)

# The body every artifact notebook shares; only the title and the parameters differ.
TEMPLATE_BODY: tuple[Cell, ...] = (
    (
        "markdown",
        "## Runs\nThe training runs this artifact reads from the run store (`dmllab study` trains them "
        "once, shared with every artifact that needs the same run).",
    ),
    ("code", "A.runs_table()"),
    (
        "markdown",
        "## Rows\nTidy rows derived from the stored runs (or computed, for toy models), written to "
        "`results/<id>.csv`; mean, std and seed count per line.",
    ),
    ("code", "rows = A.derive_rows()\nA.write_results(rows)\nA.results_table()"),
    (
        "markdown",
        "## Paper vs reproduced\nEvery row that corresponds to a printed cell of the paper, side by side.",
    ),
    ("code", "A.paper_vs_reproduced()"),
    (
        "markdown",
        "## Verdicts\nEach claim's effect per seed, its mean and 95% t interval over seeds: *yes* only "
        "when the interval lies above zero, *no* when it lies below, *inconclusive* otherwise.",
    ),
    ("code", "A.verdicts()"),
    (
        "markdown",
        "## Figure\nDrawn from the CSVs only (the plotting notebook of the paper writes it to `figures/`).",
    ),
    ("code", "figs = A.figures()"),
)


def _literal(value: Any) -> str:
    return repr(value)


def parameters_source(artifact: Artifact) -> str:
    """The tagged parameters cell: standard parameters, then the artifact's own with every profile's value."""
    seeds = " | ".join(f"{p}: {_literal(artifact.defaults(p)['seeds'])}" for p in PROFILES)
    lines = [
        "# Parameters (papermill -p NAME VALUE, or dmllab study). None means the profile's value, shown after '#'.",
        f'profile = "quick"  # {_STANDARD_HELP["profile"]}',
        f"seeds = None  # {seeds}",
        f'device = "auto"  # {_STANDARD_HELP["device"]}',
        f"data_root = None  # {_STANDARD_HELP['data_root']}",
        f"train_missing = None  # {_STANDARD_HELP['train_missing']}",
    ]
    for key in artifact.specific_parameters:
        note = artifact.parameter_help.get(key, "")
        values = " | ".join(f"{p}: {_literal(artifact.parameters[p][key])}" for p in PROFILES)
        line = f"{key} = None  # {note + '; ' if note else ''}{values}"
        if "=" in line.split("#", 1)[1]:  # papermill skips parameter lines holding a second "="
            raise ValueError(
                f"artifact {artifact.id!r}: parameter help or value of {key!r} must not contain '='"
            )
        lines.append(line)
    return "\n".join(lines)


def title_source(artifact: Artifact) -> str:
    """The markdown title cell: paper, label, what it shows, the claims judged."""
    claims = "".join(f"\n- {c.text} (paper: {c.paper_says})" for c in artifact.claims)
    return (
        f"# {artifact.label}: {artifact.title}\n\n"
        f"**{PAPER_TITLES[artifact.paper]}**\n\n"
        f"{artifact.description.strip()}\n\n"
        + (f"**Claims judged here**:{claims}\n\n" if claims else "")
        + f"Run it top to bottom, or in batch with `dmllab study --only {artifact.id}`. Results: "
        f"`results/{artifact.id}.csv`; figures: `figures/{artifact.id}*.png`."
    )


def setup_source(artifact: Artifact) -> str:
    return (
        f'import dmllab.pipeline.notebook as nb\n\nA = nb.setup(globals(), "{artifact.id}")\nA.params.values'
    )


def _new_notebook(cells: Sequence[tuple[str, str, dict]], stem: str) -> nbformat.NotebookNode:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, (kind, source, metadata) in enumerate(cells):
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        cell = make(source.strip("\n"), metadata=metadata)
        cell["id"] = f"{stem[:50]}-{i}"  # stable ids keep regenerated notebooks diff-free
        nb.cells.append(cell)
    return nb


def make_notebook(artifact: Artifact) -> nbformat.NotebookNode:
    """The notebook of ``artifact`` from the template: title, parameters, setup, then :data:`TEMPLATE_BODY`."""
    cells = [
        ("markdown", title_source(artifact), {}),
        ("code", parameters_source(artifact), {"tags": ["parameters"]}),
        ("code", setup_source(artifact), {}),
    ] + [(kind, source, {}) for kind, source in TEMPLATE_BODY]
    return _new_notebook(cells, artifact.id)


def make_plots_notebook(paper: str) -> nbformat.NotebookNode:
    """``notebooks/plots_<paper>.ipynb``: reads only ``results/*.csv`` and writes every figure of the paper."""
    cells = [
        (
            "markdown",
            f"# Figures: {PAPER_TITLES[paper]}\n\nEvery figure of this paper's artifacts, drawn from the "
            "tidy CSVs under `results/` (nothing is trained or computed here) and written to `figures/`.",
            {},
        ),
        (
            "code",
            '# Parameters (papermill -p NAME VALUE)\nprofile = "quick"  # smoke | quick | paper',
            {"tags": ["parameters"]},
        ),
        (
            "code",
            f'from dmllab.pipeline import plots\n\nwritten = plots.draw_paper("{paper}", profile)\nwritten',
            {},
        ),
    ]
    return _new_notebook(cells, f"plots_{paper}")


def _all_notebooks() -> dict[str, nbformat.NotebookNode]:
    out = {a.id: make_notebook(a) for a in registry.all_artifacts()}
    papers = {a.paper for a in registry.all_artifacts()}
    out.update({f"plots_{p}": make_plots_notebook(p) for p in PAPERS if p in papers})
    return out


def write_all(directory: str | os.PathLike | None = None) -> list[Path]:
    """Regenerate every artifact notebook and every paper's plotting notebook; remove notebooks of artifacts that
    no longer exist. Returns the written paths."""
    import nbformat

    directory = Path(directory) if directory is not None else notebooks_dir()
    directory.mkdir(parents=True, exist_ok=True)
    wanted = _all_notebooks()
    written = []
    for stem, nb in wanted.items():
        path = directory / f"{stem}.ipynb"
        nbformat.write(nb, path)
        written.append(path)
    for path in directory.glob("*.ipynb"):
        if path.stem not in wanted:
            path.unlink()
    return written


def _shape(nb: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source, tuple(c.metadata.get("tags", ()))) for c in nb.cells]


def stale_notebooks(directory: str | os.PathLike | None = None) -> list[str]:
    """Notebook stems that differ from the generated ones (cell kinds, sources, tags), are missing, have outputs,
    or belong to no artifact."""
    import nbformat

    directory = Path(directory) if directory is not None else notebooks_dir()
    wanted = _all_notebooks()
    stale = []
    for stem, nb in wanted.items():
        path = directory / f"{stem}.ipynb"
        if not path.exists():
            stale.append(stem)
            continue
        committed = nbformat.read(path, as_version=4)
        has_outputs = any(c.get("outputs") for c in committed.cells if c.cell_type == "code")
        if has_outputs or _shape(committed) != _shape(nb):
            stale.append(stem)
    stale += [p.stem for p in directory.glob("*.ipynb") if p.stem not in wanted]
    return sorted(stale)
