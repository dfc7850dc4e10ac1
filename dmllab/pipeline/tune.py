"""``dmllab tune``: an equal-budget hyper-parameter search on the validation split for every method a profile's
study trains (Optuna's TPE sampler, seeded; :func:`study_methods`, :func:`search_space`, :func:`write_records`):
docs/guide/tuning.md. A method whose preset declares no tuned loss hyper-parameter (``Method.tuned``) is an error.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.training.config import ExperimentConfig
from dmllab.training.presets.tuned import LOSS_PREFIX, Recipe, unit
from dmllab.training.protocol import on_validation

DEFAULT_TRIALS = 20
DEFAULT_BATCH = 4  # trials asked at once per method (the trial sequence depends on it, not on the workers)
MAX_TRIALS = 10_000  # trials per method at the most: more would plan more runs than any machine trains
STARTUP_TRIALS = 10  # Optuna's default: random trials before TPE models the results
LR_DECADES = 3.0  # each lr and the proxy ratio: preset x 10^[-1.5, +1.5]
LOSS_DECADES = 2.0  # the loss hyper-parameter: preset x 10^[-1, +1]
SIGNIFICANT_DIGITS = 3  # a trial's values are rounded to these significant digits (readable run configs)
DIVERGED_VALUE = 0.0  # the R@1 told to the sampler for a trial that diverged (the worst possible)
EXPERIMENT = "tune"

# ----------------------------------------------------------------------------------------------- methods


def study_methods(profile: str = "quick") -> dict[str, tuple[str, ...]]:
    """``method -> datasets`` over every artifact's runs at ``profile`` (module docstring), in first-seen order."""
    from dmllab.experiments import registry
    from dmllab.experiments.lookup import planned_runs

    found: dict[str, list[str]] = {}
    for artifact in registry.all_artifacts():
        for run in planned_runs(artifact, artifact.params(profile)):
            datasets = found.setdefault(unit(run.config.method), [])
            if run.config.dataset not in datasets:
                datasets.append(run.config.dataset)
    return {m: tuple(d) for m, d in found.items()}


def method_base(method: str, dataset: str, profile: str) -> ExperimentConfig:
    """The untuned preset of ``method`` (a :func:`~dmllab.training.presets.tuned.unit`) with Proxy Synthesis
    off: what its trials vary."""
    from dmllab.training import presets
    from dmllab.training.presets.proxy_synthesis import without_synthesis

    return without_synthesis(presets.get(method, dataset, profile, tuned=False))


def loss_default(cfg: ExperimentConfig, key: str) -> float:
    """The value of loss keyword ``key`` of ``cfg``'s own loss (under any wrapper): its spec's entry, else the
    loss's own default."""
    from dmllab.losses import LOSSES, MARGIN_SOFTMAX_PRESETS

    leaf = cfg.loss.leaf
    if key in leaf.kw:
        return float(leaf.kw[key])
    if key in MARGIN_SOFTMAX_PRESETS.get(leaf.name, {}):
        return float(MARGIN_SOFTMAX_PRESETS[leaf.name][key])
    default = LOSSES.keywords(leaf.name).get(key, inspect.Parameter.empty)
    if default is inspect.Parameter.empty:
        raise KeyError(f"loss {leaf.name!r} has no keyword {key!r} with a default")
    return float(default)


def _has_proxies(cfg: ExperimentConfig) -> bool:
    from dmllab.losses import LOSSES

    return bool(getattr(LOSSES.get(cfg.loss.leaf.name), "has_proxies", True))


def _embedding_lr(cfg: ExperimentConfig) -> float:
    o = cfg.optim
    return o.lr if o.lr_embedding is None else o.lr_embedding


