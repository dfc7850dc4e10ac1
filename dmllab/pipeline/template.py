"""Every notebook generated from one template (:func:`make_notebook`, :func:`make_plots_notebook`), committed
without outputs and checked against it (:func:`stale_notebooks`, ``dmllab notebooks --check``).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmllab import paths
from dmllab.experiments import registry
from dmllab.experiments.artifact import PAPER_TITLES, PAPERS, Artifact
from dmllab.fileio import write_text_atomic
from dmllab.pipeline.prose import human, paragraphs, sentences
from dmllab.profiles import PROFILES

if TYPE_CHECKING:
    import nbformat

STANDARD_HELP = {
    "profile": "smoke (seconds, tests) | quick (offline, 2 CPU cores) | paper (the settings of the authors)",
    "seeds": "one training per seed; claims are judged over the seeds",
    "data_seed": "per_seed: seed k trains on draw k of the benchmark (its own classes, images, trunk) | fixed: draw 0",
    "device": "auto (cuda, then mps, then cpu) | cpu | cuda | mps",
    "execution": "where the runs train (None: on auto, cuda then mps then cpu), for example",
    "manifest": "the placed runs of a study, read instead of placed here (dmllab study passes it)",
    "train_missing": "train runs missing from the run store here (dmllab study trains them beforehand: False)",
}


def notebooks_dir() -> Path:
    """The folder holding the source notebooks: ``<repo>/notebooks``."""
    return paths.repo_root() / "notebooks"


Cell = tuple[str, str]  # ("markdown" | "code", source)


def _module(artifact: Artifact) -> str:
    """The file declaring ``artifact`` (``dmllab/experiments/<package>/<module>.py``), "" when not registered."""
    try:
        return registry.module_path(artifact.id)
    except KeyError:
        return ""


def _values_by_profile(values: dict[str, Any]) -> str:
    """``smoke, quick: [1, 1/9] | paper: [...]``: each profile's value, profiles with the same value together."""
    groups: dict[str, list[str]] = {}
    for profile in PROFILES:
        groups.setdefault(human(values[profile]), []).append(profile)
    return " | ".join(f"{', '.join(ps)}: {text}" for text, ps in groups.items())


def parameters_source(artifact: Artifact) -> str:
    """The tagged parameters cell: one line per parameter with why it is there (papermill's help), and under each
    ``None`` the value every profile gives it, written as a person writes it (``1/9``, ``4e2``)."""

    def described(key: str, why: str, values: dict[str, Any]) -> list[str]:
        return [f"{key} = None" + (f"  # {why}" if why else ""), f"#   {_values_by_profile(values)}"]

    def default(key: str) -> list[str]:
        return described(key, STANDARD_HELP[key], {p: artifact.defaults(p)[key] for p in PROFILES})

    lines = [
        "# Parameters (papermill -p NAME VALUE, or dmllab study). None takes the profile's value, listed below it.",
        f'profile = "quick"  # {STANDARD_HELP["profile"]}',
        *default("seeds"),
        *(default("data_seed") if artifact.trains else []),
        f"execution = None  # {STANDARD_HELP['execution']}",
        '#   "device=cuda,data_root=data" (also fast_dev_run, pretrained, check_counts, threads)',
        f"manifest = None  # {STANDARD_HELP['manifest']}",
        f"train_missing = None  # {STANDARD_HELP['train_missing']}",
    ]
    if artifact.specific_parameters:
        lines.append("")
    for key in artifact.specific_parameters:
        why = artifact.parameter_help.get(key, "")
        if "=" in why:  # papermill skips parameter lines holding a second "="
            raise ValueError(f"artifact {artifact.id!r}: the help of parameter {key!r} must not contain '='")
        lines += described(key, why, {p: artifact.parameters[p][key] for p in PROFILES})
    return "\n".join(lines)


def check_parameters_cell(path: str | os.PathLike, artifact: Artifact) -> None:
    """Raise ValueError unless the notebook at ``path`` has exactly one cell tagged ``parameters`` and it is
    :func:`parameters_source` (untagged or edited, it would set its own values over the study's)."""
    import nbformat

    fix = "regenerate it (dmllab notebooks), or run it by hand with papermill"
    try:
        nb = nbformat.read(str(path), as_version=4)
    except (OSError, ValueError) as err:
        raise ValueError(f"notebook {path} cannot be read ({err}); {fix}") from None
    tagged = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", ())]
    if len(tagged) != 1:
        what = "no cell tagged 'parameters'" if not tagged else f"{len(tagged)} cells tagged 'parameters'"
        raise ValueError(f"notebook {path} has {what}: the study's parameters would not reach it; {fix}")
    given = tagged[0].source.strip("\n").splitlines()
    wanted = parameters_source(artifact).strip("\n").splitlines()
    if given != wanted:
        line = next(
            (i for i, (a, b) in enumerate(zip(given, wanted)) if a != b), min(len(given), len(wanted))
        )
        shown = given[line] if line < len(given) else "(missing)"
        raise ValueError(
            f"notebook {path}: its parameters cell was edited (line {line + 1}: {shown[:80]!r}, the plan's "
            f"notebook has {(wanted[line] if line < len(wanted) else '(nothing)')[:80]!r}); {fix}"
        )


