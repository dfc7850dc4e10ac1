"""A study's jobs: :class:`JobResult`, how many run at once on how many threads (:func:`resolve_jobs`,
:func:`threads_per_worker`), :func:`train_run` and :func:`stop_on_signals`; :mod:`dmllab.pipeline.executors` runs them.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from typing import Any

from dmllab.experiments.artifact import Run
from dmllab.validation import usable_cores

SKIPPED = "up to date (skipped)"  # JobResult.output of a notebook whose stamp is current
#: torch threads of a run on the CPU: one, so that its numbers do not depend on the machine.
CPU_THREADS_PER_RUN = 1


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
    """Within the block, the first SIGINT or SIGTERM raises :class:`Interrupted` in the main thread (a second one
    while the study stops is ignored); outside the main thread nothing."""
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


def threads_per_worker(device: str, workers: int, cores: int | None = None) -> int:
    """torch threads of each worker: :data:`CPU_THREADS_PER_RUN` on the CPU; on an accelerator the worker's share
    of ``cores`` (default :func:`usable_cores`; a SLURM job passes its allocated CPUs), at most
    ``OMP_NUM_THREADS`` where the user set it."""
    if str(device).split(":")[0] == "cpu":
        return CPU_THREADS_PER_RUN
    threads = max(1, (cores or usable_cores()) // max(1, workers))
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # an explicit user limit is kept
        threads = max(1, min(threads, int(os.environ["OMP_NUM_THREADS"])))
    return threads


def set_threads(threads: int) -> None:
    """Run this process's torch (and OpenMP/MKL children) on ``threads`` threads: every training process calls
    it before its first run (a local worker, a SLURM job)."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)


def quiet() -> None:
    """Keep kernel and library noise (e.g. jupyter's "running over TCP without encryption") off the terminal."""
    for name in ("traitlets", "papermill", "jupyter_client", "nbclient", "asyncio"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*without encryption.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    # multiprocessing's resource tracker warns of the semaphores of workers the study terminated (and frees them)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning,ignore:resource_tracker:UserWarning")


@contextmanager
def peak_memory(device: str, into: dict[str, float], interval_s: float = 0.05) -> Iterator[None]:
    """Puts in ``into``, when the block ends, the peak memory of what ran inside it: ``peak_rss_mb``, the CPU RSS
    of this process and its children (DataLoader workers) sampled every ``interval_s`` by a thread, and on CUDA
    ``cuda_max_allocated_mb`` (``torch.cuda.max_memory_allocated``, exact)."""
    import psutil

    me, cuda, stop, peak = psutil.Process(), str(device).startswith("cuda"), threading.Event(), [0]

    def sample() -> None:
        with suppress(Exception):
            total = me.memory_info().rss
            for child in me.children(recursive=True):
                with suppress(psutil.Error):
                    total += child.memory_info().rss
            peak[0] = max(peak[0], total)

    if cuda:
        import torch

        torch.cuda.reset_peak_memory_stats()
    sample()

    def watch() -> None:
        while not stop.wait(interval_s):
            sample()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sample()
        into["peak_rss_mb"] = peak[0] / 2**20
        if cuda:
            into["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20


def train_run(run: Run) -> JobResult:
    """Train one run through the run store (a stored one returns at once); never raises. A fast dev run's
    ``JobResult.info`` has its steps, :func:`peak_memory` and what it shrank to fit the data."""
    from dmllab.metrics import DegenerateEmbeddingError as NonFiniteEmbeddingError  # collapsed too
    from dmllab.training import NonFiniteLossError
    from dmllab.training.store import run as train

    start = time.perf_counter()
    fast = run.config.run.fast_dev_run > 0
    info: dict[str, Any] = {}
    memory: dict[str, float] = {}
    try:
        with peak_memory(run.config.run.device, memory) if fast else nullcontext():
            result = train(run.config, seed=run.seed, progress=False)
        info = dict(result.extra.get("fast_dev", {}), cached=result.cached)
    except (NonFiniteLossError, NonFiniteEmbeddingError) as err:  # recorded by the store
        return JobResult(run.key, "diverged", time.perf_counter() - start, f"{type(err).__name__}: {err}")
    except Exception as err:
        error = f"{type(err).__name__}: {err}"
        return JobResult(_key(run), "FAILED", time.perf_counter() - start, error, info=memory)
    return JobResult(run.key, "ok", time.perf_counter() - start, info={**info, **memory})


def _key(run: Run) -> str:
    """``run.key``, or a stand-in naming the run when its config is too broken to be keyed (a job never raises)."""
    try:
        return run.key
    except Exception:  # noqa: BLE001 - the job's own error is reported; this only names it
        return f"{run.config.method}/{run.config.dataset}/seed{run.seed} (no key)"
