"""The study's plan: the union of the selected artifacts' runs (:class:`~dmllab.experiments.Run`), placed where the
study runs them (:func:`dmllab.experiments.lookup.planned_runs` with :func:`execution_parameters`) and
de-duplicated by the run store's key (two artifacts that need the same config and seed share one run), with how many
are already stored and an estimated cost from stored wall times of the same device kind, else the profile's typical
run on that device (:func:`make_plan`; ``dmllab study --plan`` prints :func:`format_plan` and stops).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dmllab import paths
from dmllab.experiments.artifact import Artifact, Run
from dmllab.experiments.lookup import planned_runs
from dmllab.fileio import duration
from dmllab.profiles import PROFILES, typical_run_s


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
    typical_s: float | None = None  # the typical run (dmllab.profiles.typical_run_s) an estimate fell back to
    device: str = "cpu"  # where the runs train (resolved)
    data_root: str | None = None
    fast_dev_run: int = 0  # N > 0: a fast dev run (execution_parameters)
    pretrained: bool | None = None  # False: no pre-trained weights (--pretrained none)
    check_counts: bool = True  # False: --no-counts
    seeds: int | None = None  # N: seeds 0..N-1 for every artifact with several seeds (--seeds)

    def parameters(self, artifact: Artifact) -> dict[str, Any]:
        """:func:`execution_parameters` of ``artifact`` in this plan (what its notebook receives)."""
        return execution_parameters(
            artifact,
            self.profile,
            device=self.device,
            data_root=self.data_root,
            fast_dev_run=self.fast_dev_run,
            pretrained=self.pretrained,
            check_counts=self.check_counts,
            seeds=self.seeds,
        )

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


def _kind(device: str) -> str:
    return str(device).split(":", 1)[0]


def _stored_wall_times() -> dict[str, list[float]]:
    """``method|dataset|profile|device kind -> stored wall times`` over the whole run store (the estimate's basis:
    a CPU run's time says nothing of a GPU run's)."""
    out: dict[str, list[float]] = {}
    for metrics in paths.runs_dir().glob("*/seed*/metrics.json"):
        try:
            data = json.loads(metrics.read_text())
            key = "|".join(str(data.get(k, "")) for k in ("method", "dataset", "profile"))
            out.setdefault(f"{key}|{_kind(data.get('device', ''))}", []).append(float(data["wall_time_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def check_seeds(seeds: int | None) -> None:
    """Raise ValueError unless ``seeds`` (``--seeds``) is None or an integer of at least 2 (an interval needs
    two seeds)."""
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 2):
        raise ValueError(f"--seeds must be an integer >= 2 (an interval needs two seeds), got {seeds!r}")


def execution_parameters(
    artifact: Artifact,
    profile: str,
    *,
    device: str,
    data_root: str | None = None,
    fast_dev_run: int = 0,
    pretrained: bool | None = None,
    check_counts: bool = True,
    seeds: int | None = None,
) -> dict[str, Any]:
    """What the study sets on every execution of ``artifact`` (its runs' placement and its notebook's parameters,
    beside ``profile`` and ``train_missing``): the device, the data root, with ``seeds`` N (``--seeds``) the seeds
    0..N-1 for every artifact whose profile runs several seeds (one-seed illustrations keep theirs), and for a fast
    dev run its limit ``fast_dev_run``, only the first of the artifact's seeds (the other seeds train the same
    configs) and, with ``pretrained=False`` (``--pretrained none``), no pre-trained weights; ``check_counts=False``
    (``--no-counts``): the real datasets read without their canonical counts.

    Raises:
        ValueError: ``seeds`` below 2 (an interval needs two seeds).
    """
    values: dict[str, Any] = {"device": device}
    check_seeds(seeds)
    if seeds is not None and len(artifact.defaults(profile)["seeds"]) > 1:
        values["seeds"] = list(range(seeds))
    if data_root is not None:
        values["data_root"] = str(data_root)
    if fast_dev_run:
        first = values.get("seeds", artifact.defaults(profile)["seeds"])
        values["fast_dev_run"] = int(fast_dev_run)
        values["seeds"] = [first if isinstance(first, int) else first[0]]
    if pretrained is False:
        values["pretrained"] = False
    if not check_counts:
        values["check_counts"] = False
    return values


def make_plan(
    artifacts: Sequence[Artifact],
    profile: str,
    *,
    device: str = "auto",
    data_root: str | None = None,
    fast_dev_run: int = 0,
    pretrained: bool | None = None,
    check_counts: bool = True,
    seeds: int | None = None,
) -> Plan:
    """The de-duplicated runs of ``artifacts`` at ``profile`` (module docstring, step 1), placed with
    :func:`execution_parameters`."""
    from dmllab.profiles import resolve_device
    from dmllab.training.store import RunStore

    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    check_seeds(seeds)
    device = resolve_device(device)
    execution = dict(
        device=device,
        data_root=data_root,
        fast_dev_run=fast_dev_run,
        pretrained=pretrained,
        check_counts=check_counts,
        seeds=seeds,
    )
    store = RunStore()
    unique: dict[str, tuple[Run, list[str]]] = {}
    errors: dict[str, str] = {}
    requested = 0
    for artifact in artifacts:
        try:
            given = execution_parameters(artifact, profile, **execution)
            runs = planned_runs(artifact, artifact.params(profile, **given))
        except Exception as err:  # one artifact's broken declaration is reported, the others are planned
            errors[artifact.id] = f"{type(err).__name__}: {err}"
            continue
        requested += len(runs)
        for run in runs:
            unique.setdefault(run.key, (run, []))[1].append(artifact.id)
    history = _stored_wall_times()
    by_profile: dict[str, list[float]] = {}
    for key, walls in history.items():
        by_profile.setdefault(key.split("|", 2)[-1], []).extend(walls)
    planned, typical = [], None
    for run, users in unique.values():
        stored = store.load(run.config, run.seed)
        diverged = stored is None and store.diverged(run.config, run.seed) is not None
        if stored is not None:
            wall: float | None = float(stored.wall_time_s)
        else:  # the median of the same method, else of the same profile, on the same device kind, else the
            # profile's typical run on that device (none for a fast dev run: no real run says what it costs)
            c = run.config
            kind = _kind(c.run.device)
            basis = history.get("|".join((c.method, c.dataset, c.profile, kind))) or by_profile.get(
                f"{c.profile}|{kind}"
            )
            wall = statistics.median(basis) if basis else None
            if not basis and not fast_dev_run and c.profile == profile:
                wall = typical = typical_run_s(c.profile, c.run.device)
        planned.append(PlannedRun(run, tuple(users), stored is not None, wall, diverged))
    return Plan(
        profile,
        tuple(artifacts),
        tuple(planned),
        requested,
        errors,
        typical_s=typical,
        device=device,
        data_root=None if data_root is None else str(data_root),
        fast_dev_run=fast_dev_run,
        pretrained=pretrained,
        check_counts=check_counts,
        seeds=seeds,
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown (no stored run to estimate from)"
    return duration(seconds)


def estimate(plan: Plan, jobs: int) -> str:
    """The plan's training estimate as text: compute, wall time with the workers it will really use (``jobs``,
    at most one per missing run), and its basis when it is a typical run (or why there is none)."""
    est = plan.estimate_s
    workers = max(1, min(jobs, len(plan.missing)))
    if est is None and plan.fast_dev_run:
        return "a fast dev run: seconds per run on a GPU, up to a minute or two on a CPU"
    gpu = _kind(plan.device) != "cpu"
    if plan.typical_s is not None:
        where = f"on one {_kind(plan.device)} device" if gpu else "on one CPU thread"
        table = "TYPICAL_GPU_RUN_S" if gpu else "TYPICAL_RUN_S"
        on = f" on {_kind(plan.device)}" if gpu else ""
        basis = (
            f" (no stored {plan.profile} run{on} yet: {plan.typical_s:.0f} s per run, the typical {plan.profile} "
            f"run {where}, dmllab.profiles.{table})"
        )
    elif est is None and gpu:
        basis = (
            f" (no stored {plan.profile} run on {_kind(plan.device)} yet, and no typical {plan.profile} run measured "
            "on a GPU: dmllab.profiles.TYPICAL_GPU_RUN_S has no basis)"
        )
    else:
        basis = ""
    return (
        f"{_duration(est)} of compute"
        + (f", about {_duration(est / workers)} with {workers} workers" if est and workers > 1 else "")
        + basis
    )


#: The plan's text fits this many columns (a terminal, a log viewer).
PLAN_WIDTH = 120


def _artifact_list(names: Sequence[str], room: int) -> str:
    """``names`` joined by commas, cut to fit ``room`` characters with ``+N more``."""
    text = ",".join(names)
    if len(text) <= room:
        return text
    for shown in range(len(names) - 1, 0, -1):
        text = f"{','.join(names[:shown])} +{len(names) - shown} more"
        if len(text) <= room:
            return text
    return f"{len(names)} artifacts"


def format_plan(plan: Plan, *, jobs: int = 1, limit: int = 40) -> str:
    """The plan as text within :data:`PLAN_WIDTH` columns: the first ``limit`` unique runs grouped under their
    config (its description wrapped), one line per run, then the totals and the estimate."""
    import textwrap

    from dmllab.training import presets

    lines = [f"study plan, profile {plan.profile}: {len(plan.artifacts)} artifacts"]
    groups: dict[str, list[PlannedRun]] = {}
    for r in plan.runs[:limit]:
        groups.setdefault(" ".join(presets.describe(r.run.config).split()), []).append(r)
    if groups:
        lines.append(f"  {'run key':<16} {'seed':>4}  {'stored':<6} {'wall':>6}  artifacts")
    for config, runs in groups.items():
        lines += textwrap.wrap(
            config,
            PLAN_WIDTH,
            initial_indent="config: ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
        for r in runs:
            wall = "" if r.wall_s is None else f"{r.wall_s:5.0f}s"
            row = (
                f"  {r.run.key.split('/')[0][:16]:<16} {r.run.seed:>4}  "
                f"{'yes' if r.stored else 'div.' if r.diverged else 'no':<6} {wall:>6}  "
            )
            lines.append(row + _artifact_list(r.artifacts, PLAN_WIDTH - len(row)))
    if len(plan.runs) > limit:
        lines.append(f"... {len(plan.runs) - limit} more runs")
    toys = [a.id for a in plan.artifacts if a.id not in {x for r in plan.runs for x in r.artifacts}]
    lines.append("")
    notes = [
        f"{plan.requested} runs requested by the artifacts, {len(plan.runs)} unique after de-duplication; "
        f"{len(plan.stored)} stored, "
        + (
            f"{len(plan.diverged)} recorded as diverged (not retrained; --force does), "
            if plan.diverged
            else ""
        )
        + f"{len(plan.missing)} to train",
        f"estimated training time of the missing runs: {estimate(plan, jobs)}",
    ]
    if toys:
        notes.append(f"artifacts without training runs (computed in their notebooks): {', '.join(toys)}")
    notes += [f"ERROR listing the runs of {artifact}: {error}" for artifact, error in plan.errors.items()]
    for note in notes:
        lines += textwrap.wrap(note, PLAN_WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(lines)