def _round(x: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    return float(f"{x:.{digits}g}")


# ------------------------------------------------------------------------------------------ search space


@dataclass(frozen=True)
class Dim:
    """One searched value: ``centre`` (the untuned preset's value) times a multiplier, log-uniform over
    ``decades`` decades centred on 1."""

    name: str  # "lr", "lr_embedding", "proxy_ratio" or "loss_<keyword>"
    centre: float
    decades: float

    @property
    def bounds(self) -> tuple[float, float]:
        half = 10 ** (self.decades / 2)
        return 1 / half, half

    def value(self, multiplier: float) -> float:
        """The searched value (rounded, :data:`SIGNIFICANT_DIGITS`); multiplier 1 is the preset's exact value."""
        return self.centre if multiplier == 1.0 else _round(self.centre * multiplier)


@dataclass(frozen=True)
class SearchSpace:
    """What the trials of one method vary (module docstring)."""

    method: str
    dataset: str
    profile: str
    base: ExperimentConfig
    dims: tuple[Dim, ...]
    loss_reason: str

    def distributions(self) -> dict[str, Any]:
        from optuna.distributions import FloatDistribution

        return {d.name: FloatDistribution(*d.bounds, log=True) for d in self.dims}

    def values(self, multipliers: Mapping[str, float]) -> dict[str, float]:
        return {d.name: d.value(multipliers[d.name]) for d in self.dims}

    def recipe(self, values: Mapping[str, float]) -> Recipe:
        loss = {k.removeprefix("loss_"): v for k, v in values.items() if k.startswith("loss_")}
        return Recipe(
            lr=values["lr"],
            lr_embedding=values["lr_embedding"],
            proxy_ratio=values.get("proxy_ratio"),
            loss=tuple(sorted(loss.items())),
        )

    def config(self, values: Mapping[str, float]) -> ExperimentConfig:
        """The trial config of ``values``: the recipe on the base, trained on ``train``, judged on ``val``."""
        from dmllab.training.presets import tuned

        return on_validation(tuned.apply(self.base, self.base, self.recipe(values)))

    def describe(self) -> str:
        dims = ", ".join(f"{d.name} {d.centre:.4g} x 10^+-{d.decades / 2:g}" for d in self.dims)
        return f"{self.method} ({self.dataset}): {dims}"


def search_space(method: str, dataset: str = "synthetic", profile: str = "quick") -> SearchSpace:
    """The search space of ``method`` on ``dataset`` at ``profile`` (module docstring).

    Raises:
        KeyError: a method whose preset declares no tuned loss hyper-parameter (``Method.tuned``).
    """
    from dmllab.training import presets

    key, reason = presets.METHODS.get(method.partition(":")[0]).tuned_param(method)
    base = method_base(method, dataset, profile)
    o = base.optim
    emb = _embedding_lr(base)
    dims = [Dim("lr", o.lr, LR_DECADES), Dim("lr_embedding", emb, LR_DECADES)]
    if o.lr_proxies is not None and _has_proxies(base):
        dims.append(Dim("proxy_ratio", o.lr_proxies / emb, LR_DECADES))
    if key is not None:
        dims.append(Dim(f"loss_{key}", loss_default(base, key), LOSS_DECADES))
    return SearchSpace(method, dataset, profile, base, tuple(dims), reason)


def search_spaces(methods: Sequence[str] | None, profile: str) -> list[SearchSpace]:
    """The search space of each of ``methods`` (default: :func:`study_methods`) on each dataset the study trains
    it on (the synthetic benchmark for a method the study does not train)."""
    derived = study_methods(profile)
    chosen = list(derived) if methods is None else methods
    return [search_space(m, d, profile) for m in chosen for d in derived.get(m, ("synthetic",))]


# ---------------------------------------------------------------------------------------------- executor


def train_runs(
    runs: Sequence[Any],
    *,
    jobs: int | str = "auto",
    executor: str = "local",
    slurm: Any = None,
    progress: bool = True,
) -> list[Any]:
    """Train ``runs`` (:class:`dmllab.experiments.artifact.Run`) on the study's executor
    (:mod:`dmllab.pipeline.executors`): a local process pool of ``jobs`` workers (``"auto"``: one per usable core
    on the CPU, each run on one thread) or SLURM jobs (``slurm``: :class:`~dmllab.pipeline.slurm.SlurmOptions`).
    The one call into :mod:`dmllab.pipeline`; returns its ``JobResult`` per run."""
    from dmllab.pipeline import executors
    from dmllab.pipeline import slurm as slurm_executor
    from dmllab.pipeline.jobs import resolve_jobs, threads_per_worker
    from dmllab.profiles import resolve_device

    if executor == "slurm":
        return slurm_executor.SlurmExecutor(slurm, progress=progress).submit(runs, desc="trials (slurm)")
    if executor != "local":
        raise ValueError(f"unknown executor {executor!r}; valid executors: local, slurm")
    device = resolve_device(runs[0].config.run.device) if runs else "cpu"
    workers = resolve_jobs(jobs, device)
    threads = threads_per_worker(device, workers)
    return executors.LocalExecutor(workers, threads=threads, progress=progress).submit(runs, desc="trials")


# ------------------------------------------------------------------------------------------------- tuning


@dataclass
class Trial:
    """One told trial: its number, values, run, outcome (``ok``, ``diverged``, ``failed``), R@1 in percent."""

    method: str
    dataset: str
    number: int
    values: dict[str, float]
    run: Any
    state: str = "ok"
    value: float | None = None
    wall_s: float | None = None
    error: str = ""


@dataclass
class TuneResult:
    spaces: list[SearchSpace]
    trials: list[Trial]
    best: dict[tuple[str, str], Trial]
    trained: int  # runs sent to the executor (0 when every trial was stored)
    record: Path | None = None
    best_record: Path | None = None
    failed: list[Trial] = field(default_factory=list)


def _sampler(seed: int) -> Any:
    import optuna

    with warnings.catch_warnings():  # multivariate / constant_liar are "experimental" in older Optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=STARTUP_TRIALS, multivariate=True, constant_liar=True
        )


