"""The study's plan: the union of the selected artifacts' runs (:class:`~dmllab.experiments.Run`), placed where the
study runs them (:func:`dmllab.experiments.lookup.planned_runs`) and de-duplicated by the run store's key (two
artifacts that need the same config and seed share one run), with how many are already stored and an estimated
cost from stored wall times (:func:`make_plan`; ``dmllab study --plan`` prints :func:`format_plan` and stops).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dmllab import paths
from dmllab.experiments.artifact import Artifact, Run
from dmllab.experiments.lookup import planned_runs
from dmllab.profiles import PROFILES, TYPICAL_RUN_S


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
            runs = planned_runs(artifact, artifact.params(profile, device=device, data_root=data_root))
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


def estimate(plan: Plan, jobs: int) -> str:
    """The plan's training estimate as text: compute, wall time with the workers it will really use (``jobs``,
    at most one per missing run), and its basis when it is a typical run."""
    est = plan.estimate_s
    workers = max(1, min(jobs, len(plan.missing)))
    return (
        f"{_duration(est)} of compute"
        + (f", about {_duration(est / workers)} with {workers} workers" if est and workers > 1 else "")
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
    lines.append(f"estimated training time of the missing runs: {estimate(plan, jobs)}")
    if toys:
        lines.append(f"artifacts without training runs (computed in their notebooks): {', '.join(toys)}")
    for artifact, error in plan.errors.items():
        lines.append(f"ERROR listing the runs of {artifact}: {error}")
    return "\n".join(lines)
