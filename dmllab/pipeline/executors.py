"""Where the study's jobs run, behind one ``submit(runs)``, and how they stop.

* :class:`LocalExecutor`: a pool of spawned worker processes; each dies with the study, even on ``kill -9``
  (``PR_SET_PDEATHSIG``), and ignores the terminal's Ctrl-C (the study stops its workers itself).
* :class:`SlurmExecutor`: one submitit job per run, as a job array (as facebookresearch's DINO/MAE/DETR launchers
  do). A job preempted or out of time requeues itself (:class:`TrainJob`) and its run resumes from its last epoch
  checkpoint.

Workers and threads: ``jobs="auto"`` is one worker per usable core (``os.sched_getaffinity``) on the CPU and one
worker on an accelerator (:func:`resolve_jobs`). A CPU run always uses one torch thread, whatever the machine:
CPU kernels reduce in a thread-count-dependent order, so a run's numbers depend on its thread count
(:mod:`dmllab.training.trainer`), and the committed results were trained with one thread per run. A worker on an
accelerator gets its share of the usable cores (:func:`threads_per_worker`).

Stopping (:func:`stop_on_signals`): SIGINT (Ctrl-C, which the terminal sends to the whole foreground process
group) and SIGTERM raise :class:`Interrupted` in the study process; the executor cancels what has not started,
terminates every worker with its children (notebook kernels included) and raises :class:`Interrupted` with the
jobs that finished.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.experiments.artifact import Run

SKIPPED = "up to date (skipped)"  # JobResult.output of a notebook whose stamp is current
#: torch threads of a run on the CPU (module docstring).
CPU_THREADS_PER_RUN = 1
#: Seconds a worker and its children get to exit after SIGTERM before SIGKILL.
STOP_GRACE_S = 1.0


@dataclass(frozen=True)
class JobResult:
    """Outcome of one training run or notebook."""

    name: str
    status: str  # "ok" | "diverged" (a non-finite run: an outcome, recorded in the store) | "FAILED"
    wall_s: float
    error: str = ""
    output: str | None = None  # executed notebook or the job's log
    cell: int | None = None
    # A fast dev run's measurements (:func:`train_run`): steps, peak memory, what it shrank to fit the data.
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cached(self) -> bool:
        """A notebook skipped because its inputs are unchanged since its last successful execution."""
        return self.output == SKIPPED


class Interrupted(KeyboardInterrupt):
    """The study was asked to stop (SIGINT or SIGTERM); ``finished`` holds the jobs of the interrupted step
    that finished before."""

    def __init__(self, signum: int = signal.SIGINT, finished: Sequence[JobResult] = ()) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.finished = tuple(finished)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread (the first one only:
    a second signal while the study stops is ignored, the stop itself is bounded). Elsewhere than in the main
    thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = [False]

    def handler(signum: int, frame: Any) -> None:
        if not stopping[0]:
            stopping[0] = True
            raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# --------------------------------------------------------------------------------------------- workers


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def resolve_jobs(jobs: int | str, device: str) -> int:
    """The number of local workers: ``"auto"`` is :func:`usable_cores` on the CPU and 1 on an accelerator (one
    device); an int (or its text) is taken as given.

    Raises:
        ValueError: anything but ``"auto"`` or a positive integer (one line naming ``--jobs``).
    """
    if jobs == "auto":
        return usable_cores() if str(device).split(":")[0] == "cpu" else 1
    n = int(jobs) if isinstance(jobs, str) and jobs.strip().isdigit() else jobs
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"--jobs must be 'auto' or a positive integer, got {jobs!r}")
    return n


def threads_per_worker(device: str, workers: int) -> int:
    """torch threads of each worker: :data:`CPU_THREADS_PER_RUN` on the CPU; on an accelerator the worker's share
    of the usable cores (at most ``OMP_NUM_THREADS`` where the user set it)."""
    if str(device).split(":")[0] == "cpu":
        return CPU_THREADS_PER_RUN
    threads = max(1, usable_cores() // max(1, workers))
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # an explicit user limit is kept
        threads = max(1, min(threads, int(os.environ["OMP_NUM_THREADS"])))
    return threads


def _die_with_parent() -> None:
    """Linux: ask the kernel to SIGKILL this process when its parent dies (kill -9 of the study included)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with suppress(OSError):  # no glibc: the pool still shuts down with a live parent
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)


