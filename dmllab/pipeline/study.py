"""``dmllab study``: plan, train, notebooks, plots, report.

1. **plan**: the union of the selected artifacts' runs (:class:`~dmllab.experiments.Run`), de-duplicated by the
   run store's key (two artifacts that need the same config and seed share one run), with how many are already
   stored and an estimated cost from stored wall times (:func:`make_plan`, ``--plan`` prints it and stops);
2. **train** the missing runs on an executor: ``local`` (a process pool of N workers with ``cores // N`` threads
   each; workers die with the study, even on ``kill -9``) or ``slurm`` (one submitit job per run, as in
   facebookresearch's DINO/MAE/DETR launchers; runs are idempotent, so re-submitting trains only what is
   missing);
3. **notebooks**: each artifact's notebook runs with papermill, reads the stored runs only
   (``train_missing=False``) and writes ``results/<artifact>.csv``;
4. **plots**: ``notebooks/plots_<paper>.ipynb`` reads only the CSVs and writes the paper's figures;
5. **report**: ``figures/report.html``.

A failing run or notebook is reported with its error and never stops the others. Executed notebooks go to
``results/executed/<profile>/`` (not in git).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.experiments import registry
from dmllab.experiments.base import Artifact, Run
from dmllab.numerics import stale_cache_message
from dmllab.profiles import PROFILES, TYPICAL_RUN_S, resolve_device

KERNEL_NAME = "python3"
_FALLBACK_KERNEL = "dmllab-python"
EXECUTORS = ("local", "slurm")


# ------------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class PlannedRun:
    """One unique run of the plan: the run, the artifacts that read it, whether it is stored (or recorded as
    diverged: decided as well, not trained again), its cost."""

    run: Run
    artifacts: tuple[str, ...]
    stored: bool
    wall_s: float | None  # stored wall time, or the estimate for a missing run (None: no basis)
    diverged: bool = False  # the store records it as diverged (dmllab.training.store, DivergedRunError)


@dataclass(frozen=True)
class Plan:
    profile: str
    artifacts: tuple[Artifact, ...]
    runs: tuple[PlannedRun, ...]
    requested: int  # runs declared by the artifacts before de-duplication
    errors: Mapping[str, str] = field(default_factory=dict)  # artifact -> why its runs could not be listed
    typical_s: float | None = None  # the TYPICAL_RUN_S value a missing run's estimate fell back to, if any

    @property
    def missing(self) -> list[PlannedRun]:
        return [r for r in self.runs if not r.stored and not r.diverged]

    @property
    def diverged(self) -> list[PlannedRun]:
        return [r for r in self.runs if r.diverged]

    @property
    def stored(self) -> list[PlannedRun]:
        """Runs the store holds with their results (diverged ones are decided too, but not counted here)."""
        return [r for r in self.runs if r.stored]

    @property
    def estimate_s(self) -> float | None:
        """Estimated training time of the missing runs (sum of estimates), None without a basis."""
        costs = [r.wall_s for r in self.missing]
        return None if any(c is None for c in costs) else float(sum(costs))


def _stored_wall_times() -> dict[str, list[float]]:
    """``method|dataset|profile -> stored wall times`` over the whole run store (the estimate's basis)."""
    out: dict[str, list[float]] = {}
    for metrics in paths.runs_dir().glob("*/seed*/metrics.json"):
        try:
            data = json.loads(metrics.read_text())
            key = "|".join(str(data.get(k, "")) for k in ("method", "dataset", "profile"))
            out.setdefault(key, []).append(float(data["wall_time_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def make_plan(
    artifacts: Sequence[Artifact], profile: str, *, device: str = "auto", data_root: str | None = None
) -> Plan:
    """The de-duplicated runs of ``artifacts`` at ``profile`` (module docstring, step 1)."""
    from dmllab.training.store import RunStore

    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    store = RunStore()
    unique: dict[str, tuple[Run, list[str]]] = {}
    errors: dict[str, str] = {}
    requested = 0
    for artifact in artifacts:
        try:
            runs = artifact.planned_runs(artifact.params(profile, device=device, data_root=data_root))
        except Exception as err:  # one artifact's broken declaration is reported, the others are planned
            errors[artifact.id] = f"{type(err).__name__}: {err}"
            continue
        requested += len(runs)
        for run in runs:
            unique.setdefault(run.key, (run, []))[1].append(artifact.id)
    history = _stored_wall_times()
    by_profile: dict[str, list[float]] = {}
    for key, walls in history.items():
        by_profile.setdefault(key.rsplit("|", 1)[-1], []).extend(walls)
    planned, typical = [], None
    for run, users in unique.values():
        stored = store.load(run.config, run.seed)
        diverged = stored is None and store.diverged(run.config, run.seed) is not None
        if stored is not None:
            wall: float | None = float(stored.wall_time_s)
        else:  # the median of the same method, else of the same profile, else the profile's typical run
            c = run.config
            basis = history.get("|".join((c.method, c.dataset, c.profile))) or by_profile.get(c.profile)
            wall = statistics.median(basis) if basis else TYPICAL_RUN_S.get(c.profile)
            if not basis and wall is not None:
                typical = wall
        planned.append(PlannedRun(run, tuple(users), stored is not None, wall, diverged))
    return Plan(profile, tuple(artifacts), tuple(planned), requested, errors, typical_s=typical)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown (no stored run to estimate from)"
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _estimate(plan: Plan, jobs: int) -> str:
    """The plan's training estimate as text: compute, wall with ``jobs``, and its basis when it is a typical run."""
    est = plan.estimate_s
    return (
        f"{_duration(est)} of compute"
        + (f", about {_duration(est / max(1, jobs))} with {jobs} jobs" if est and jobs > 1 else "")
        + (
            f" (no stored {plan.profile} run yet: {plan.typical_s:.0f} s per run, the typical {plan.profile} run "
            "on one CPU thread, dmllab.profiles.TYPICAL_RUN_S)"
            if plan.typical_s is not None
            else ""
        )
    )


def format_plan(plan: Plan, *, jobs: int = 1, limit: int = 40) -> str:
    """The plan as text: one line per unique run (first ``limit``), then the totals and the estimate."""
    from dmllab.training import presets

    lines = [f"study plan, profile {plan.profile}: {len(plan.artifacts)} artifacts"]
    width = max([len("artifacts")] + [len(",".join(r.artifacts)) for r in plan.runs[:limit]])
    if plan.runs:
        lines.append(
            f"{'run key':<24} {'seed':>4}  {'stored':<6} {'wall':>7}  {'artifacts':<{width}}  config"
        )
    for r in plan.runs[:limit]:
        key = r.run.key.split("/")[0][:24]
        wall = "" if r.wall_s is None else f"{r.wall_s:6.0f}s"
        lines.append(
            f"{key:<24} {r.run.seed:>4}  {'yes' if r.stored else 'div.' if r.diverged else 'no':<6} {wall:>7}  "
            f"{','.join(r.artifacts):<{width}}  {presets.describe(r.run.config)}"
        )
    if len(plan.runs) > limit:
        lines.append(f"... {len(plan.runs) - limit} more runs")
    toys = [a.id for a in plan.artifacts if a.id not in {x for r in plan.runs for x in r.artifacts}]
    lines.append("")
    lines.append(
        f"{plan.requested} runs requested by the artifacts, {len(plan.runs)} unique after de-duplication; "
        f"{len(plan.stored)} stored, "
        + (
            f"{len(plan.diverged)} recorded as diverged (not retrained; --force does), "
            if plan.diverged
            else ""
        )
        + f"{len(plan.missing)} to train"
    )
    lines.append(f"estimated training time of the missing runs: {_estimate(plan, jobs)}")
    if toys:
        lines.append(f"artifacts without training runs (computed in their notebooks): {', '.join(toys)}")
    for artifact, error in plan.errors.items():
        lines.append(f"ERROR listing the runs of {artifact}: {error}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ train


SKIPPED = "up to date (skipped)"  # JobResult.output of a notebook whose stamp is current


@dataclass(frozen=True)
class JobResult:
    """Outcome of one training run or notebook."""

    name: str
    status: str  # "ok" | "diverged" (a non-finite run: an outcome, recorded in the store) | "FAILED"
    wall_s: float
    error: str = ""
    output: str | None = None  # executed notebook or the job's log
    cell: int | None = None

    @property
    def cached(self) -> bool:
        """A notebook skipped because its inputs are unchanged since its last successful execution."""
        return self.output == SKIPPED


def _die_with_parent() -> None:
    """Linux: ask the kernel to SIGKILL this process when its parent dies (kill -9 of the study included)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except OSError:  # pragma: no cover - no glibc: the pool still shuts down with a live parent
            pass
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)


def _worker_init(threads: int) -> None:
    _die_with_parent()
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    _quiet()
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:  # pragma: no cover
        pass


def _quiet() -> None:
    """Keep kernel and library noise (e.g. jupyter's "running over TCP without encryption") off the terminal."""
    for name in ("traitlets", "papermill", "jupyter_client", "nbclient", "asyncio"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*without encryption.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")


def train_run(run: Run) -> JobResult:
    """Train one run through the run store (a stored run is returned at once); never raises."""
    from dmllab.metrics import DegenerateEmbeddingError as NonFiniteEmbeddingError  # collapsed too
    from dmllab.training import NonFiniteLossError
    from dmllab.training.store import run as train

    start = time.perf_counter()
    try:
        train(run.config, seed=run.seed, progress=False)
    except (NonFiniteLossError, NonFiniteEmbeddingError) as err:  # recorded by the store
        return JobResult(run.key, "diverged", time.perf_counter() - start, f"{type(err).__name__}: {err}")
    except Exception as err:
        return JobResult(run.key, "FAILED", time.perf_counter() - start, f"{type(err).__name__}: {err}")
    return JobResult(run.key, "ok", time.perf_counter() - start)


def threads_per_job(jobs: int) -> int:
    threads = max(1, (os.cpu_count() or 1) // jobs)
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # an explicit user limit is kept
        threads = max(1, min(threads, int(os.environ["OMP_NUM_THREADS"])))
    return threads


def _pool(jobs: int) -> ProcessPoolExecutor:
    # Spawned workers: a fresh interpreter per job, so nothing (threads, torch state) leaks from the parent.
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=get_context("spawn"),
        initializer=_worker_init,
        initargs=(threads_per_job(jobs),),
    )


def _run_pool(
    items: Sequence[Any],
    fn: Callable[[Any], JobResult],
    name: Callable[[Any], str],
    *,
    jobs: int,
    desc: str,
    progress: bool,
) -> list[JobResult]:
    from tqdm.auto import tqdm

    results: dict[int, JobResult] = {}
    bar = tqdm(total=len(items), desc=desc, unit="job", disable=not progress or not items)
    with _pool(jobs) as pool:
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                res = fut.result()
            except Exception as err:  # the worker process died (killed, out of memory): report, go on
                res = JobResult(
                    name(items[i]), "FAILED", 0.0, f"worker process failed: {type(err).__name__}: {err}"
                )
            results[i] = res
            bar.set_postfix_str(f"{res.name[:40]}: {res.status}")
            bar.update(1)
    bar.close()
    return [results[i] for i in range(len(items))]


@dataclass(frozen=True)
class SlurmOptions:
    """``--executor slurm`` settings (submitit): partition, time limit per run, GPUs and CPUs per job, how many
    array jobs run at once, where logs go; ``cluster="local"`` runs the same path with submitit's local
    executor (CI)."""

    partition: str | None = None
    time_min: int = 240
    gpus_per_job: int = 1
    cpus_per_job: int = 10
    array_parallelism: int = 32
    folder: str | None = None
    cluster: str | None = None  # None: auto (slurm when sbatch exists); "local" | "debug" for tests


def train_slurm(runs: Sequence[Run], options: SlurmOptions, *, progress: bool = True) -> list[JobResult]:
    """Submit one job per run as a submitit job array, wait for them, and report failures with their log path."""
    import submitit
    from tqdm.auto import tqdm

    if not runs:
        return []
    folder = (
        Path(options.folder)
        if options.folder
        else paths.results_dir() / "slurm" / time.strftime("%Y%m%d-%H%M%S")
    )
    executor = submitit.AutoExecutor(folder=str(folder / "%j"), cluster=options.cluster)
    params: dict[str, Any] = {"timeout_min": options.time_min, "name": "dmllab"}
    if executor.cluster == "slurm":
        params.update(
            slurm_partition=options.partition,
            gpus_per_node=options.gpus_per_job,
            tasks_per_node=1,
            cpus_per_task=options.cpus_per_job,
            slurm_array_parallelism=options.array_parallelism,
        )
        params = {k: v for k, v in params.items() if v is not None}
    executor.update_parameters(**params)
    jobs = executor.map_array(train_run, list(runs))
    results = []
    bar = tqdm(total=len(jobs), desc="train (slurm)", unit="run", disable=not progress)
    for run, job in zip(runs, jobs):
        try:
            res = job.result()
        except Exception as err:  # the job itself failed (time limit, node failure, preemption)
            res = JobResult(
                run.key, "FAILED", 0.0, f"job {job.job_id} failed: {type(err).__name__}: {str(err)[-300:]}"
            )
        if res.status != "ok":
            res = JobResult(res.name, res.status, res.wall_s, res.error, str(job.paths.stderr))
        results.append(res)
        bar.update(1)
    bar.close()
    return results


# -------------------------------------------------------------------------------------------- notebooks


def _kernel_python(argv0: str) -> str:
    # jupyter_client runs kernels whose argv[0] is a bare "python" with the current interpreter.
    bare = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2])}
    return sys.executable if argv0 in bare else argv0


def ensure_kernel() -> str:
    """A kernel name whose interpreter is this one (so notebooks see the same dmllab and packages).

    ``python3`` when it resolves to ``sys.executable``; otherwise a kernelspec for this interpreter is written
    under ``<cache>/jupyter`` and put first on ``JUPYTER_PATH`` (inherited by the workers' kernels).
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
        if os.path.realpath(_kernel_python(spec.argv[0])) == os.path.realpath(sys.executable):
            return KERNEL_NAME
    except NoSuchKernel:
        pass
    root = paths.cache_dir() / "jupyter"
    kdir = root / "kernels" / _FALLBACK_KERNEL
    kdir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.prefix})",
        "language": "python",
    }
    (kdir / "kernel.json").write_text(json.dumps(spec, indent=1))
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("JUPYTER_PATH")]))
    return _FALLBACK_KERNEL


KERNEL_START_TIMEOUT_S = 120
KERNEL_START_ATTEMPTS = 3


def _cells_ran(output: Path) -> bool:
    """Whether any code cell of the (partly) executed notebook at ``output`` started executing."""
    try:
        cells = json.loads(output.read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return any(c.get("cell_type") == "code" and c.get("execution_count") is not None for c in cells)


def execute_notebook(
    notebook: str | os.PathLike,
    output: str | os.PathLike,
    parameters: Mapping[str, Any],
    *,
    kernel_name: str = KERNEL_NAME,
    cwd: str | os.PathLike | None = None,
    start_timeout: float = KERNEL_START_TIMEOUT_S,
    attempts: int = KERNEL_START_ATTEMPTS,
) -> JobResult:
    """Execute one notebook with papermill; never raises for a failing cell (the result says FAILED).

    A kernel that does not come up (no reply to ``kernel_info`` within ``start_timeout`` s, or death before it:
    jupyter_client's ports can collide between kernels launched at the same moment by parallel workers,
    nteract/papermill#239) is retried with a fresh kernel, up to ``attempts`` launches in all, but only while no
    cell has run, so a retry never repeats a side effect. Any other failure is reported at once.
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    _quiet()
    notebook, output = Path(notebook), Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for attempt in range(1, attempts + 1):
        try:
            papermill.execute_notebook(
                str(notebook),
                str(output),
                parameters=dict(parameters),
                kernel_name=kernel_name,
                progress_bar=False,
                log_output=False,
                start_timeout=start_timeout,
                cwd=str(cwd if cwd is not None else paths.repo_root()),
            )
        except PapermillExecutionError as err:
            return JobResult(
                notebook.stem,
                "FAILED",
                time.perf_counter() - start,
                f"{err.ename}: {err.evalue}",
                str(output),
                err.exec_count,
            )
        except Exception as err:  # kernel death, bad notebook JSON, ...: reported, never fatal to the study
            if attempt < attempts and isinstance(err, RuntimeError) and not _cells_ran(output):
                print(
                    f"{notebook.stem}: the kernel did not start ({err}); launching a fresh one "
                    f"(attempt {attempt + 1} of {attempts})",
                    file=sys.stderr,
                )
                continue
            tries = f" (after {attempt} kernel launches)" if attempt > 1 else ""
            return JobResult(
                notebook.stem,
                "FAILED",
                time.perf_counter() - start,
                f"{type(err).__name__}: {err}{tries}",
                str(output),
            )
        return JobResult(notebook.stem, "ok", time.perf_counter() - start, output=str(output))
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class _NotebookJob:
    notebook: Path
    output: Path
    parameters: Mapping[str, Any]
    kernel: str

    def __call__(self) -> JobResult:
        # The kernel inherits this worker's stderr: send it (e.g. ipykernel's "running over TCP without
        # encryption" warning) to a log next to the executed notebook instead of the user's terminal.
        self.output.parent.mkdir(parents=True, exist_ok=True)
        saved = os.dup(2)
        with open(self.output.with_suffix(".stderr.log"), "w") as log:
            os.dup2(log.fileno(), 2)
            try:
                return execute_notebook(self.notebook, self.output, self.parameters, kernel_name=self.kernel)
            finally:
                os.dup2(saved, 2)
                os.close(saved)


def _call(job: _NotebookJob) -> JobResult:
    return job()


def _last_duration(executed: Path) -> float:
    """Seconds the notebook took at its last execution into ``executed`` (papermill's metadata); 0 if unknown."""
    try:
        return float(json.loads(executed.read_text())["metadata"]["papermill"]["duration"] or 0.0)
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


# ---------------------------------------------------------------------------------------------- the study


def source_fingerprint() -> str:
    """Hash of every source file of the installed dmllab package (any code change re-runs the notebooks)."""
    import hashlib

    import dmllab

    h = hashlib.sha256()
    root = Path(dmllab.__file__).parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _stamp(code: str, job: _NotebookJob, run_keys: Sequence[str]) -> str:
    import hashlib

    parts = [
        code,
        job.notebook.read_bytes().hex() if job.notebook.exists() else "",
        json.dumps(dict(job.parameters), sort_keys=True, default=str),
        *sorted(run_keys),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _up_to_date(job: _NotebookJob, stamp: str, artifact_id: str) -> bool:
    mark = job.output.with_suffix(".stamp")
    csv = paths.results_dir() / f"{artifact_id}.csv"
    return mark.exists() and mark.read_text() == stamp and csv.exists()


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

    @property
    def failed(self) -> bool:
        return any(r.status == "FAILED" for r in self.training + self.notebooks + self.plots) or bool(
            self.plan.errors
        )


def run_study(
    profile: str = "quick",
    *,
    only: str | None = None,
    jobs: int = 1,
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
) -> StudyResult:
    """Plan, train, run the notebooks, draw the figures and build the report (module docstring).

    Raises:
        ValueError: an unknown profile or executor, ``jobs < 1``, or ``only`` matching no artifact.
    """
    from dmllab.pipeline.notebook import notebooks_dir as default_notebooks

    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; valid executors: {', '.join(EXECUTORS)}")
    _quiet()
    start = time.perf_counter()
    phase_s: dict[str, float] = {}
    mark = [start]

    def lap(name: str) -> None:
        now = time.perf_counter()
        phase_s[name], mark[0] = now - mark[0], now

    artifacts = registry.select(only)
    stale = stale_cache_message(paths.cache_dir(), paths.runs_dir())
    if stale:
        say(f"WARNING: {stale}")
    resolved_device = resolve_device(device or "auto")
    plan = make_plan(artifacts, profile, device=resolved_device, data_root=data_root)
    say(
        f"plan: {len(plan.runs)} unique runs, {len(plan.stored)} stored, "
        + (f"{len(plan.diverged)} recorded as diverged, " if plan.diverged else "")
        + f"{len(plan.missing)} to train (estimate {_estimate(plan, jobs)})"
    )
    lap("plan")

    missing = [r.run for r in plan.missing]
    if executor == "slurm":
        training = train_slurm(missing, slurm or SlurmOptions(), progress=progress)
    else:
        training = _run_pool(
            missing, train_run, lambda r: r.key, jobs=jobs, desc=f"train ({profile})", progress=progress
        )
    lap("train")

    nb_dir = Path(notebooks_dir) if notebooks_dir is not None else default_notebooks()
    out_dir = Path(executed_dir) if executed_dir is not None else paths.results_dir() / "executed" / profile
    kernel = ensure_kernel()
    params: dict[str, Any] = {"profile": profile, "train_missing": False, "device": resolved_device}
    if data_root is not None:
        params["data_root"] = str(data_root)
    # A notebook whose inputs are unchanged since its last successful execution (same code, notebook, parameters
    # and stored runs) is skipped, so a re-run with nothing changed costs seconds (``force`` runs every notebook).
    code = source_fingerprint()
    nb_jobs, skipped = [], []
    for a in artifacts:
        job = _NotebookJob(nb_dir / f"{a.id}.ipynb", out_dir / f"{a.id}.ipynb", params, kernel)
        stamp = _stamp(code, job, [r.run.key for r in plan.runs if a.id in r.artifacts])
        if not force and _up_to_date(job, stamp, a.id):
            skipped.append(JobResult(a.id, "ok", 0.0, output=SKIPPED))
        else:
            nb_jobs.append((job, stamp))
    nb_jobs.sort(key=lambda js: -_last_duration(js[0].output))  # longest first: the last one ends sooner
    ran = _run_pool(
        [j for j, _ in nb_jobs],
        _call,
        lambda j: j.notebook.stem,
        jobs=jobs,
        desc=f"notebooks ({profile})",
        progress=progress,
    )
    for (job, stamp), res in zip(nb_jobs, ran):
        if res.status == "ok":
            job.output.with_suffix(".stamp").write_text(stamp)
    notebooks = sorted(skipped + ran, key=lambda r: [a.id for a in artifacts].index(r.name))
    lap("notebooks")

    rerun = {a.paper for a in artifacts if a.id in {r.name for r in ran}}
    papers = [p for p in dict.fromkeys(a.paper for a in artifacts) if (nb_dir / f"plots_{p}.ipynb").exists()]
    plot_jobs = []
    for p in papers:
        job = _NotebookJob(
            nb_dir / f"plots_{p}.ipynb", out_dir / f"plots_{p}.ipynb", {"profile": profile}, kernel
        )
        figures_there = all(
            (paths.profile_figures_dir(profile) / f"{a.id}{f.suffix}.png").exists()
            for a in artifacts
            if a.paper == p
            for f in a.figures
        )
        if force or p in rerun or not figures_there:
            plot_jobs.append(job)
    plots = _run_pool(plot_jobs, _call, lambda j: j.notebook.stem, jobs=jobs, desc="plots", progress=progress)
    lap("plots")
    built = None
    if report:
        from dmllab.pipeline.report import build_report

        built = build_report(profile)
    lap("report")
    return StudyResult(
        plan, tuple(training), tuple(notebooks), tuple(plots), built, time.perf_counter() - start, phase_s
    )


def format_summary(result: StudyResult) -> str:
    """Plain-text summary: one line per notebook and plotting notebook, training totals, then every failure."""
    lines = []
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
