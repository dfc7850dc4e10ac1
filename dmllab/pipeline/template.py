"""How every notebook is generated from one template, and checked against it.

Every artifact notebook has the same cells (:func:`make_notebook`): a title (the paper's claims, what dmllab
varies), one cell tagged ``parameters`` (``profile``, ``seeds``, ``device``, ``data_root``, ``train_missing`` and
the artifact's own parameters; ``None`` means "the profile's default", whose values the comment shows), the setup
cell ``A = nb.setup(globals(), "<id>")`` (:mod:`dmllab.pipeline.notebook`; it prints the resolved values), the
runs it reads, its tidy rows (written to ``results/<id>.csv``), the paper-vs-reproduced table, the verdicts and the
figures. Each paper also has a plotting notebook, ``plots_<paper>.ipynb``. Notebooks are generated from their
:class:`~dmllab.experiments.Artifact` and committed without outputs; ``dmllab notebooks --check`` says when one is
out of date (:func:`stale_notebooks`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmllab import paths
from dmllab.experiments import registry
from dmllab.experiments.artifact import PAPER_TITLES, PAPERS, Artifact
from dmllab.profiles import PROFILES

if TYPE_CHECKING:
    import nbformat

_STANDARD_HELP = {
    "profile": "smoke (seconds, tests) | quick (offline, 2 CPU cores) | paper (the settings of the authors)",
    "seeds": "list of seeds (None: profile default)",
    "device": "auto (cuda, then mps, then cpu) | cpu | cuda | mps",
    "data_root": "folder of the benchmark datasets (None where none is needed)",
    "train_missing": "train runs missing from the run store here (dmllab study trains them beforehand: False)",
}


def notebooks_dir() -> Path:
    """The folder holding the source notebooks: ``<repo>/notebooks``."""
    return paths.repo_root() / "notebooks"


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
