"""Where the study's jobs (:mod:`dmllab.pipeline.jobs`) run, behind one ``submit(runs)``: :class:`LocalExecutor`
(a process pool) or :class:`~dmllab.pipeline.slurm.SlurmExecutor`. On :class:`~dmllab.pipeline.jobs.Interrupted`
an executor cancels what has not started, stops every worker with its children (notebook kernels included) and
raises :class:`~dmllab.pipeline.jobs.Interrupted` with the jobs that finished.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import suppress
from multiprocessing import get_context
from typing import Any

from dmllab.experiments.artifact import Run
from dmllab.pipeline.jobs import CPU_THREADS_PER_RUN, Interrupted, JobResult, quiet, set_threads, train_run

#: Seconds a worker and its children get to exit after SIGTERM before SIGKILL.
STOP_GRACE_S = 1.0


def _die_with_parent() -> None:
    """Linux: ask the kernel to SIGKILL this process when its parent dies (kill -9 of the study included)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with suppress(OSError):  # no glibc: the pool still shuts down with a live parent
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)


def _worker_init(threads: int) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the study stops its workers (module docstring)
    quiet()
    set_threads(threads)


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
    process), each with ``threads`` torch threads (:func:`dmllab.pipeline.jobs.threads_per_worker`).

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