def title_source(artifact: Artifact) -> str:
    """The markdown title cell: the paper's claims and checks, the module, the description, how to run it."""
    module = _module(artifact)
    claims = [c for c in artifact.claims if c.kind == "verdict"]
    checks = [c for c in artifact.claims if c.kind == "check"]
    source = f" · [`{module}`](../{module})" if module else ""
    head = [f"# {artifact.label}: {artifact.title}", f"**{PAPER_TITLES[artifact.paper]}**{source}"]
    if claims:
        head.append(
            "**What the paper claims**, each judged here over seeds:\n"
            + "\n".join(f"- {c.text} (the paper: {c.paper_says})" for c in claims)
        )
    if checks:
        head.append(
            "**Checks** (analytic properties, pass or fail):\n" + "\n".join(f"- {c.text}" for c in checks)
        )
    if not artifact.claims:
        head.append("No claim is judged here: the artifact reproduces the paper's numbers or picture.")
    return "\n\n".join(
        head
        + paragraphs(artifact.description)
        + [
            f"Run it top to bottom, or in batch with `dmllab study --only {artifact.id}`. Results: "
            f"`results/{artifact.id}.csv`"
            + (f"; figures: `figures/{artifact.id}*.png`" if artifact.figures else "")
            + f" (a study of the {paths.COMMITTED_PROFILE} profile on the {paths.COMMITTED_DEVICE}; run by hand, with "
            "another profile or on another device, under the git-ignored `results/scratch/<profile>/`, as the setup "
            "cell says). In JupyterLab (`make lab`) a save leaves this file as committed and writes the notebook, "
            f"outputs included, to `results/{lab_copy(artifact.id)}`."
        ]
    )


def lab_copy(stem: str) -> str:
    """Where JupyterLab saves ``notebooks/<stem>.ipynb``, under ``results/`` (:func:`dmllab.pipeline.lab.saved_copy`)."""
    return f"executed/lab/{stem}.ipynb"


def setup_source(artifact: Artifact) -> str:
    return (
        f'import dmllab.pipeline.notebook as nb\n\nA = nb.setup(globals(), "{artifact.id}")\n'
        "A.parameters_table()  # the values this notebook runs with"
    )


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _runs_sentence(artifact: Artifact, profile: str) -> str:
    """``32 configurations x 3 seeds (96 runs)`` of ``profile``."""
    runs = artifact.runs(artifact.params(profile, "device=cpu"))
    configs = {run.key.rsplit("/", 1)[0] for run in runs}
    seeds = {run.seed for run in runs}
    return (
        f"{_count(len(configs), 'configuration')} x {_count(len(seeds), 'seed')} ({_count(len(runs), 'run')})"
    )


def _first_sentence(doc: str | None) -> str:
    found = sentences(" ".join((doc or "").split()))
    return found[0].rstrip(".") if found else ""


def _step(markdown: str, code: str) -> list[Cell]:
    return [("markdown", markdown), ("code", code)]


def body_cells(artifact: Artifact) -> list[Cell]:
    """The steps after the setup cell that the artifact has, each after a markdown cell saying what it computes."""
    cells: list[Cell] = []
    if artifact.runs(artifact.params("quick", "device=cpu")):
        cells += _step(
            f"## Runs\nThe {_runs_sentence(artifact, 'quick')} this artifact reads on the quick profile; "
            f"{_runs_sentence(artifact, 'paper')} on the paper profile. `dmllab study` trains each run once, "
            "shared with every artifact that needs the same run; the table says which are stored.",
            "A.runs_table()",
        )
    what = (
        "The test metrics (R@K, NMI, in percent) of every run, one row per run and metric"
        if artifact.rows is None
        else (
            _first_sentence(artifact.rows.__doc__)
            or f"Derived by the artifact's `rows` ({_module(artifact)})"
        )
    )
    tables = "".join(f", `{artifact.id}.{t}.csv`" for t in artifact.tables)
    cells += _step(
        f"## Rows\n{what}. Written to `{artifact.id}.csv`{tables} in `results/scratch/<profile>/`, as the "
        f"setup cell says (in `results/` by a study of the {paths.COMMITTED_PROFILE} profile on the "
        f"{paths.COMMITTED_DEVICE}); this profile's rows replace the earlier ones. Below, the mean, std and seed "
        "count of each line.",
        "rows = A.derive_rows()\nA.write_results(rows)\nA.results_table()",
    )
    if artifact.reference is not None:
        cells += _step(
            "## Paper vs reproduced\nEvery row that faces a printed cell of the paper: the paper's value, the reproduced mean ± std, the difference. On the quick profile the offline "
            "benchmark's rows face CUB's cells: an orientation, not a comparison of numbers.",
            "A.paper_vs_reproduced()",
        )
    claims = sum(c.kind == "verdict" for c in artifact.claims)
    if claims:
        cells += _step(
            f"## Verdicts\nThe {_count(claims, 'claim')} of the title, each on its effect per seed: mean and "
            "95% t interval over seeds; *yes* only when the interval lies above zero, *no* when below, "
            "*inconclusive* otherwise, *not testable* when the paper's procedure cannot be kept on this profile "
            "or a compared method does not train here (`why` says which). `differs`: what differs from the "
            "paper here; `p`: the two-sided p-value, which the report adjusts across the profile's claims "
            "(Holm).",
            "A.verdicts()",
        )
    if any(c.kind == "check" for c in artifact.claims):
        cells += _step(
            "## Checks\nThe analytic properties of the title, measured per seed: a check passes when the "
            "property holds on every seed (`measured`: the mean, `lowest seed`: the worst).",
            "A.checks()",
        )
    if artifact.figures:
        captions = "".join(f"\n- {f.caption}" for f in artifact.figures if f.caption)
        cells += _step(
            f"## {'Figure' if len(artifact.figures) == 1 else 'Figures'}\nDrawn from the CSVs only (the "
            f"paper's plotting notebook writes {'it' if len(artifact.figures) == 1 else 'them'} to `figures/`).{captions}",
            "figs = A.figures()",
        )
    return cells


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
    """The notebook of ``artifact`` from the template: title, parameters, setup, then :func:`body_cells`."""
    cells = [
        ("markdown", title_source(artifact), {}),
        ("code", parameters_source(artifact), {"tags": ["parameters"]}),
        ("code", setup_source(artifact), {}),
    ] + [(kind, source, {}) for kind, source in body_cells(artifact)]
    return _new_notebook(cells, artifact.id)


