"""The study's plan (:func:`make_plan`): the selected artifacts' runs, placed, de-duplicated by run key, with how
many are stored, their estimated cost and GPU price, and the artifacts a budget or ``--datasets`` leaves out
(docs/guide/study.md; ``dmllab study --plan`` prints :func:`dmllab.pipeline.plan_text.format_plan`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmllab import paths
from dmllab.experiments.artifact import Artifact, Run
from dmllab.experiments.execution import Execution
from dmllab.experiments.lookup import Declared, planned_runs
from dmllab.pipeline import budget
from dmllab.pipeline.cost import Calibration, Price, Unpriced, price_config
from dmllab.profiles import PROFILES, TYPICAL_RUN_S
from dmllab.training.pretrain import dependencies

if TYPE_CHECKING:
    from dmllab.training.store import RunStore


@dataclass(frozen=True)
class PlannedRun:
    """One unique run of the plan: the run, the artifacts that read it, whether it is stored (or recorded as
    diverged: decided as well, not trained again), its cost."""

    run: Run
    artifacts: tuple[str, ...]
    stored: bool
    wall_s: float | None  # stored wall time, or the estimate for a missing run (None: no basis)
    diverged: bool = False  # the store records it as diverged (dmllab.training.store, DivergedRunError)
    price: Price | Unpriced | None = None  # GPU cost of the real run (None: no calibration given)
    declared: tuple[tuple[Any, int], ...] = ()  # the config and draw of each declaration of it


@dataclass(frozen=True)
class Plan:
    profile: str
    artifacts: tuple[Artifact, ...]
    runs: tuple[PlannedRun, ...]
    requested: int  # runs declared by the artifacts before de-duplication
    errors: Mapping[str, str] = field(default_factory=dict)  # artifact -> why its runs could not be listed
    typical_s: float | None = None  # the typical run (dmllab.profiles.typical_run_s) an estimate fell back to
    execution: Execution = Execution("cpu")  # where and how the runs execute (its device resolved)
    seeds: tuple[int, ...] | None = None  # the seeds of every artifact with several seeds (--seeds)
    datasets: tuple[str, ...] | None = None  # --datasets: the real datasets available (None: all)
    max_gpu_hours: float | None = None  # --max-gpu-hours
    left_out: Mapping[str, str] = field(default_factory=dict)  # artifact -> why it is not in this plan
    calibration: Calibration | None = None
    placement: str = ""  # where the runs train and why (dmllab.pipeline.placement), the plan's header

    @property
    def device(self) -> str:
        return self.execution.device

    @property
    def fast_dev_run(self) -> int:
        return self.execution.fast_dev_run

    def parameters(self, artifact: Artifact) -> dict[str, Any]:
        """:func:`artifact_overrides` of ``artifact`` in this plan (what its notebook receives from the study)."""
        return artifact_overrides(
            artifact, self.profile, self.execution, seeds=self.seeds, datasets=self.datasets
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
    def dependencies(self) -> list[tuple[int, int]]:
        """The pre-trained SmallCNN trunks ``(width, draw)`` the missing runs start from that are not built yet:
        the study's prepare step builds them once each before training."""
        return dependencies(r.run.config for r in self.missing)

    def manifest(self) -> dict[str, Any]:
        """The placed runs, as the study trains and its notebooks read them
        (:func:`dmllab.experiments.lookup.read_manifest`)."""
        from dmllab.training.config import complete

        return {
            "profile": self.profile,
            "placement": self.placement,
            "execution": str(self.execution),
            "runs": [
                {
                    "key": r.run.key,
                    "seed": r.run.seed,
                    "draw": r.run.draw,
                    "method": r.run.config.method,
                    "dataset": r.run.config.dataset,
                    "threads": r.run.config.run.threads,
                    "stored": r.stored,
                    "diverged": r.diverged,
                    "artifacts": list(r.artifacts),
                    "declared": [[c.to_dict(), d] for c, d in r.declared],
                    "config": complete(r.run.config).to_dict(),
                }
                for r in self.runs
            ],
        }

    @property
    def estimate_s(self) -> float | None:
        """Estimated training time of the missing runs (sum of estimates), None without a basis."""
        costs = [r.wall_s for r in self.missing]
        return None if any(c is None for c in costs) else float(sum(costs))


