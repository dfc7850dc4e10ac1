"""What SLURM says about its partitions (:func:`partition`) and a study's jobs (:func:`slurm_states`), and the wait
for them (:class:`Watch`: docs/guide/slurm.md, "Waiting"); not submitit's watcher, which waits for ever on a job
neither ``squeue`` nor ``sacct`` knows (an array task cancelled while PENDING).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from dmllab.pipeline.jobs import JobResult

#: SLURM job states (``squeue``/``sacct``) that end a job: one without a result file is a failure.
ENDED = frozenset(
    ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE")
    + ("OUT_OF_MEMORY", "REVOKED")
)
#: Reasons a job is PENDING by the study's own choice (``--array-parallelism``): no warning.
THROTTLED = frozenset(("JobArrayTaskLimit",))
#: Job states of a job that has not ended (``squeue -t``), COMPLETING (a copy being requeued) included.
LIVE = "PD,R,CG,S,CF,RQ,RH,RF,RS,SE,ST,SI,SO,RD"
#: Seconds the study waits for its cancelled jobs to leave the queue (COMPLETING ones, and the copies they
#: requeue) before naming those left.
CANCEL_WAIT_S = 60.0
#: Seconds a result file may lag behind the state that says the job ended (a shared file system's caching).
RESULT_GRACE_S = 15.0
#: Seconds between two looks at the result files; the queue is asked from every 2 s up to every
#: :data:`MAX_QUERY_S` seconds (ever less often while nothing changes).
POLL_S = 1.0
MAX_QUERY_S = 30.0


def slurm(argv: Sequence[str], *, timeout_s: float = 60) -> str:
    """The output of a SLURM client command.

    Raises:
        ValueError: the command is missing (not a SLURM login node) or failed (its last error line).
    """
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise ValueError(
            f"--executor slurm: `{argv[0]}` not found; submit from a SLURM login node (the SLURM client "
            "commands on PATH)"
        ) from None
    except subprocess.TimeoutExpired:
        raise ValueError(f"`{' '.join(argv)}` did not answer within {timeout_s:.0f} s") from None
    if out.returncode:
        lines = (out.stderr or out.stdout).strip().splitlines() or [f"exit status {out.returncode}"]
        raise ValueError(f"`{' '.join(argv[:2])}` failed: {lines[-1].strip()}")
    return out.stdout


@dataclass(frozen=True)
class Partition:
    """A partition as ``sinfo`` lists it: the most CPUs and GPUs of a usable node, its state, ``MaxTime`` in
    minutes (None: unlimited), and its nodes that take no job (``name (state)``)."""

    name: str
    cpus: int
    gpus: int
    state: str = "up"
    max_time_min: int | None = None
    unusable: tuple[str, ...] = ()


#: ``sinfo`` node states (``%t``, without the flag suffix) of a node that takes no new job.
UNUSABLE_NODE = frozenset(
    ("down", "drain", "drng", "drained", "fail", "failg", "futr", "future", "inval", "maint")
)


def _gpus(gres: str) -> int:
    """GPUs in an ``sinfo`` GRES field: ``gpu:4``, ``gpu:a100:2(S:0-1),gpu:v100:2`` -> 4, ``(null)`` -> 0."""
    return sum(int(n) for n in re.findall(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)", gres))


def _minutes(limit: str) -> int | None:
    """An ``sinfo`` time limit in minutes: ``infinite`` -> None, ``30:00`` -> 30, ``2:00:00`` -> 120,
    ``1-12:00:00`` -> 2160."""
    if limit.strip().lower() in ("infinite", "unlimited", "n/a", ""):
        return None
    days, _, rest = limit.strip().rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    h, m, sec = ([0, 0] + parts)[-3:] if len(parts) > 1 else (0, parts[0], 0)
    return int(days or 0) * 1440 + h * 60 + m + sec // 60


def partition(name: str | None) -> Partition:
    """The partition ``name`` (None: the cluster's default) from ``sinfo``.

    Raises:
        ValueError: no such partition (naming the ones there are), no default partition, or no ``sinfo``.
    """
    nodes: dict[str, list[tuple[str, int, int, str]]] = {}
    about: dict[str, tuple[str, int | None]] = {}
    default = None
    for line in slurm(["sinfo", "-h", "-N", "-o", "%P|%c|%G|%a|%l|%N|%t"]).splitlines():
        part, cpus, gres, avail, limit, node, state = (line.split("|") + [""] * 6)[:7]
        if part.endswith("*"):
            part = default = part[:-1]
        cpus_n = int(cpus.strip().rstrip("+") or 0)
        nodes.setdefault(part, []).append((node.strip(), cpus_n, _gpus(gres.strip()), state.strip()))
        about[part] = (avail.strip() or "up", _minutes(limit))
    known = ", ".join(sorted(nodes)) or "none"
    if name is None and default is None:
        raise ValueError(
            f"this SLURM cluster has no default partition; give --partition (sinfo lists: {known})"
        )
    name = name or default
    if name not in nodes:
        raise ValueError(f"SLURM partition {name!r} does not exist (sinfo lists: {known}); give --partition")
    usable = [n for n in nodes[name] if not _unusable(n[3])]
    unusable = tuple(f"{n} ({st})" for n, _, _, st in nodes[name] if _unusable(st))
    state, limit = about[name]
    return Partition(
        name,
        max((c for _, c, _, _ in usable), default=0),
        max((g for _, _, g, _ in usable), default=0),
        state,
        limit,
        unusable,
    )


def _unusable(state: str) -> bool:
    """Whether a node in ``sinfo`` state ``state`` (``idle``, ``down*``, ``drng``) takes no new job: a state of
    :data:`UNUSABLE_NODE` (a node only not responding for now, ``idle*``, may answer again)."""
    return state.rstrip("*~#!%$@^-+").lower() in UNUSABLE_NODE


def _expand(job_id: str) -> list[str]:
    """``12_[1-3,5%2]`` -> ``12_1 12_2 12_3 12_5``; any other id as it is."""
    if "_[" not in job_id:
        return [job_id]
    main, spec = job_id.split("_[", 1)
    ids = []
    for part in spec.rstrip("]").split("%")[0].split(","):
        low, _, high = part.partition("-")
        ids += [f"{main}_{i}" for i in range(int(low), int(high or low) + 1)]
    return ids


@dataclass(frozen=True)
class Snapshot:
    """What SLURM says about a study's jobs at one moment: ``{job id: (state, reason)}`` of the jobs it knows,
    and a line for each source that did not answer (``controller``: ``squeue``; ``accounting``: ``sacct``)."""

    states: Mapping[str, tuple[str, str]]
    down: Mapping[str, str] = field(default_factory=dict)


#: What a source that does not answer is called in the status lines.
SOURCES = {
    "controller": "the SLURM controller (slurmctld, asked by squeue)",
    "accounting": "SLURM's accounting (slurmdbd, asked by sacct)",
}


def slurm_states(name: str, job_ids: Sequence[str]) -> Snapshot:
    """The states of the jobs named ``name`` among ``job_ids`` (``12_3``: task 3 of array 12), from ``squeue``
    where it lists the job, else from ``sacct`` where that says it ended; a job neither knows is absent. A source
    that fails (unreachable, timed out) is named in :attr:`Snapshot.down`; nothing is known without ``squeue``."""
    down: dict[str, str] = {}
    try:
        live = slurm(["squeue", "-h", "-r", "--states=all", f"--name={name}", "-o", "%i|%T|%r"], timeout_s=30)
    except ValueError as err:
        return Snapshot({}, {"controller": str(err)})
    states: dict[str, tuple[str, str]] = {}
    for line in live.splitlines():
        job_id, state, reason = (line.split("|") + ["", ""])[:3]
        states[job_id.strip()] = (state.strip(), reason.strip())
    arrays = sorted({j.split("_")[0] for j in job_ids})
    try:
        ended = slurm(["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(arrays)], timeout_s=30)
    except ValueError as err:  # squeue alone: finished jobs stay there for minutes
        down["accounting"] = str(err)
        ended = ""
    for line in ended.splitlines():
        job_id, _, state = line.partition("|")
        state = state.split(" ")[0]  # "CANCELLED by 0"
        if state in ENDED:  # a pending range of an array may be stale: only squeue says what waits
            for one in _expand(job_id.strip()):
                states.setdefault(one, (state, ""))
    return Snapshot({j: states[j] for j in job_ids if j in states}, down)


def live(name: str) -> list[tuple[str, str]]:
    """``(job id, state)`` of every job named ``name`` that has not ended (:data:`LIVE`), array tasks one by
    one."""
    out = slurm(["squeue", "-h", "-r", f"--name={name}", "-t", LIVE, "-o", "%i|%T"], timeout_s=30)
    return [tuple(ln.split("|")[:2]) for ln in out.split()]  # type: ignore[misc]


def cancel_named(
    name: str, settle_s: float = 0.0, wait_s: float = CANCEL_WAIT_S, say: Callable[[str], None] = print
) -> list[str]:
    """``scancel`` every job named ``name`` that has not ended (COMPLETING and requeued copies too) until
    ``squeue`` lists none, for at most ``wait_s`` seconds; returns the ids cancelled. With ``settle_s``, jobs all
    RUNNING or COMPLETING get that long to end first (a job that just wrote its result is still RUNNING a moment).

    Raises:
        ValueError: ``squeue`` or ``scancel`` failed, or jobs still there after ``wait_s`` (naming them).
    """
    settle = time.monotonic() + settle_s
    while True:
        rows = live(name)
        if not rows:
            return []
        if time.monotonic() >= settle or any(state not in ("RUNNING", "COMPLETING") for _, state in rows):
            break
        time.sleep(POLL_S)
    cancelled: list[str] = []
    deadline, told = time.monotonic() + wait_s, False
    while rows:
        ending = [job_id for job_id, state in rows if state != "COMPLETING"]
        cancelled += [job_id for job_id in ending if job_id not in cancelled]
        if ending:
            with suppress(ValueError):  # "already completing": asked again below
                slurm(["scancel", f"--name={name}"], timeout_s=30)
        elif not told:
            say(f"slurm: waiting for {len(rows)} COMPLETING job(s) to end, to cancel any copy they requeue")
            told = True
        if time.monotonic() >= deadline:
            left = " ".join(f"{j} ({st})" for j, st in rows)
            raise ValueError(
                f"SLURM jobs of {name} still there {wait_s:.0f} s after scancel: {left}; "
                f"`scancel --name={name}` again"
            )
        time.sleep(POLL_S)
        rows = live(name)
    return cancelled


@dataclass
class Watch:
    """Wait for submitit ``jobs`` (one per ``names``), calling ``done(result)`` as each finishes; ``states``
    is :func:`slurm_states`, ``say`` gets the status lines; :attr:`results` (by index) survives an interruption."""

    jobs: Sequence[Any]
    names: Sequence[str]
    states: Callable[[Sequence[str]], Snapshot]
    _: KW_ONLY
    say: Callable[[str], None]
    done: Callable[[JobResult], None]
    status_every_s: float
    pending_warn_s: float
    vanished_s: float
    results: dict[int, JobResult] = field(default_factory=dict, init=False)
    _since: dict[str, tuple[str, float]] = field(default_factory=dict, init=False)  # job id -> (state, since)
    _warned: set[str] = field(default_factory=set, init=False)
    _last: dict[str, tuple[str, str] | None] = field(default_factory=dict, init=False)
    _down: dict[str, tuple[str, float]] = field(default_factory=dict, init=False)  # source -> (error, since)

    def run(self) -> list[JobResult]:
        start = time.monotonic()
        next_query, query_every, next_status = start, 2.0, start + self.status_every_s
        while len(self.results) < len(self.jobs):
            for i in self._waiting():
                if self.jobs[i].paths.result_pickle.exists():
                    self._finish(i, result_of(self.jobs[i], self.names[i]))
            now = time.monotonic()
            if self._waiting() and now >= next_query:
                changed = self._query(now)
                query_every = 2.0 if changed else min(MAX_QUERY_S, query_every * 1.5)
                next_query = now + query_every
            if now >= next_status and self._waiting():
                self.say(self._status(now - start))
                next_status = now + self.status_every_s
            if self._waiting():
                time.sleep(POLL_S)
        return [self.results[i] for i in range(len(self.jobs))]

    def _waiting(self) -> list[int]:
        return [i for i in range(len(self.jobs)) if i not in self.results]

    def _finish(self, i: int, result: JobResult) -> None:
        self.results[i] = result
        self.done(result)

    def _sources(self, down: Mapping[str, str], now: float) -> None:
        """Say once when a source stops answering and once when it answers again (:data:`SOURCES`)."""
        for source, what in SOURCES.items():
            if source in down and source not in self._down:
                self._down[source] = (down[source], now)
                self.say(f"slurm: WARNING: {what} does not answer ({down[source]}); {_BLIND[source]}")
            elif source not in down and source in self._down:
                since = self._down.pop(source)[1]
                self.say(f"slurm: {what} answers again (after {_duration(now - since)})")
            elif source in down:
                self._down[source] = (down[source], self._down[source][1])

    def _query(self, now: float) -> bool:
        waiting = self._waiting()
        snapshot = self.states([self.jobs[i].job_id for i in waiting])
        self._sources(snapshot.down, now)
        if "controller" in snapshot.down:
            return False
        known, blind = snapshot.states, "accounting" in snapshot.down
        changed = False
        for i in waiting:
            job = self.jobs[i]
            state = known.get(job.job_id)
            changed |= self._last.get(job.job_id) != state
            self._last[job.job_id] = state
            label = state[0] if state else "UNKNOWN"
            if self._since.get(job.job_id, ("",))[0] != label:
                self._since[job.job_id] = (label, now)
                self._warned.discard(job.job_id)
            for_s = now - self._since[job.job_id][1]
            if label == "UNKNOWN" and for_s >= self.vanished_s and not blind:
                self._finish(
                    i,
                    self._failure(
                        i,
                        f"known neither to squeue nor to sacct for {for_s:.0f} s "
                        "(cancelled while PENDING, or purged)",
                    ),
                )
            elif label in ENDED and for_s >= RESULT_GRACE_S and not job.paths.result_pickle.exists():
                self._finish(i, self._failure(i, f"ended {label} without a result{_ADVICE.get(label, '')}"))
        late = {}  # job id -> the reason it waits
        for job_id in (self.jobs[i].job_id for i in self._waiting()):
            label, since = self._since.get(job_id, ("", now))
            reason = (self._last.get(job_id) or ("", "?"))[1]
            if label == "PENDING" and now - since >= self.pending_warn_s and reason not in THROTTLED:
                late[job_id] = reason
        late = {j: why for j, why in late.items() if j not in self._warned}
        if late:
            self._warned.update(late)
            reasons = ", ".join(f"{j} ({why})" for j, why in late.items())
            self.say(
                f"slurm: WARNING: {len(late)} job(s) PENDING for more than {_duration(self.pending_warn_s)}: "
                f"{reasons}; `scontrol show job ID` says why (check --partition, --cpus-per-job, --gpus-per-job, "
                "--time-min against the partition's limits)"
            )
        return changed

    def _failure(self, i: int, what: str) -> JobResult:
        job = self.jobs[i]
        log = str(job.paths.stderr) if job.paths.stderr.exists() else None
        return JobResult(self.names[i], "FAILED", 0.0, f"SLURM job {job.job_id} {what}", log)

    def _status(self, elapsed_s: float) -> str:
        """``slurm: after 3.0 min: 2 done, 1 PENDING (Resources), 1 RUNNING``: the last states seen."""
        counts: Counter[str] = Counter()
        why: set[str] = set()  # the reasons of the PENDING jobs
        for i in self._waiting():
            state, reason = self._last.get(self.jobs[i].job_id) or ("UNKNOWN", "")
            counts[state] += 1
            if state == "PENDING" and reason not in ("", "None"):
                why.add(reason)
        parts = [f"{len(self.results)} done"] + [
            f"{n} {state}" + (f" ({', '.join(sorted(why))})" if state == "PENDING" and why else "")
            for state, n in sorted(counts.items())
        ]
        line = f"slurm: after {elapsed_s / 60:.1f} min: {', '.join(parts)}"
        for source, (error, _) in self._down.items():
            line += f"; {SOURCES[source]} does not answer ({error})"
        if "controller" in self._down:
            line += ": the states are the last ones seen"
        return line


#: What to change for a job that ended in this state without a result.
_ADVICE = {
    "TIMEOUT": " (its time limit came before submitit could requeue it: give a longer --time-min)",
    "OUT_OF_MEMORY": " (give more memory per job through the partition, or a smaller batch)",
}
#: What the wait cannot know while a source does not answer.
_BLIND = {
    "controller": "no job state is known until it does (the jobs keep running)",
    "accounting": "a job that squeue no longer lists is not taken for gone until it does",
}


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def result_of(job: Any, name: str) -> JobResult:
    """The :class:`JobResult` of a finished submitit ``job`` (its result file exists): what the job returned, or
    a failure naming the job, its error and its log."""
    try:
        res = job.result()
    except Exception as err:  # the job failed outside train_run (time limit after requeues, a dead node)
        lines = [ln for ln in str(err).splitlines() if ln.strip() and not ln.startswith("-" * 10)]
        tail = " | ".join(lines[-3:])[-300:]
        return JobResult(
            name,
            "FAILED",
            0.0,
            f"SLURM job {job.job_id} failed: {type(err).__name__}: {tail}",
            str(job.paths.stderr),
        )
    if res.status != "ok":
        res = JobResult(
            res.name, res.status, res.wall_s, res.error, str(job.paths.stderr), res.cell, res.info
        )
    return res