def _stored(store: Any, run: Any) -> bool:
    """Whether the run store holds ``run``, trained or recorded as diverged."""
    return store.load(run.config, run.seed) is not None or store.diverged(run.config, run.seed) is not None


def _outcome(trial: Trial, store: Any, job: Any | None) -> None:
    """Fill ``trial``'s outcome from the run store (and the executor's result of its run, if it trained)."""
    cfg, seed = trial.run.config, trial.run.seed
    stored = store.load(cfg, seed)
    if stored is not None:
        trial.state, trial.value, trial.wall_s = "ok", 100.0 * stored.metrics["R@1"], stored.wall_time_s
        return
    record = store.diverged(cfg, seed)
    if record is not None:
        trial.state, trial.error = "diverged", str(record.get("error", ""))
        trial.wall_s = (record.get("provenance") or {}).get("wall_time_s")
        return
    trial.state = "failed"
    trial.error = job.error if job is not None else "not trained"


def tune(
    methods: Sequence[str] | None = None,
    *,
    profile: str = "quick",
    trials: int = DEFAULT_TRIALS,
    batch: int = DEFAULT_BATCH,
    seed: int = 0,
    run_seed: int = 0,
    jobs: int | str = "auto",
    executor: str = "local",
    slurm: Any = None,
    progress: bool = True,
    write: bool = True,
    train: Callable[..., list[Any]] | None = None,
) -> TuneResult:
    """Tune ``methods`` (default: :func:`study_methods` of ``profile``) with ``trials`` trials each (module
    docstring) and write the records (``write``). ``train``: the executor call (default :func:`train_runs`).

    Raises:
        ValueError: ``trials`` or ``batch`` outside 1..:data:`MAX_TRIALS`. KeyError: a method without a search space.
    """
    import optuna
    from tqdm.auto import tqdm

    from dmllab.experiments.artifact import Run
    from dmllab.training.store import RunStore
    from dmllab.validation import check_int

    check_int("trials", trials, high=MAX_TRIALS, why="per method")
    check_int("batch", batch, high=MAX_TRIALS, why="trials asked at once")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spaces = search_spaces(methods, profile)
    studies = [optuna.create_study(direction="maximize", sampler=_sampler(seed)) for _ in spaces]
    for space, st in zip(spaces, studies):  # trial 0: the method's untuned preset
        st.enqueue_trial({d.name: 1.0 for d in space.dims})
    width = max(len(s.method) for s in spaces)
    bars = [
        tqdm(total=trials, desc=s.method.ljust(width), unit="trial", position=i, disable=not progress)
        for i, s in enumerate(spaces)
    ]
    store, told, trained, train = RunStore(), [], 0, train or train_runs
    n_asked = [0] * len(studies)
    while any(n < trials for n in n_asked):
        asked: list[tuple[int, Any, Trial]] = []
        for i, (space, st) in enumerate(zip(spaces, studies)):
            for _ in range(min(batch, trials - n_asked[i])):
                n_asked[i] += 1
                ot = st.ask(space.distributions())
                values = space.values(ot.params)
                run = Run(space.config(values), run_seed, variant=space.method)
                asked.append((i, ot, Trial(space.method, space.dataset, ot.number, values, run)))
        # one run per key (the same config and seed), in the order asked
        to_train = list({t.run.key: t.run for _, _, t in asked if not _stored(store, t.run)}.values())
        done = (
            train(to_train, jobs=jobs, executor=executor, slurm=slurm, progress=progress) if to_train else []
        )
        jobs_out = {r.key: res for r, res in zip(to_train, done)}
        trained += len(to_train)
        for i, ot, t in asked:
            _outcome(t, store, jobs_out.get(t.run.key))
            if t.state == "failed":
                studies[i].tell(ot, state=optuna.trial.TrialState.FAIL)
            else:
                studies[i].tell(ot, t.value if t.state == "ok" else DIVERGED_VALUE)
            told.append(t)
            bars[i].update(1)
            best = max((x.value for x in told if x.method == t.method and x.value is not None), default=None)
            if best is not None:
                bars[i].set_postfix_str(f"best val R@1 {best:.2f}")
    for bar in bars:
        bar.close()
    best = choose_best(told)
    result = TuneResult(spaces, told, best, trained, failed=[t for t in told if t.state == "failed"])
    if write:
        result.record, result.best_record = write_records(result, profile=profile, seed=seed, batch=batch)
    return result


