"""``dmllab study``: plan, train, notebooks, plots, report.

1. **plan** (:mod:`dmllab.pipeline.plan`): the selected artifacts' runs, placed and de-duplicated, with what is
   stored and an estimate (``--plan`` prints it and stops);
2. **train** the missing runs on an executor (:mod:`dmllab.pipeline.executors`): ``local`` (a process pool,
   ``--jobs auto``: one worker per usable core on the CPU) or ``slurm`` (one submitit job per run);
3. **notebooks** (:mod:`dmllab.pipeline.execute`): each artifact's notebook runs with papermill, reads the stored
   runs only (``train_missing=False``) and writes ``results/<artifact>.csv``; a notebook whose code, parameters
   and runs are unchanged since its last success is skipped;
4. **plots**: ``notebooks/plots_<paper>.ipynb`` reads only the CSVs and writes the paper's figures;
5. **report**: ``figures/report.html``.

A failing run or notebook is reported with its error and never stops the others. Ctrl-C or SIGTERM stops the
study within seconds, workers and notebook kernels included, and the summary says what finished. Before training,
the study checks once what every run to train needs (:func:`preflight`: the ImageNet weights in torchvision's cache,
each real dataset's index files) and stops with one line per problem instead of failing every run alike.

``fast_dev_run=N`` (``dmllab study --fast-dev-run``) checks a study in minutes before spending GPU hours: every
planned run of the selected artifacts (first seed only) is a fast dev run (``run.fast_dev_run``: N batches per
epoch, at most one warm-up and one schedule epoch per stage, N batches per evaluation, the batch shrunk to fit a
dataset smaller than one batch), then the notebooks, plots and report run on their rows; everything goes to a
scratch folder (:func:`scratch_paths`: ``<results>/fast-dev-run/<profile>/``, run store included, and
``<figures>/fast-dev-run/<profile>/``), never the committed results. Its summary (:func:`format_fast_dev`) says
per artifact what trained, in how many steps, with what peak memory and time, and whether its notebook found its
runs. ``pretrained=False`` (``--pretrained none``, fast dev runs only) trains from random initialisation.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.experiments import registry
from dmllab.numerics import stale_cache_message
from dmllab.pipeline import execute
from dmllab.pipeline.executors import (
    Interrupted,
    JobResult,
    LocalExecutor,
    SlurmExecutor,
    SlurmOptions,
    quiet,
    resolve_jobs,
    stop_on_signals,
    threads_per_worker,
)
from dmllab.pipeline.plan import Plan, estimate, make_plan
from dmllab.profiles import resolve_device

EXECUTORS = ("local", "slurm")


@dataclass(frozen=True)
class StudyResult:
    plan: Plan
    training: tuple[JobResult, ...]
    notebooks: tuple[JobResult, ...]
    plots: tuple[JobResult, ...]
    report: Path | None
    wall_s: float
    # Wall time of each step, in order (plan, train, notebooks, plots, report), seconds.
    phase_s: Mapping[str, float] = field(default_factory=dict)
    stopped: int | None = None  # the signal that stopped the study (SIGINT, SIGTERM); None: it ran to the end
    problems: tuple[str, ...] = ()  # what the preflight found missing (nothing was trained then)
    checked: tuple[str, ...] = ()  # what the preflight found in place (datasets, weights), one line each

    @property
    def failed(self) -> bool:
        return (
            any(r.status == "FAILED" for r in self.training + self.notebooks + self.plots)
            or bool(self.plan.errors)
            or bool(self.problems)
        )

    @property
    def exit_code(self) -> int:
        """128 + the signal when stopped (130 for Ctrl-C), 1 when a run, notebook or plan failed, else 0."""
        return 128 + int(self.stopped) if self.stopped else int(self.failed)


def run_study(
    profile: str = "quick",
    *,
    only: str | None = None,
    jobs: int | str = "auto",
    executor: str = "local",
    slurm: SlurmOptions | None = None,
    data_root: str | None = None,
    device: str | None = None,
    notebooks_dir: str | os.PathLike | None = None,
    executed_dir: str | os.PathLike | None = None,
    progress: bool = True,
    report: bool = True,
    force: bool = False,
    say: Callable[[str], None] = print,
    fast_dev_run: int = 0,
    pretrained: bool | None = None,
    check_counts: bool = True,
) -> StudyResult:
    """Plan, train, run the notebooks, draw the figures and build the report (module docstring); with
    ``fast_dev_run`` all of it as a fast dev run, in :func:`scratch_paths`.

    Raises:
        ValueError: an unknown profile or executor, ``jobs`` neither "auto" nor a positive integer, ``only``
            matching no artifact, a negative ``fast_dev_run``, or ``pretrained=False`` without ``fast_dev_run``.
    """
    check_fast_dev(fast_dev_run, pretrained)
    options = dict(locals())
    if not fast_dev_run:
        return _run(**options)
    with scratch_paths(profile):
        return _run(**options)


def check_fast_dev(fast_dev_run: int, pretrained: bool | None) -> None:
    """Raise ValueError for a negative ``fast_dev_run`` or ``pretrained=False`` outside a fast dev run (a real
    study without pre-trained weights is not the papers' procedure, and its rows would sit among the real ones)."""
    if isinstance(fast_dev_run, bool) or not isinstance(fast_dev_run, int) or fast_dev_run < 0:
        raise ValueError(f"--fast-dev-run takes a number of batches >= 1, got {fast_dev_run!r}")
    if pretrained is False and not fast_dev_run:
        raise ValueError(
            "--pretrained none is for checking a study: add --fast-dev-run (a real study trains with the "
            "pre-trained weights its presets name)"
        )


FAST_DEV_FOLDER = "fast-dev-run"


def scratch_dirs(profile: str) -> tuple[Path, Path]:
    """``(results, figures)`` of a fast dev run of ``profile``: ``<results>/fast-dev-run/<profile>`` (CSVs, run
    store, executed notebooks) and ``<figures>/fast-dev-run/<profile>`` (figures and report)."""
    return (
        paths.results_dir() / FAST_DEV_FOLDER / profile,
        paths.figures_dir() / FAST_DEV_FOLDER / profile,
    )


@contextmanager
def scratch_paths(profile: str) -> Iterator[tuple[Path, Path]]:
    """Within the block, ``DMLLAB_RESULTS`` and ``DMLLAB_FIGURES`` point at :func:`scratch_dirs` (inherited by the
    workers, notebook kernels and SLURM jobs the study starts), so a fast dev run never writes the committed
    ``results/*.csv``, ``figures/*.png`` or ``figures/report.html``; the previous values are restored after."""
    results, figures = scratch_dirs(profile)
    # paths.profile_figures_dir puts a profile other than quick in <figures>/<profile>: give it the parent
    figures_env = figures if profile == "quick" else figures.parent
    saved = {k: os.environ.get(k) for k in ("DMLLAB_RESULTS", "DMLLAB_FIGURES")}
    os.environ["DMLLAB_RESULTS"], os.environ["DMLLAB_FIGURES"] = str(results), str(figures_env)
    try:
        yield results, figures
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run(
    profile: str,
    *,
    only: str | None,
    jobs: int | str,
    executor: str,
    slurm: SlurmOptions | None,
    data_root: str | None,
    device: str | None,
    notebooks_dir: str | os.PathLike | None,
    executed_dir: str | os.PathLike | None,
    progress: bool,
    report: bool,
    force: bool,
    say: Callable[[str], None],
    fast_dev_run: int,
    pretrained: bool | None,
    check_counts: bool,
) -> StudyResult:
    from dmllab.pipeline.template import notebooks_dir as default_notebooks

    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; valid executors: {', '.join(EXECUTORS)}")
    resolved_device = resolve_device(device or "auto")
    workers = resolve_jobs(jobs, resolved_device)
    artifacts = registry.select(only)
    quiet()
    start = time.perf_counter()
    phase_s: dict[str, float] = {}
    done: dict[str, list[JobResult]] = {"train": [], "notebooks": [], "plots": []}
    plan, built, stopped, step = Plan(profile, tuple(artifacts), (), 0), None, None, "plan"
    problems: list[str] = []
    checked: list[str] = []
    local = LocalExecutor(workers, threads=threads_per_worker(resolved_device, workers), progress=progress)
    nb_dir = Path(notebooks_dir) if notebooks_dir is not None else default_notebooks()
    out_dir = Path(executed_dir) if executed_dir is not None else paths.results_dir() / "executed" / profile

    def finished(name: str, next_step: str) -> str:
        phase_s[name] = time.perf_counter() - start - sum(phase_s.values())
        return next_step

    with stop_on_signals():
        try:
            stale = stale_cache_message(paths.cache_dir(), paths.runs_dir())
            if stale:
                say(f"WARNING: {stale}")
            plan = make_plan(
                artifacts,
                profile,
                device=resolved_device,
                data_root=data_root,
                fast_dev_run=fast_dev_run,
                pretrained=pretrained,
                check_counts=check_counts,
            )
            if fast_dev_run:
                say(fast_dev_header(plan))
            say(
                f"plan: {len(plan.runs)} unique runs, {len(plan.stored)} stored, "
                + (f"{len(plan.diverged)} recorded as diverged, " if plan.diverged else "")
                + f"{len(plan.missing)} to train (estimate {estimate(plan, workers)})"
            )
            checked, problems = preflight(plan)
            for line in checked:
                say(line)
            if problems:
                raise _Stop()
            step = finished("plan", "train")
            trainer = SlurmExecutor(slurm, progress=progress) if executor == "slurm" else local
            done["train"] = trainer.submit([r.run for r in plan.missing], desc=f"train ({profile})")
            step = finished("train", "notebooks")
            done["notebooks"] = execute.run_notebooks(plan, local, nb_dir, out_dir, force)
            step = finished("notebooks", "plots")
            done["plots"] = execute.run_plots(plan, local, nb_dir, out_dir, done["notebooks"], force)
            step = finished("plots", "report")
            if report:
                from dmllab.pipeline.report import build_report

                built = build_report(profile)
            finished("report", "")
        except Interrupted as stop:
            stopped = stop.signum
            if step in done:
                done[step] = list(stop.finished)
        except _Stop:
            pass
    return StudyResult(
        plan,
        tuple(done["train"]),
        tuple(done["notebooks"]),
        tuple(done["plots"]),
        built,
        time.perf_counter() - start,
        phase_s,
        stopped,
        tuple(problems),
        tuple(checked),
    )


class _Stop(Exception):
    """The preflight found problems: the study stops before training."""


def preflight(plan: Plan) -> tuple[list[str], list[str]]:
    """What the runs to train need, checked once: ``(found, problems)``, one line each.

    * every real dataset's folder (:func:`dmllab.experiments.lookup.dataset_root` of the data root) holds its
      index files and, unless ``--no-counts``, the canonical counts: ``"data: cub at D/cub (11788 images)"``, or
      the loader's error (with how a data root serving several datasets is laid out);
    * every ImageNet weights file the runs load is in torchvision's cache, downloaded there first where possible
      (:func:`dmllab.models.weights.check_imagenet_weights`), or the one-line error naming the file and the folder.
    """
    from dmllab.data import DATASETS
    from dmllab.data.base import DatasetCountError, DatasetNotFoundError
    from dmllab.data.real import IndexFileError, is_real_dataset
    from dmllab.models.weights import MissingWeightsError, check_imagenet_weights, weights_source

    found: list[str] = []
    problems: list[str] = []
    configs = [r.run.config for r in plan.missing]
    datasets = (
        (c.data.dataset, c.data.root, dict(c.data.dataset_kwargs).get("check_counts", True)) for c in configs
    )
    for dataset, root, counts in dict.fromkeys(datasets):
        if not is_real_dataset(dataset):
            continue
        cls = DATASETS.get(dataset)
        try:
            sides = cls.index_records(root)
            if counts:
                cls(root, cls.splits[0], check_counts=True)
        except DatasetCountError as err:
            problems.append(
                f"data: {' '.join(str(err).split())} (dmllab study --no-counts reads a partial copy)"
            )
            continue
        except (DatasetNotFoundError, IndexFileError) as err:
            layout = (
                " (a data root serving several datasets holds one folder per dataset, named as "
                "`dmllab data fetch NAME D/NAME` makes them: D/cub, D/cars, D/sop, D/inshop)"
                if plan.data_root is not None
                else " (give the datasets' folder with --data-root)"
            )
            problems.append(f"data: {' '.join(str(err).split())}{layout}")
            continue
        images = len({f for records in sides.values() for f, _ in records})
        found.append(
            f"data: {dataset} at {root} ({images} images{'' if counts else ', counts not checked (--no-counts)'})"
        )
    needed = {
        (c.model.backbone, tuple(sorted(dict(c.model.backbone_kwargs).items())))
        for c in configs
        if c.model.pretrained and c.model.weights_path is None
    }
    for backbone, kwargs in sorted(needed):
        try:
            if weights_source(backbone)[0] != "imagenet":
                continue
            found.append(
                f"weights: {backbone} ImageNet weights at {check_imagenet_weights(backbone, dict(kwargs))}"
            )
        except MissingWeightsError as err:
            problems.append(f"weights: {err}")
    return found, problems


def fast_dev_header(plan: Plan) -> str:
    """What a fast dev run does and where it writes (printed before it trains)."""
    from dmllab.training.protocol import FAST_DEV_EPOCHS, FAST_DEV_WARMUP_EPOCHS

    results, figures = paths.results_dir(), paths.profile_figures_dir(plan.profile)  # within scratch_paths
    n = plan.fast_dev_run
    seeds = sorted({r.run.seed for r in plan.runs})
    lines = [
        f"fast dev run of the {plan.profile} profile on {plan.device}: every run trains {n} batch(es) per epoch, "
        f"at most {FAST_DEV_WARMUP_EPOCHS} warm-up + {FAST_DEV_EPOCHS} schedule epoch per stage, evaluates "
        f"{n} batch(es) per split; first seed of each artifact only (seed {', '.join(map(str, seeds)) or '-'})",
        f"fast dev run: results and run store in {results}, figures and report in {figures} "
        "(the committed results/ and figures/ are not touched)",
    ]
    if plan.pretrained is False:
        lines.append(
            "fast dev run: --pretrained none: every run from random initialisation (no ImageNet or pre-trained "
            "weights loaded)"
        )
    return "\n".join(lines)


def _artifact_runs(result: StudyResult) -> dict[str, list[str]]:
    """``artifact id -> the keys of its planned runs``."""
    out: dict[str, list[str]] = {a.id: [] for a in result.plan.artifacts}
    for r in result.plan.runs:
        for a in r.artifacts:
            out.setdefault(a, []).append(r.run.key)
    return out


def _memory(infos: list[Mapping[str, Any]]) -> str:
    rss = [i["peak_rss_mb"] for i in infos if "peak_rss_mb" in i]
    cuda = [i["cuda_max_allocated_mb"] for i in infos if "cuda_max_allocated_mb" in i]
    parts = [f"CUDA {max(cuda) / 1024:.2f} GB"] if cuda else []
    parts += [f"RSS {max(rss) / 1024:.2f} GB"] if rss else []
    return ", ".join(parts) or "-"


def format_fast_dev(result: StudyResult) -> str:
    """A fast dev run's summary: per artifact the runs trained (of those it needs), their optimiser steps, the
    peak memory of a run (CUDA max allocated on a GPU; CPU RSS of the run's process and its loader workers), the
    training time, and whether its notebook found its runs; what was shrunk to fit the data; and whether the real
    study will run."""
    plan = result.plan
    jobs = {r.name: r for r in result.training}
    notebooks = {r.name: r for r in result.notebooks}
    by_artifact = _artifact_runs(result)
    rows = []
    stored = {r.run.key for r in plan.stored}  # trained by an earlier fast dev run of the same command
    for a in plan.artifacts:
        keys = by_artifact.get(a.id, [])
        ran = [jobs[k] for k in keys if k in jobs]
        reused = sum(k in stored for k in keys)
        ok = sum(r.status == "ok" for r in ran) + reused
        nb = notebooks.get(a.id)
        if nb is None:
            found = "not run"
        elif nb.status == "ok":
            found = f"found its {len(keys)} run(s)" if keys else "ok (no training runs)"
        elif "MissingRunError" in nb.error:
            failed = sum(r.status != "ok" for r in ran)
            found = "DID NOT FIND its runs" + (f" ({failed} failed to train)" if failed else "")
        else:
            found = f"FAILED{f' (cell {nb.cell})' if nb.cell is not None else ''}"
        rows.append(
            (
                a.id,
                f"{ok}/{len(keys)}" + (f" ({reused} stored)" if reused else ""),
                str(sum(int(r.info.get("steps", 0)) for r in ran)),
                _memory([r.info for r in ran]),
                f"{sum(r.wall_s for r in ran):.0f} s",
                f"{found}{f' ({nb.wall_s:.0f} s)' if nb is not None and not nb.cached else ''}",
            )
        )
    head = ("artifact", "runs", "steps", "peak memory", "train", "notebook")
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["", "fast dev run, per artifact:"]
    for r in [head, *rows]:
        lines.append(
            "  ".join(
                f"{v:<{w}}" if i in (0, 3, 5) else f"{v:>{w}}" for i, (v, w) in enumerate(zip(r, widths))
            )
        )
    shrunk = list(dict.fromkeys(line for r in result.training for line in r.info.get("shrunk", ())))
    if shrunk:
        lines.append(
            "shrunk to fit the data (the real batches need more classes or images than these splits hold):"
        )
        lines += [f"  {line}" for line in shrunk]
    if plan.pretrained is False:
        lines.append(
            "random initialisation (--pretrained none): the real study loads the pre-trained weights"
        )
    bad_runs = [r for r in result.training if r.status != "ok"]
    bad_nbs = [r for r in list(result.notebooks) + list(result.plots) if r.status != "ok"]
    if result.stopped or result.problems or plan.errors or bad_runs or bad_nbs or not result.notebooks:
        lines.append(
            f"NOT READY: {len(result.problems)} preflight problem(s), {len(plan.errors)} planning error(s), "
            f"{len(bad_runs)} run(s) and {len(bad_nbs)} notebook(s) failed (listed below)"
        )
    else:
        lines.append(
            "READY: every run trained and every notebook found its runs; the real study runs the same code "
            f"without --fast-dev-run ({len(plan.artifacts)} artifacts)"
        )
    return "\n".join(lines)


def format_summary(result: StudyResult) -> str:
    """Plain-text summary: one line per notebook and plotting notebook, training totals, then every failure (and a
    fast dev run's own summary, :func:`format_fast_dev`)."""
    if result.problems:
        return "\n".join(
            [f"nothing was trained: the check before training found {len(result.problems)} problem(s):"]
            + [f"ERROR {problem}" for problem in result.problems]
        )
    lines = []
    if result.stopped:
        lines.append(
            f"STOPPED by {signal.Signals(result.stopped).name}: what finished before is listed below; "
            "run the same command again to go on (finished runs and notebooks are kept)"
        )
    ok_runs = sum(r.status == "ok" for r in result.training)
    diverged = [r for r in result.training if r.status == "diverged"]
    lines.append(
        f"training: {ok_runs} trained, {len(diverged)} diverged, "
        f"{len(result.training) - ok_runs - len(diverged)} failed, "
        f"{len(result.plan.runs) - len(result.plan.missing)} reused from the run store "
        f"({len(result.plan.diverged)} of them recorded as diverged) "
        f"({sum(r.wall_s for r in result.training):.0f} s of training)"
    )
    rows = list(result.notebooks) + list(result.plots)
    width = max([len("notebook")] + [len(r.name) for r in rows])
    lines.append(f"{'notebook':<{width}}  {'status':<6}  {'wall':>8}")
    lines.append(f"{'-' * width}  ------  --------")
    lines += [f"{r.name:<{width}}  {'cached' if r.cached else r.status:<6}  {r.wall_s:>7.1f}s" for r in rows]
    failed = [r for r in list(result.training) + rows if r.status == "FAILED"]
    lines.append(
        f"{len(rows) - sum(r.status != 'ok' for r in rows)} notebooks ok, "
        f"{sum(r.status != 'ok' for r in rows)} failed; study wall time {result.wall_s:.0f} s"
    )
    if result.phase_s:
        lines.append("steps: " + ", ".join(f"{k} {v:.0f} s" for k, v in result.phase_s.items()))
    if result.plan.fast_dev_run:
        lines.append(format_fast_dev(result))
    for artifact, error in result.plan.errors.items():
        lines.append(f"\nFAILED planning {artifact}: {error}")
    for r in diverged:
        lines.append(f"\ndiverged (recorded in the run store, its rows say `diverged`) {r.name}: {r.error}")
    for r in failed:
        where = f" (cell {r.cell})" if r.cell is not None else ""
        lines.append(f"\nFAILED {r.name}{where}: {r.error}")
        if r.output:
            lines.append(f"  see: {r.output}")
    if result.report is not None:
        lines.append(f"\nreport: {result.report}")
    return "\n".join(lines)