def manifest_path(plan: Plan) -> Path:
    """``<run store>/manifests/study-<profile>-<device kind>.json`` (rewritten by the next such study)."""
    return paths.runs_dir() / "manifests" / f"study-{plan.profile}-{_kind(plan.device)}.json"


def write_manifest(plan: Plan) -> Path:
    """Write :meth:`Plan.manifest` to :func:`manifest_path` and return its path."""
    from dmllab.fileio import write_atomic

    path = manifest_path(plan)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(plan.manifest(), indent=1, sort_keys=True) + "\n").encode("utf-8"))
    return path


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


#: The most seeds a study plans (``--seeds``): more would plan more runs than any machine trains.
MAX_SEEDS = 1000


def check_seeds(seeds: Any) -> tuple[int, ...] | None:
    """The seeds ``--seeds`` names, as a tuple (None: the profiles'): a list of seeds (``[0, 3, 7]``, or its text
    ``"0,3,7"``) or a count N for the seeds 0..N-1 (``5``, ``"5"``).

    Raises:
        ValueError: fewer than two seeds (an interval needs two), a repeated or negative seed, or a non-integer.
    """
    if seeds is None:
        return None
    text = seeds if isinstance(seeds, str) else None
    if text is not None:
        parts = [p.strip() for p in text.split(",")]
        if not all(p.isdigit() for p in parts):
            raise ValueError(f"--seeds takes a count N or a list of seeds such as 0,3,7; got {text!r}")
        seeds = int(parts[0]) if len(parts) == 1 else [int(p) for p in parts]
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if not 2 <= seeds <= MAX_SEEDS:
            raise ValueError(
                f"--seeds N must be in 2..{MAX_SEEDS} (an interval needs two seeds), got {seeds}"
            )
        seeds = list(range(seeds))
    ok = isinstance(seeds, list | tuple) and all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds
    )
    if not ok or not 2 <= len(seeds) <= MAX_SEEDS or len(set(seeds)) != len(seeds) or max(seeds) >= 2**63:
        raise ValueError(
            f"--seeds must name 2..{MAX_SEEDS} different seeds in 0..2**63-1 (an interval needs two), "
            f"got {str(text or seeds)[:80]}"
        )
    return tuple(seeds)