def choose_best(trials: Sequence[Trial]) -> dict[tuple[str, str], Trial]:
    """Per (method, dataset) the trial with the best validation R@1, ties by the lower trial number."""
    best: dict[tuple[str, str], Trial] = {}
    for t in sorted(trials, key=lambda t: t.number):
        key = (t.method, t.dataset)
        if t.value is not None and (key not in best or t.value > best[key].value):
            best[key] = t
    return best


# ------------------------------------------------------------------------------------------------ records


def record_paths(profile: str) -> tuple[Path, Path]:
    """``<results>/tuning/<profile>.csv`` (every trial) and the presets' recipes of ``profile``
    (:func:`dmllab.training.presets.tuned.best_csv`, package data: the chosen trial per method)."""
    from dmllab.training.presets.tuned import best_csv

    return paths.results_dir() / "tuning" / f"{profile}.csv", best_csv(profile)


def trial_row(t: Trial, *, profile: str, seed: int, batch: int) -> dict[str, Any]:
    """The tidy row of one trial (module docstring)."""
    import optuna

    from dmllab.training.store import run_key

    row: dict[str, Any] = {
        "experiment": EXPERIMENT,
        "paper": "dmllab",
        "artifact": f"tuning_{profile}",
        "variant": t.method,
        "dataset": t.dataset,
        "profile": profile,
        "seed": t.run.seed,
        "metric": "R@1",
        "value": math.nan if t.value is None else t.value,
        "param_trial": t.number,
        "param_split": t.run.config.data.test_split,
        "param_state": t.state,
        "param_wall_time_s": t.wall_s,
        "param_sampler_seed": seed,
        "param_batch": batch,
        "param_optuna": optuna.__version__,
        "device": t.run.config.run.device,
        "config_hash": run_key(t.run.config),
        "run_id": t.run.key,
    }
    for name, value in t.values.items():  # loss_<keyword> -> the loss keyword's column
        row[LOSS_PREFIX + name.removeprefix("loss_") if name.startswith("loss_") else f"param_{name}"] = value
    return row


def _merge(path: Path, rows: list[dict[str, Any]], methods: set[tuple[str, str]]) -> None:
    """Write ``rows`` to ``path``, keeping the existing rows of other (method, dataset) pairs."""
    import pandas as pd

    from dmllab import results

    kept: list[dict[str, Any]] = []
    if path.exists():
        old = results.read_rows(path)
        keep = [(v, d) not in methods for v, d in zip(old["variant"], old["dataset"])]
        kept = [
            {k: v for k, v in r.items() if k == "value" or not pd.isna(v)}
            for r in old[keep].to_dict("records")
        ]
    results.write_rows(path, kept + rows, mode="replace")


def write_records(result: TuneResult, *, profile: str, seed: int, batch: int) -> tuple[Path, Path]:
    """Write the trial record and the chosen recipes (module docstring); other methods' rows are kept."""
    record, best = record_paths(profile)
    methods = {(s.method, s.dataset) for s in result.spaces}
    rows = [trial_row(t, profile=profile, seed=seed, batch=batch) for t in result.trials]
    _merge(record, rows, methods)
    chosen = [trial_row(t, profile=profile, seed=seed, batch=batch) for t in result.best.values()]
    _merge(best, chosen, methods)
    return record, best


def format_spaces(spaces: Sequence[SearchSpace]) -> str:
    """One line per method: its search space and why its loss hyper-parameter."""
    return "\n".join(f"{s.describe()}\n    loss hyper-parameter: {s.loss_reason}" for s in spaces)


def format_result(result: TuneResult) -> str:
    """Trials per method, the best validation R@1 and its recipe, failures."""
    lines = [f"{len(result.trials)} trials, {result.trained} trained now (the rest were stored)"]
    for s in result.spaces:
        mine = [t for t in result.trials if t.method == s.method and t.dataset == s.dataset]
        b = result.best.get((s.method, s.dataset))
        states = {st: sum(t.state == st for t in mine) for st in ("ok", "diverged", "failed")}
        text = ", ".join(f"{n} {st}" for st, n in states.items() if n)
        chosen = (
            f"best val R@1 {b.value:.2f} (trial {b.number}: "
            + ", ".join(f"{k} {v:.3g}" for k, v in b.values.items())
            + ")"
            if b
            else "no finished trial"
        )
        lines.append(f"{s.method:<32} {len(mine):>3} trials ({text}); {chosen}")
    for t in result.failed:
        lines.append(f"FAILED {t.method} trial {t.number}: {t.error}")
    if result.record is not None:
        lines.append(f"records: {result.record}, {result.best_record}")
    return "\n".join(lines)