def quiet() -> None:
    """Keep kernel and library noise (e.g. jupyter's "running over TCP without encryption") off the terminal."""
    for name in ("traitlets", "papermill", "jupyter_client", "nbclient", "asyncio"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*without encryption.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    # multiprocessing's resource tracker warns of the semaphores of workers the study terminated (and frees them)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning,ignore:resource_tracker:UserWarning")


def _worker_init(threads: int) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the study stops its workers (module docstring)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    quiet()
    import torch

    torch.set_num_threads(threads)


class PeakMemory:
    """The peak memory of what runs inside the block: CPU RSS of this process and its children (DataLoader
    workers), sampled every ``interval_s`` by a thread, and on CUDA ``torch.cuda.max_memory_allocated`` (exact).
    ``info()`` gives ``{"peak_rss_mb": ..., "cuda_max_allocated_mb": ...}`` (the latter on CUDA only)."""

    def __init__(self, device: str, interval_s: float = 0.05) -> None:
        self.cuda = str(device).startswith("cuda")
        self.interval_s = interval_s
        self.peak_rss = 0
        self._stop = threading.Event()

    def _rss(self) -> int:
        import psutil

        me = psutil.Process()
        total = me.memory_info().rss
        for child in me.children(recursive=True):
            with suppress(psutil.Error):
                total += child.memory_info().rss
        return total

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            with suppress(Exception):
                self.peak_rss = max(self.peak_rss, self._rss())

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
        self.peak_rss = self._rss()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        with suppress(Exception):
            self.peak_rss = max(self.peak_rss, self._rss())

    def info(self) -> dict[str, float]:
        out = {"peak_rss_mb": self.peak_rss / 2**20}
        if self.cuda:
            import torch

            out["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
        return out


def train_run(run: Run) -> JobResult:
    """Train one run through the run store (a stored run is returned at once); never raises. A fast dev run
    (``run.fast_dev_run``) also reports its steps, peak memory (:class:`PeakMemory`) and what it shrank to fit the
    data in ``JobResult.info``."""
    from dmllab.metrics import DegenerateEmbeddingError as NonFiniteEmbeddingError  # collapsed too
    from dmllab.training import NonFiniteLossError
    from dmllab.training.store import run as train

    start = time.perf_counter()
    fast = run.config.run.fast_dev_run > 0
    memory = PeakMemory(run.config.run.device) if fast else None
    info: dict[str, Any] = {}
    try:
        with memory if memory is not None else nullcontext():
            result = train(run.config, seed=run.seed, progress=False)
        info = dict(result.extra.get("fast_dev", {}), cached=result.cached)
    except (NonFiniteLossError, NonFiniteEmbeddingError) as err:  # recorded by the store
        return JobResult(run.key, "diverged", time.perf_counter() - start, f"{type(err).__name__}: {err}")
    except Exception as err:
        error = f"{type(err).__name__}: {err}"
        return JobResult(run.key, "FAILED", time.perf_counter() - start, error, info=_memory(memory))
    return JobResult(run.key, "ok", time.perf_counter() - start, info={**info, **_memory(memory)})


def _memory(memory: PeakMemory | None) -> dict[str, float]:
    return memory.info() if memory is not None else {}


def terminate_trees(pids: Sequence[int], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the processes ``pids`` and all their descendants (found before any is signalled, so that none is
    lost to re-parenting), then SIGKILL what is still alive after ``grace_s`` seconds."""
    import psutil

    procs: list[psutil.Process] = []
    for pid in pids:
        with suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
    for p in procs:
        with suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=grace_s)


class LocalExecutor:
    """Jobs in a pool of ``workers`` spawned processes (a fresh interpreter each: nothing leaks from the study
    process), each with ``threads`` torch threads (:func:`threads_per_worker`).

    Every call runs its items to completion and returns one :class:`JobResult` per item, in order; a failing
    item, or a worker that died (killed, out of memory), is reported, never raised. On :class:`Interrupted` (or a
    KeyboardInterrupt) the pool is stopped (module docstring) and :class:`Interrupted` is raised with the
    results that finished.
    """

    def __init__(self, workers: int, *, threads: int = CPU_THREADS_PER_RUN, progress: bool = True) -> None:
        self.workers = max(1, int(workers))
        self.threads = threads
        self.progress = progress

    def submit(self, runs: Sequence[Run], *, desc: str = "train") -> list[JobResult]:
        """Train ``runs`` (:func:`train_run`)."""
        return self.map(train_run, runs, lambda r: r.key, desc=desc)

    def map(
        self, fn: Callable[[Any], JobResult], items: Sequence[Any], name: Callable[[Any], str], *, desc: str
    ) -> list[JobResult]:
        """``fn(item)`` for every item (``fn`` and the items must pickle); ``name(item)`` names a failure."""
        from tqdm.auto import tqdm

        if not items:
            return []
        results: dict[int, JobResult] = {}
        bar = tqdm(total=len(items), desc=desc, unit="job", disable=not self.progress)
        pool = ProcessPoolExecutor(
            max_workers=min(self.workers, len(items)),
            mp_context=get_context("spawn"),
            initializer=_worker_init,
            initargs=(self.threads,),
        )
        try:
            futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    res = fut.result()
                except Exception as err:  # the worker process died: report, go on
                    res = JobResult(
                        name(items[i]), "FAILED", 0.0, f"worker process failed: {type(err).__name__}: {err}"
                    )
                results[i] = res
                bar.set_postfix_str(f"{res.name[:40]}: {res.status}")
                bar.update(1)
        except KeyboardInterrupt as err:  # cancel what has not started, stop every worker and its children
            workers = list(pool._processes or {})
            pool.shutdown(wait=False, cancel_futures=True)
            terminate_trees(workers)
            signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
            raise Interrupted(signum, [results[i] for i in sorted(results)]) from None
        finally:
            bar.close()
        pool.shutdown(wait=True)
        return [results[i] for i in range(len(items))]


# ------------------------------------------------------------------------------------------------- SLURM


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


class TrainJob:
    """The callable of one SLURM job: :func:`train_run` of its run, requeued when preempted or out of time.

    submitit requeues a job whose callable has a ``checkpoint`` method (``submitit/core/job_environment.py``,
    ``checkpoint_and_try_requeue``), the protocol of ``submitit.helpers.Checkpointable``; a plain class with that
    method keeps submitit out of every ``dmllab study`` that does not use SLURM.
    """

    def __call__(self, run: Run) -> JobResult:
        return train_run(run)

    def checkpoint(self, run: Run) -> Any:
        """The resubmission of this job (``submitit.helpers.DelayedSubmission`` of a fresh :class:`TrainJob`)."""
        import submitit

        return submitit.helpers.DelayedSubmission(TrainJob(), run)


class SlurmExecutor:
    """One submitit job per run, as a job array; waits for them and reports failures with their log path. On
    :class:`Interrupted` the jobs not finished are cancelled."""

    def __init__(self, options: SlurmOptions | None = None, *, progress: bool = True) -> None:
        self.options = options or SlurmOptions()
        self.progress = progress

    def submit(self, runs: Sequence[Run], *, desc: str = "train (slurm)") -> list[JobResult]:
        import submitit
        from tqdm.auto import tqdm

        if not runs:
            return []
        o = self.options
        folder = Path(o.folder or paths.results_dir() / "slurm" / time.strftime("%Y%m%d-%H%M%S"))
        executor = submitit.AutoExecutor(folder=str(folder / "%j"), cluster=o.cluster)
        params: dict[str, Any] = {"timeout_min": o.time_min, "name": "dmllab"}
        if executor.cluster == "slurm":
            params.update(
                slurm_partition=o.partition,
                gpus_per_node=o.gpus_per_job,
                tasks_per_node=1,
                cpus_per_task=o.cpus_per_job,
                slurm_array_parallelism=o.array_parallelism,
            )
            params = {k: v for k, v in params.items() if v is not None}
        executor.update_parameters(**params)
        jobs = executor.map_array(TrainJob(), list(runs))
        results: list[JobResult] = []
        bar = tqdm(total=len(jobs), desc=desc, unit="run", disable=not self.progress)
        try:
            for run, job in zip(runs, jobs):
                try:
                    res = job.result()
                except Exception as err:  # the job itself failed (time limit after requeues, node failure)
                    error = f"job {job.job_id} failed: {type(err).__name__}: {str(err)[-300:]}"
                    res = JobResult(run.key, "FAILED", 0.0, error)
                if res.status != "ok":
                    res = JobResult(res.name, res.status, res.wall_s, res.error, str(job.paths.stderr))
                results.append(res)
                bar.update(1)
        except KeyboardInterrupt as err:
            for job in jobs[len(results) :]:
                job.cancel(check=False)
            signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
            raise Interrupted(signum, results) from None
        finally:
            bar.close()
        return results