def make_plots_notebook(paper: str) -> nbformat.NotebookNode:
    """``notebooks/plots_<paper>.ipynb``: reads only ``results/*.csv``, writes every figure of the paper and shows
    each one under its artifact's title."""
    arts = [a for a in registry.all_artifacts() if a.paper == paper and a.figures]
    listed = "".join(f"\n- {a.label}: {a.title} (`{a.id}`)" for a in arts)
    cells = [
        (
            "markdown",
            f"# Figures: {PAPER_TITLES[paper]}\n\nEvery figure of this paper's artifacts, drawn from the tidy CSVs "
            "under `results/` (nothing is trained or computed here), written to `figures/` and shown below in the "
            "paper's order (a run by hand, of another profile or on another device reads and writes "
            f"`results/scratch/<profile>/` and `figures/scratch/<profile>/`):{listed}",
            {},
        ),
        (
            "code",
            '# Parameters (papermill -p NAME VALUE)\nprofile = "quick"  # smoke | quick | paper\n'
            f'device = "auto"  # the device whose rows are drawn: {STANDARD_HELP["device"]}',
            {"tags": ["parameters"]},
        ),
        (
            "code",
            f'from dmllab.pipeline import plots\n\nplots.draw_paper("{paper}", profile, device)  # shows each figure; '
            "returns what was written",
            {},
        ),
    ]
    return _new_notebook(cells, f"plots_{paper}")


def _all_notebooks(only: Collection[str] | None = None) -> dict[str, nbformat.NotebookNode]:
    """Every generated notebook by stem (those of ``only``)."""
    wanted = (lambda stem: True) if only is None else (lambda stem: stem in only)
    out = {a.id: make_notebook(a) for a in registry.all_artifacts() if wanted(a.id)}
    papers = {a.paper for a in registry.all_artifacts()}
    out.update({f"plots_{p}": make_plots_notebook(p) for p in PAPERS if p in papers and wanted(f"plots_{p}")})
    return out


def write_all(directory: str | os.PathLike | None = None) -> list[Path]:
    """Write every generated notebook, remove any other; returns the written paths."""
    import nbformat

    directory = Path(directory) if directory is not None else notebooks_dir()
    directory.mkdir(parents=True, exist_ok=True)
    wanted = _all_notebooks()
    written = [directory / f"{stem}.ipynb" for stem in wanted]
    for path, nb in zip(written, wanted.values()):
        text = nbformat.writes(nb)
        write_text_atomic(path, text if text.endswith("\n") else text + "\n")  # as nbformat.write ends it
    for path in directory.glob("*.ipynb"):
        if path.stem not in wanted:
            path.unlink()
    return written


def _shape(nb: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source, tuple(c.metadata.get("tags", ()))) for c in nb.cells]


def stale_notebooks(
    directory: str | os.PathLike | None = None, only: Collection[str] | None = None
) -> list[str]:
    """The stems (of ``only``) whose notebook differs from the generated one (cells' kinds, sources, tags), is
    missing, has outputs, or is generated from nothing."""
    import nbformat

    directory = Path(directory) if directory is not None else notebooks_dir()
    wanted = _all_notebooks(only)
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
    stale += [
        p.stem for p in directory.glob("*.ipynb") if p.stem not in wanted and (only is None or p.stem in only)
    ]
    return sorted(stale)
