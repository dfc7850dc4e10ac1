"""``--executor slurm``: one SLURM job per run, through submitit, as a job array (as facebookresearch's
DINO/MAE/DETR launchers do). What is checked before submitting, what a job asks for (:func:`resources`), the
submission folder, cancelling, the wait (:class:`~dmllab.pipeline.slurm_queue.Watch`) and requeueing on preemption
(:class:`TrainJob`, :class:`Budget`) are described in docs/guide/slurm.md.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.experiments.artifact import Run
from dmllab.pipeline.jobs import (
    Interrupted,
    JobResult,
    set_threads,
    threads_per_worker,
    train_run,
    usable_cores,
)
from dmllab.pipeline.slurm_queue import (
    RESULT_GRACE_S,
    Partition,
    Snapshot,
    Watch,
    cancel_named,
    live,
    partition,
    slurm,
    slurm_states,
)
from dmllab.profiles import GPU_PROFILES

#: GPUs of a job whose profile needs one (:data:`dmllab.profiles.GPU_PROFILES`), unless ``--gpus-per-job``.
GPU_JOB_GPUS = 1
#: CPUs of a GPU job (its data loading), at most a node's, unless ``--cpus-per-job``.
GPU_JOB_CPUS = 10
#: submitit signals a job (USR2) this many seconds before its time limit, to checkpoint and requeue it.
SIGNAL_DELAY_S = 90
#: submitit takes a signal that comes after ``min(0.8 T, T - TIMEOUT_MARGIN_MIN)`` of a T-minute job for a
#: time-out (at most 3 requeues), one before it for a preemption (requeued without limit).
TIMEOUT_MARGIN_MIN = 10
#: The shortest ``--time-min``: at least the first half of a job tells a preemption from a time-out.
MIN_TIME_MIN = 2 * TIMEOUT_MARGIN_MIN


#: Copies in a row that restart from the epoch the copy before them restarted from (no epoch checkpoint
#: written in between) after which a run's job is not requeued again.
MAX_STALLED = 2
#: Seconds a signalled job waits for its epoch to end (the checkpoint at the signal) before it requeues from
#: its last checkpoint anyway; the rest of :data:`SIGNAL_DELAY_S` is for the requeue.
CHECKPOINT_WAIT_S = 60.0


@dataclass(frozen=True)
class SlurmOptions:
    """``--executor slurm`` settings (the flags of :mod:`dmllab.pipeline.slurm_args`); None: :func:`resources`'s
    default, ``folder`` :func:`dmllab.paths.tmp_dir`, ``cluster`` SLURM ("local": submitit's local executor, the
    tests' stand-in)."""

    partition: str | None = None
    time_min: int = 240
    gpus_per_job: int | None = None
    cpus_per_job: int | None = None
    array_parallelism: int = 32
    max_requeues: int = 10
    checkpoint_wait_s: float = CHECKPOINT_WAIT_S
    folder: str | None = None
    cluster: str | None = None
    status_every_s: float = 60.0
    pending_warn_s: float = 600.0
    vanished_s: float = 60.0

    def check(self) -> None:
        """Raises ValueError (one line naming the flag) for a value no job can run with."""
        if self.time_min < MIN_TIME_MIN:
            raise ValueError(
                f"--time-min {self.time_min} is too short: submitit takes a signal after min(0.8 T, T - "
                f"{TIMEOUT_MARGIN_MIN} min) of a T-minute job for a time-out (and signals {SIGNAL_DELAY_S} s "
                f"before the limit), so a preemption would count as a time-out; give --time-min {MIN_TIME_MIN} "
                "or more"
            )
        for flag, value, low in (
            ("--cpus-per-job", self.cpus_per_job, 1),
            ("--gpus-per-job", self.gpus_per_job, 0),
            ("--array-parallelism", self.array_parallelism, 1),
            ("--max-requeues", self.max_requeues, 0),
        ):
            if value is not None and value < low:
                raise ValueError(f"{flag} must be at least {low}, got {value}")


def resources(options: SlurmOptions, runs: Sequence[Run], part: Partition) -> tuple[int, int]:
    """``(gpus, cpus)`` per job of ``runs`` on ``part``: no GPU unless a run's profile needs one or
    ``--gpus-per-job`` says so; one CPU for a CPU job, :data:`GPU_JOB_CPUS` (at most a node's) for a GPU job.

    Raises:
        ValueError: :func:`fits`, or more GPUs or CPUs than any usable node has (one line naming the flag).
    """
    fits(options, part)
    needs = sorted({r.config.profile for r in runs if r.config.profile in GPU_PROFILES})
    gpus = options.gpus_per_job if options.gpus_per_job is not None else (GPU_JOB_GPUS if needs else 0)
    if gpus > part.gpus:
        why = (
            f"--gpus-per-job {gpus}"
            if options.gpus_per_job is not None
            else f"the {', '.join(needs)} profile's jobs ask for {gpus} GPU(s) each (--gpus-per-job)"
        )
        raise ValueError(
            f"{why}, but no node of partition {part.name!r} has more than {part.gpus} (sinfo); give a GPU "
            "partition with --partition, or --gpus-per-job 0 to train on CPUs"
        )
    cpus = options.cpus_per_job or (min(GPU_JOB_CPUS, part.cpus) if gpus else 1)
    if cpus > part.cpus:
        raise ValueError(
            f"--cpus-per-job {cpus}: no node of partition {part.name!r} has more than {part.cpus} CPUs (sinfo), "
            f"so the jobs would stay PENDING; give --cpus-per-job {part.cpus} or less"
        )
    return gpus, cpus


def fits(options: SlurmOptions, part: Partition) -> None:
    """Raises ValueError (one line naming the flag) where no job of ``options`` can start on ``part``: the
    partition is not up, none of its nodes takes jobs (down, drained, failed), or its ``MaxTime`` is
    below ``--time-min`` (SLURM would keep the jobs PENDING, or cut them below submitit's signal delay)."""
    if part.state != "up":
        raise ValueError(
            f"SLURM partition {part.name!r} is {part.state} (sinfo): it starts no job; give another --partition"
        )
    if part.cpus == 0:
        raise ValueError(
            f"no node of SLURM partition {part.name!r} takes jobs (sinfo: {', '.join(part.unusable)}); give "
            "another --partition"
        )
    if part.max_time_min is not None and part.max_time_min < options.time_min:
        fix = (
            f"give --time-min {part.max_time_min} or less"
            if part.max_time_min >= MIN_TIME_MIN
            else f"it is below the {MIN_TIME_MIN} min a requeued job needs; give another --partition"
        )
        raise ValueError(
            f"--time-min {options.time_min}: SLURM partition {part.name!r} allows at most {part.max_time_min} "
            f"min per job (MaxTime, sinfo); {fix}"
        )


# ----------------------------------------------------------------------------------------------- the job


class JobCancelled(Exception):
    """Raised in a SLURM job's run when the job was cancelled (``scancel``): the run stops, nothing is stored."""


def _job_id() -> str | None:
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID")


def _cancelled(job_id: str, tries: int = 3, wait_s: float = 0.5) -> bool:
    """Whether ``sacct`` says the job was cancelled (a requeue or preemption sends the same SIGTERM); asked a
    few times, as the accounting may lag behind the signal."""
    for attempt in range(tries):
        try:
            state = slurm(["sacct", "-X", "-n", "-P", "-o", "State", "-j", job_id], timeout_s=10).strip()
        except ValueError:
            return False
        if state.startswith("CANCELLED"):
            return True
        if state and not state.startswith("RUNNING"):
            return False
        if attempt < tries - 1:
            time.sleep(wait_s)
    return False


def job_cpus() -> int:
    """The CPUs SLURM gave this job (``SLURM_CPUS_PER_TASK``), else the usable cores."""
    value = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return int(value) if value.isdigit() and int(value) > 0 else usable_cores()


class RequeueBudgetSpent(RuntimeError):
    """A run's job was preempted or ran out of time too often (:class:`Budget`): not requeued again."""


@dataclass(frozen=True)
class Budget:
    """What a run's job may still do: requeues at most ``max_requeues`` (``--max-requeues``), copies without
    progress at most :data:`MAX_STALLED` in a row; ``requeues`` and ``stalled`` count those so far (the copy
    carries them to the next), ``time_min`` is the job's time limit (submitit's time-out test)."""

    max_requeues: int = 10
    time_min: int = 240
    requeues: int = 0
    stalled: int = 0

    def next(self, job_id: str, progress: bool, elapsed_s: float) -> Budget:
        """The budget of the next copy of a job that ran ``elapsed_s`` seconds, with ``progress`` (an epoch
        checkpoint written) or not; raises :class:`RequeueBudgetSpent` (one line) when it is spent."""
        spent = Budget(
            self.max_requeues, self.time_min, self.requeues + 1, 0 if progress else self.stalled + 1
        )
        limit = self.time_min * 60
        late = elapsed_s >= min(0.8 * limit, limit - TIMEOUT_MARGIN_MIN * 60)  # submitit's time-out test
        if spent.stalled >= MAX_STALLED:
            why = "ran out of time" if late else "were preempted"
            what = f"{spent.stalled} copies in a row {why} before one more epoch was checkpointed"
        elif spent.requeues > self.max_requeues:
            why = "ran out of time" if late else "was preempted"
            what = f"it {why} after {self.requeues} requeue(s) (at most {self.max_requeues}: --max-requeues)"
        else:
            return spent
        raise RequeueBudgetSpent(
            f"SLURM job {job_id} not requeued again: {what}; its last epoch checkpoint is kept (the next study "
            f"resumes from it); give a longer --time-min (now {self.time_min} min), a partition that preempts "
            "less often, or a higher --max-requeues"
        )


class TrainJob:
    """The callable of one SLURM job: :func:`train_run` of its run, requeued when preempted or out of time while
    its :class:`Budget` lasts. On submitit's USR2 it writes its epoch checkpoint at the end of the current epoch
    (:meth:`EpochCheckpoint.request`) and requeues (from its last checkpoint after ``wait_s`` seconds without an
    epoch end). submitit requeues a callable with a ``checkpoint`` method (``submitit.helpers.Checkpointable``'s
    protocol); a plain class keeps submitit out of every study that does not use SLURM."""

    def __init__(self, budget: Budget | None = None, wait_s: float = CHECKPOINT_WAIT_S) -> None:
        self.budget = budget or Budget()
        self.wait_s = wait_s
        self._start, self._written = time.monotonic(), 0

    def __call__(self, run: Run) -> JobResult:
        from dmllab.training.callbacks import EpochCheckpoint

        self._start, self._written = time.monotonic(), EpochCheckpoint.written
        threads = threads_per_worker(run.config.run.device, 1, cores=job_cpus())
        set_threads(threads)
        job_id = _job_id()
        if job_id:
            _on_cancel(job_id)
            _checkpoint_first(self.wait_s)
        copy = f", copy {self.budget.requeues + 1}" if self.budget.requeues else ""
        print(f"dmllab: training {run.key} with {threads} torch thread(s){copy}", file=sys.stderr, flush=True)
        return train_run(run)

    def checkpoint(self, run: Run) -> Any:
        """The resubmission of this job: a fresh :class:`TrainJob` with the next :class:`Budget` (raises
        :class:`RequeueBudgetSpent`, then the job's result, when it is spent)."""
        import submitit

        from dmllab.training.callbacks import EpochCheckpoint

        progress = EpochCheckpoint.written > self._written
        budget = self.budget.next(_job_id() or "?", progress, time.monotonic() - self._start)
        return submitit.helpers.DelayedSubmission(TrainJob(budget, self.wait_s), run)


def _on_cancel(job_id: str) -> None:
    """A SIGTERM of a cancelled job stops the run (:class:`JobCancelled`); any other goes to submitit's handler."""
    bypass = signal.getsignal(signal.SIGTERM)  # submitit's: a preempted job must live to requeue

    def on_sigterm(signum: int, frame: Any) -> None:
        if _cancelled(job_id):
            raise JobCancelled(f"SLURM job {job_id} was cancelled (scancel): the run stopped unfinished")
        if callable(bypass):
            bypass(signum, frame)

    signal.signal(signal.SIGTERM, on_sigterm)


def _checkpoint_first(wait_s: float) -> None:
    """submitit's USR2 handler (checkpoint and requeue) runs after the epoch checkpoint at the end of the
    current epoch, or ``wait_s`` seconds after the signal (SIGALRM), whichever comes first; once. A signal that
    comes again meanwhile (``scancel --signal`` delivers it more than once) changes nothing."""
    from dmllab.training.callbacks import EpochCheckpoint

    requeue = signal.getsignal(signal.SIGUSR2)
    if not callable(requeue) or wait_s <= 0:
        return
    state = {"asked": False, "done": False}

    def now(epoch: int | None = None) -> None:
        if state["done"]:
            return
        state["done"] = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        if epoch is not None:
            print(
                f"dmllab: epoch checkpoint written at the signal (epoch {epoch})", file=sys.stderr, flush=True
            )
        requeue(signal.SIGUSR2, None)

    def on_usr2(signum: int, frame: Any) -> None:
        if not state["asked"]:
            state["asked"] = True
            signal.signal(signal.SIGALRM, lambda *_: now())
            signal.setitimer(signal.ITIMER_REAL, wait_s)
            EpochCheckpoint.request(now)

    signal.signal(signal.SIGUSR2, on_usr2)


# ------------------------------------------------------------------------------------------ the executor


def _parameters(o: SlurmOptions, runs: Sequence[Run], name: str, cluster: str) -> tuple[dict[str, Any], str]:
    """submitit's parameters for the jobs of ``runs`` and a line saying where they go (:func:`partition`,
    :func:`resources`: the checks before submitting)."""
    params: dict[str, Any] = {"timeout_min": o.time_min, "name": name}
    if cluster != "slurm":
        return params, "submitit's local executor"
    part = partition(o.partition)
    gpus, cpus = resources(o, runs, part)
    params.update(
        slurm_partition=part.name,
        tasks_per_node=1,
        cpus_per_task=cpus,
        slurm_array_parallelism=o.array_parallelism,
        slurm_signal_delay_s=SIGNAL_DELAY_S,
    )
    if gpus:
        params["gpus_per_node"] = gpus
    return params, f"partition {part.name}, {cpus} CPU(s) and {gpus} GPU(s) per job, {o.time_min} min each"


def _remove(folder: Path, scratch: bool) -> None:
    """Remove a submission folder and, where it is in the scratch folder (``scratch``), that too when empty."""
    shutil.rmtree(folder, ignore_errors=True)
    if scratch:
        with suppress(OSError):
            folder.parent.rmdir()


def keep_logs(results: Sequence[JobResult], folder: Path, stamp: str) -> list[JobResult]:
    """``results`` with the log of each failure (in the submission ``folder``, about to be removed) moved to
    ``<results>/logs/slurm-<stamp>/`` (its ``.err`` and ``.out``), the result pointing there."""
    kept = []
    for res in results:
        log = Path(res.output) if res.output else None
        if res.status == "ok" or log is None or folder not in log.parents or not log.exists():
            kept.append(res)
            continue
        target = paths.results_dir() / "logs" / f"slurm-{stamp}"
        target.mkdir(parents=True, exist_ok=True)
        for one in (log, log.with_suffix(".out")):
            if one.is_file():
                shutil.move(str(one), target / one.name)
        kept.append(dataclasses.replace(res, output=str(target / log.name)))
    return kept


#: Seconds after its creation a submission folder without any job left in the queue is taken for one whose
#: study was killed (``kill -9``, a lost login node) and removed by the next study submitting there.
STALE_S = 600.0


def sweep(base: Path) -> list[Path]:
    """Remove the submission folders in ``base`` of studies that did not end (killed): older than
    :data:`STALE_S` with no job of their name (``dmllab-<stamp>``) left in the queue; returns them. Nothing is
    removed while ``squeue`` does not answer."""
    gone = []
    for folder in sorted(base.glob("slurm-*")) if base.is_dir() else []:
        try:
            old = time.time() - folder.stat().st_mtime >= STALE_S
            if old and folder.is_dir() and not folder.is_symlink() and not live(f"dmllab-{folder.name[6:]}"):
                shutil.rmtree(folder, ignore_errors=True)
                gone.append(folder)
        except (OSError, ValueError):
            break
    return gone


@dataclass
class SlurmExecutor:
    """One submitit job per run, as a job array (module docstring); ``say`` gets the status lines."""

    options: SlurmOptions | None = None
    _: KW_ONLY
    progress: bool = True
    say: Callable[[str], None] = print

    def __post_init__(self) -> None:
        self.options = self.options or SlurmOptions()

    def submit(self, runs: Sequence[Run], *, desc: str = "train (slurm)") -> list[JobResult]:
        """Train ``runs``, one job each; one :class:`JobResult` per run, in order. However it ends, no job is left
        queued and the folder is removed (the failures' logs kept: :func:`keep_logs`).

        Raises:
            ValueError: an option no job can run with, or ``sbatch`` refused the jobs (one line).
            Interrupted: on Ctrl-C or SIGTERM, after cancelling every job, with the results collected so far.
        """
        if not runs:
            return []
        o = self.options
        o.check()
        cluster = o.cluster or "slurm"
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
        name = f"dmllab-{stamp}"
        params, where = _parameters(o, runs, name, cluster)
        folder = Path(o.folder or paths.tmp_dir()) / f"slurm-{stamp}"
        if cluster == "slurm":
            for stale in sweep(folder.parent):
                self.say(f"slurm: removed {stale} (its study did not end; none of its jobs is queued)")
        try:
            jobs = self._submit(runs, folder, cluster, name, params, where)
            return keep_logs(self._wait(runs, jobs, cluster, name, desc), folder, stamp)
        except Interrupted as stop:
            raise Interrupted(stop.signum, keep_logs(stop.finished, folder, stamp)) from None
        finally:
            _remove(folder, o.folder is None)

    def _submit(
        self, runs: Sequence[Run], folder: Path, cluster: str, name: str, params: dict[str, Any], where: str
    ) -> list[Any]:
        """Submit the array; the submitit jobs."""
        import submitit

        o = self.options
        try:
            executor = submitit.AutoExecutor(
                folder=str(folder / "%j"), cluster=cluster, slurm_max_num_timeout=o.max_requeues + 1
            )
            executor.update_parameters(**params)
            job = TrainJob(Budget(o.max_requeues, o.time_min), o.checkpoint_wait_s)
            jobs = executor.map_array(job, list(runs))
        except KeyboardInterrupt as err:  # Ctrl-C while sbatch ran: the array may exist
            self._cancel(cluster, name, [])
            raise Interrupted(getattr(err, "signum", signal.SIGINT)) from None
        except Exception as err:
            text = " ".join(str(err).split()) or type(err).__name__
            raise ValueError(f"SLURM refused the jobs ({where}): {text}") from None
        self.say(
            f"slurm: {len(jobs)} run(s) submitted as {name} (job {jobs[0].job_id.split('_')[0]}; {where}); "
            f"logs in {folder}"
        )
        return jobs

    def _wait(
        self, runs: Sequence[Run], jobs: list[Any], cluster: str, name: str, desc: str
    ) -> list[JobResult]:
        """The results of ``jobs`` (:class:`Watch`); every job of the submission cancelled afterwards, however
        the wait ends."""
        from tqdm.auto import tqdm

        o = self.options
        bar = tqdm(total=len(jobs), desc=desc, unit="run", disable=not self.progress)

        def done(res: JobResult) -> None:
            bar.set_postfix_str(f"{res.name[:40]}: {res.status}")
            bar.update(1)

        def states(job_ids: Sequence[str]) -> Snapshot:
            if cluster == "slurm":
                return slurm_states(name, job_ids)
            return Snapshot(
                {j.job_id: ("COMPLETED" if j.done() else "RUNNING", "") for j in jobs if j.job_id in job_ids}
            )

        watch = Watch(
            jobs,
            [r.key for r in runs],
            states,
            say=lambda line: self._say(bar, line),
            done=done,
            status_every_s=o.status_every_s,
            pending_warn_s=o.pending_warn_s,
            vanished_s=o.vanished_s,
        )
        try:
            results = watch.run()
        except BaseException as err:
            bar.close()
            self._cancel(cluster, name, jobs)
            if not isinstance(err, KeyboardInterrupt):
                raise
            signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
            raise Interrupted(signum, [watch.results[i] for i in sorted(watch.results)]) from None
        bar.close()
        leftover = self._cancel(cluster, name, jobs, settle_s=RESULT_GRACE_S)
        if leftover:
            self.say(
                f"slurm: cancelled {len(leftover)} job(s) still queued after their result: {' '.join(leftover)}"
            )
        return results

    def _say(self, bar: Any, line: str) -> None:
        with bar.external_write_mode():
            self.say(line)

    def _cancel(self, cluster: str, name: str, jobs: Sequence[Any], settle_s: float = 0.0) -> list[str]:
        """Cancel every job of this submission that has not ended (:func:`cancel_named`); returns their ids. A
        cancellation that fails is said, naming the jobs' name, never raised."""
        if cluster == "slurm":
            try:
                return cancel_named(name, settle_s, say=self.say)
            except ValueError as err:
                self.say(f"slurm: WARNING: could not cancel the jobs of {name}: {err}")
                return []
        left = [j for j in jobs if not j.done()]
        for job in left:
            job.cancel(check=False)
        return [j.job_id for j in left]
