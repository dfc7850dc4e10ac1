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

``fast_dev_run=N`` (``dmllab study --fast-dev-run``) checks a study in minutes before spending GPU hours
(:mod:`dmllab.pipeline.fastdev`): every step as above, with fast dev runs, in scratch folders.
``pretrained=False`` (``--pretrained none``, fast dev runs only) trains from random initialisation;
``check_counts=False`` (``--no-counts``) reads partial copies of the real datasets.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

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
from dmllab.pipeline.fastdev import check_fast_dev, fast_dev_header, format_fast_dev, scratch_paths
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