def artifact_overrides(
    artifact: Artifact,
    profile: str,
    execution: Execution,
    *,
    seeds: Any = None,
    datasets: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """The artifact's own parameters the study sets (its runs' placement and its notebook's): ``seeds``
    (:func:`check_seeds`) for every artifact whose profile runs several seeds, a fast dev run's first seed only,
    the ``datasets`` parameter cut to ``datasets`` (:func:`dmllab.pipeline.budget.dataset_overrides`)."""
    values: dict[str, Any] = dict(budget.dataset_overrides(artifact, profile, datasets)[0])
    seeds = check_seeds(seeds)
    if seeds is not None and len(artifact.defaults(profile)["seeds"]) > 1:
        values["seeds"] = list(seeds)
    if execution.fast_dev_run:
        first = values.get("seeds", artifact.defaults(profile)["seeds"])
        values["seeds"] = [first if isinstance(first, int) else first[0]]
    return values


def make_plan(
    artifacts: Sequence[Artifact],
    profile: str,
    execution: Execution = Execution(),
    *,
    seeds: Any = None,
    datasets: Sequence[str] | str | None = None,
    max_gpu_hours: float | None = None,
    calibration: Calibration | None = None,
) -> Plan:
    """The de-duplicated runs of ``artifacts`` at ``profile`` (module docstring), placed in ``execution`` (its
    device resolved here when it is "auto") with :func:`artifact_overrides`, priced with ``calibration``; ``datasets`` and ``max_gpu_hours`` leave artifacts
    out (:mod:`dmllab.pipeline.budget`; a fast dev run leaves out what the real study would, priced from empty).

    Raises:
        ValueError: an unknown profile or dataset name, a negative budget, or a budget without a calibration.
    """
    from dmllab.training.store import RunStore

    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    seeds = check_seeds(seeds)
    if max_gpu_hours is not None and (calibration is None or not max_gpu_hours >= 0):
        raise ValueError(f"--max-gpu-hours {max_gpu_hours}: needs a number >= 0 and a GPU calibration")
    available = budget.check_datasets(datasets)
    if execution.device == "auto":  # a caller of its own; the study passes its placed (resolved) device
        execution = execution.resolved()
    options = dict(seeds=seeds, datasets=available)
    per_artifact, left_out, errors, placed = _declared(artifacts, profile, execution, options)
    prices, store = _Prices(calibration), RunStore()
    if max_gpu_hours is not None:
        kept = [a for a in artifacts if a.id in per_artifact]
        chosen, dropped = _within_budget(
            kept, per_artifact, profile, execution, options, prices, store, max_gpu_hours
        )
        left_out.update(dropped)
        per_artifact = {a: r for a, r in per_artifact.items() if a in chosen or not r}
    unique: dict[str, tuple[Run, list[str]]] = {}
    for aid, runs in per_artifact.items():
        for run in runs:
            unique.setdefault(run.key, (run, []))[1].append(aid)
    declared: dict[tuple[Any, int], list[tuple[Any, int]]] = {}
    for (config, _, draw), run in placed.items():
        declared.setdefault((run.config, run.seed), []).append((config, draw))
    planned, typical = _planned(unique, declared, profile, execution.fast_dev_run, prices, store)
    return Plan(
        profile,
        tuple(a for a in artifacts if a.id not in left_out),
        tuple(planned),
        sum(len(runs) for runs in per_artifact.values()),
        errors,
        typical_s=typical,
        execution=execution,
        seeds=seeds,
        datasets=available,
        max_gpu_hours=max_gpu_hours,
        left_out=left_out,
        calibration=calibration,
    )


def _declared(
    artifacts: Sequence[Artifact], profile: str, execution: Execution, options: Mapping[str, Any]
) -> tuple[dict[str, list[Run]], dict[str, str], dict[str, str], dict[Declared, Run]]:
    """``(placed runs per artifact, artifact -> why it is left out, artifact -> why its runs could not be
    listed, the placed runs by their declarations)``: every artifact's runs placed in ``execution``, a run several
    artifacts declare placed once."""
    placed: dict[Declared, Run] = {}
    per_artifact: dict[str, list[Run]] = {}
    left_out: dict[str, str] = {}
    errors: dict[str, str] = {}
    available = options["datasets"]
    for artifact in artifacts:
        try:
            why = budget.dataset_overrides(artifact, profile, available)[1]
            runs = _runs(artifact, profile, execution, options, placed)
            why = why or _unavailable(runs, available)
        except Exception as err:  # one artifact's broken declaration is reported, the others are planned
            errors[artifact.id] = f"{type(err).__name__}: {err}"
            continue
        if why:
            left_out[artifact.id] = why
        else:
            per_artifact[artifact.id] = runs
    return per_artifact, left_out, errors, placed


class _Prices:
    """The GPU price of each run key (:func:`~dmllab.pipeline.cost.price_config`), computed once per key."""

    def __init__(self, calibration: Calibration | None) -> None:
        self.calibration = calibration
        self.known: dict[str, Price | Unpriced] = {}

    def __call__(self, key: str, run: Run) -> Price | Unpriced:
        if key not in self.known:
            self.known[key] = price_config(run.config, self.calibration)  # type: ignore[arg-type]
        return self.known[key]


def _within_budget(
    artifacts: Sequence[Artifact],
    per_artifact: Mapping[str, list[Run]],
    profile: str,
    execution: Execution,
    options: Mapping[str, Any],
    prices: _Prices,
    store: RunStore,
    max_gpu_hours: float,
) -> tuple[Any, dict[str, str]]:
    """``(the artifacts chosen, artifact -> why it is left out)`` within ``max_gpu_hours``, the most important
    first (:func:`dmllab.pipeline.budget.select`; a fast dev run prices the real study's runs, from empty)."""
    from dmllab.experiments.registry import by_importance

    ordered, stored = [], set()
    for artifact in by_importance(list(artifacts)):
        real = per_artifact[artifact.id]
        if execution.fast_dev_run:  # the real study's runs, priced from empty
            real = _runs(artifact, profile, replace(execution, fast_dev_run=0, pretrained=None), options)
        else:
            stored |= {
                r.key for r in real if store.load(r.config, r.seed) or store.diverged(r.config, r.seed)
            }
        ordered.append((artifact.id, {k: prices(k, r) for k, r in ((r.key, r) for r in real)}))
    return budget.select(ordered, stored, max_gpu_hours)


def _planned(
    unique: Mapping[str, tuple[Run, list[str]]],
    declared: Mapping[tuple[Any, int], list[tuple[Any, int]]],
    profile: str,
    fast_dev_run: int,
    prices: _Prices,
    store: RunStore,
) -> tuple[list[PlannedRun], float | None]:
    """``(every unique run as a PlannedRun, the typical run an estimate fell back to)``: whether the store holds it
    (or records it as diverged), its price, its declarations and its wall time: stored, else the median of the same
    method, else of the same profile, on the same device kind, else the GPU price of the real run, else the
    profile's typical run on that device (none for a fast dev run: no real run says what it costs)."""
    history = _stored_wall_times()
    by_profile: dict[str, list[float]] = {}
    for key, walls in history.items():
        by_profile.setdefault(key.split("|", 2)[-1], []).extend(walls)
    planned, typical = [], None
    for key, (run, users) in unique.items():
        c, kind = run.config, _kind(run.config.run.device)
        stored_run = store.load(c, run.seed)
        diverged = stored_run is None and store.diverged(c, run.seed) is not None
        cost = prices(key, run) if prices.calibration is not None else None
        basis = history.get("|".join((c.method, c.dataset, c.profile, kind))) or by_profile.get(
            f"{c.profile}|{kind}"
        )
        wall: float | None = None
        if stored_run is not None:
            wall = float(stored_run.wall_time_s)
        elif basis:
            wall = statistics.median(basis)
        elif not fast_dev_run and kind == "cuda" and isinstance(cost, Price) and cost.from_images:
            wall = cost.seconds
        elif not fast_dev_run and c.profile == profile:
            wall = typical = _typical_run_s(c.profile, kind, prices.calibration)
        declarations = tuple(declared.get((c, run.seed), ()))
        planned.append(
            PlannedRun(run, tuple(users), stored_run is not None, wall, diverged, cost, declarations)
        )
    return planned, typical


def _runs(
    artifact: Artifact,
    profile: str,
    execution: Execution,
    options: Mapping[str, Any],
    placed: dict[Declared, Run] | None = None,
) -> list[Run]:
    """The placed runs of ``artifact`` in ``execution`` (:func:`artifact_overrides` with ``options``; ``placed``:
    the runs of this execution placed so far, :func:`~dmllab.experiments.lookup.planned_runs`)."""
    given = artifact_overrides(artifact, profile, execution, **options)
    return planned_runs(artifact, artifact.params(profile, execution, **given), placed)


def _unavailable(runs: Sequence[Run], available: tuple[str, ...] | None) -> str:
    missing = budget.unavailable([r.config.dataset for r in runs], available)
    return f"its runs read {', '.join(missing)} (not in --datasets)" if missing else ""


def _typical_run_s(profile: str, kind: str, calibration: Calibration | None) -> float | None:
    """The typical ``profile`` run on the CPU (:data:`dmllab.profiles.TYPICAL_RUN_S`) or on one CUDA worker
    (the calibration's quick runs); None: no basis."""
    if kind == "cpu":
        return TYPICAL_RUN_S.get(profile)
    return calibration.gpu_run_s(profile) if calibration is not None and kind == "cuda" else None
