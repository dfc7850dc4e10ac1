"""What a study's runs cost on a GPU: the images each run processes (:func:`workload`) at the measured rates of a
:class:`Calibration` (``results/benchmarks/gpu.csv``), put together by :func:`price`, which never guesses a rate
(:class:`Unpriced`); the model is described in docs/guide/gpu.md.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from dmllab import paths

if TYPE_CHECKING:
    from dmllab.training.config import ExperimentConfig

#: The committed calibration: ``benchmarks/bench_gpu.py``'s rows on the last GPU it ran on.
DEFAULT_CALIBRATION = paths.repo_root() / "results" / "benchmarks" / "gpu.csv"
PRECISIONS = ("fp32", "bf16", "fp16")
#: ``run.amp`` -> the precision whose rows price it (``dmllab.training.trainer.resolve_amp`` on CUDA).
AMP_PRECISION = {"off": "fp32", "auto": "bf16", "bf16": "bf16", "fp16": "fp16"}
#: A precision priced at another one's rows when its own are missing (stated in the run's notes).
SAME_SPEED = {"fp16": "bf16"}
#: The forward pass's rate as a multiple of the training step's, where no ``embed`` row is measured.
FORWARD_SPEEDUP = 3.0
STAGE2_LOW = 0.5  # the low end of the range: stage 2 half as long as stage 1
SETTING = re.compile(
    r"^(?P<backbone>[a-z0-9_]+?)_(?P<crop>\d+)px_b(?P<batch>\d+)_(?P<precision>fp32|bf16|fp16)$"
)
LOADER_SETTING = re.compile(r"^b(?P<batch>\d+)_workers(?P<workers>\d+)$")

Key = tuple[str, int, str]  # (backbone, crop, precision)


class CalibrationError(ValueError):
    """The calibration file is missing or not a ``bench_gpu.py`` CSV (one line naming the file)."""


def model_setting(backbone: str, crop: int, batch: int, precision: str) -> str:
    """The ``setting`` of a ``model_step`` / ``embed`` / ``end_to_end`` row: ``resnet50_256px_b32_bf16``."""
    return f"{backbone}_{crop}px_b{batch}_{precision}"


@dataclass(frozen=True)
class Calibration:
    """Rates measured by ``bench_gpu.py`` on one card: images/s per (backbone, crop, precision) and batch, and the
    quick profile's seconds per run with W workers sharing the device."""

    source: str
    device: str
    step: Mapping[Key, Mapping[int, float]] = field(default_factory=dict)
    embed: Mapping[Key, Mapping[int, float]] = field(default_factory=dict)
    end_to_end: Mapping[Key, Mapping[int, float]] = field(default_factory=dict)
    loader: Mapping[int, float] = field(default_factory=dict)  # batch -> images/s (all workers)
    quick_run_s: Mapping[int, float] = field(default_factory=dict)  # GPU workers -> seconds per run

    def gpu_run_s(self, profile: str, workers: int = 1) -> float | None:
        """Seconds per ``profile`` run of the study on the device with ``workers`` workers sharing it (wall time
        divided by the runs: the throughput), None where not measured (only the quick profile is)."""
        return self.quick_run_s.get(workers) if profile == "quick" else None


def load_calibration(path: str | Path = DEFAULT_CALIBRATION) -> Calibration:
    """The calibration rows of ``path`` (a ``bench_gpu.py`` CSV). Rows this model does not read are ignored.

    Raises:
        CalibrationError: no such file, or a file without the CSV's columns or with a non-numeric value.
    """
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as err:
        raise CalibrationError(
            f"GPU calibration {path}: cannot be read ({err.strerror or err}); pass the CSV that "
            "benchmarks/bench_gpu.py wrote (dmllab study --calibration PATH)"
        ) from None
    need = {"benchmark", "setting", "metric", "value", "device"}
    if rows and not need <= set(rows[0]):
        raise CalibrationError(
            f"GPU calibration {path}: needs the columns {sorted(need)} of bench_gpu.py's CSV"
        )
    tables: dict[str, dict[Key, dict[int, float]]] = {"model_step": {}, "embed": {}, "end_to_end": {}}
    loader: dict[int, float] = {}
    warm: list[float] = []
    quick: dict[int, float] = {}
    for n, row in enumerate(rows, start=2):
        try:
            value = float(row["value"])
        except ValueError:
            raise CalibrationError(
                f"GPU calibration {path}, line {n}: value {row['value']!r} is not a number"
            ) from None
        bench, setting, metric = row["benchmark"], row["setting"], row["metric"]
        m = SETTING.match(setting)
        if bench in tables and metric == "images_per_s" and m:
            key = (m["backbone"], int(m["crop"]), m["precision"])
            tables[bench].setdefault(key, {})[int(m["batch"])] = value
        elif bench == "loader" and metric == "images_per_s" and (lm := LOADER_SETTING.match(setting)):
            loader[int(lm["batch"])] = value
        elif bench == "quick_run" and metric == "wall_time_s" and setting.endswith("_warm"):
            warm.append(value)
        elif bench == "quick_workers" and metric == "s_per_run" and setting.startswith("workers"):
            quick[int(setting.removeprefix("workers"))] = value
    if warm:
        quick.setdefault(1, sum(warm) / len(warm))
    devices = sorted({r["device"] for r in rows})
    return Calibration(
        str(path),
        ", ".join(devices) or "no rows",
        tables["model_step"],
        tables["embed"],
        tables["end_to_end"],
        loader,
        quick,
    )


# ------------------------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class Workload:
    """What one run processes: its backbone, crop, batch sizes and precision, and its images."""

    backbone: str
    crop: int
    precision: str
    batch: int
    eval_batch: int
    train_images: float  # stage 2 counted as long as stage 1
    stage2_images: float  # the part of train_images that is stage 2
    eval_images: float


@dataclass(frozen=True)
class Unpriced:
    """A run the calibration cannot price, and why (the missing row)."""

    why: str


@cache
def crop_size(transform: str) -> int:
    """:func:`dmllab.data.transforms.crop_size`."""
    from dmllab.data.transforms import crop_size as size

    return size(transform)


def _split_images(dataset: str, split: str) -> float:
    from dmllab.data import DATASETS
    from dmllab.data.folds import parse_fold_split

    cls = DATASETS.get(dataset)
    fold = parse_fold_split(split)
    if fold is None:
        return float(cls.split_images(split))
    _, folds, part = fold
    return cls.split_images("trainval") * ((folds - 1) / folds if part == "train" else 1 / folds)


def _evaluations(total_epochs: int, every: int) -> int:
    return sum(1 for e in range(1, total_epochs + 1) if e % every == 0 or e == total_epochs)


def workload(cfg: ExperimentConfig) -> Workload | Unpriced:
    """The images ``cfg`` trains and evaluates in a real (not fast dev) run, from the protocol's stage plans and the
    canonical split sizes (an MLRC fold's parts: (folds - 1) / folds and 1 / folds of ``trainval``): per stage
    (warm-up + schedule epochs) x the split's full batches (warm-up epochs, with the trunk frozen, counted as full
    steps: an over-estimate of a few percent), stage 2 counted as long as stage 1 (its upper bound); the
    validation split at every evaluated epoch of stage 1 and the test split (or query + gallery) once."""
    import dataclasses

    from dmllab.data.real import is_real_dataset
    from dmllab.training.protocol import stage2_plan, stage_plans, training_config

    if not is_real_dataset(cfg.dataset):
        return Unpriced(f"dataset {cfg.dataset!r} has no canonical size (not a real benchmark)")
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, fast_dev_run=0))
    d = training_config(cfg).data
    plan = stage_plans(cfg)[0]
    batch, ds = d.batch_size, cfg.dataset

    def images(split: str, epochs: int) -> float:
        return epochs * (_split_images(ds, split) // batch) * batch

    stage1 = images(plan.train_split, plan.total_epochs)
    stage2 = 0.0
    if cfg.run.two_stage:
        s2 = stage2_plan(cfg, best=plan.epochs, drops=[])
        stage2 = images(s2.train_split, s2.total_epochs)
    evals = 0.0
    if plan.eval_split is not None:
        evals += _evaluations(plan.total_epochs, cfg.run.eval_every) * _split_images(ds, plan.eval_split)
    tests = [d.test_split] if d.test_split else [s for s in (d.query_split, d.gallery_split) if s]
    evals += sum(_split_images(ds, s) for s in tests)
    precision = AMP_PRECISION.get(cfg.run.amp, cfg.run.amp)
    return Workload(
        cfg.model.backbone.name,
        crop_size(d.transform),
        precision,
        batch,
        d.eval_batch_size,
        stage1 + stage2,
        stage2,
        evals,
    )


# ---------------------------------------------------------------------------------------------- price


@dataclass(frozen=True)
class Price:
    """GPU seconds of one run: the central value within [low, high] (module docstring), and the approximations the
    rates needed (empty: every rate measured as such)."""

    seconds: float
    low_s: float
    high_s: float
    notes: tuple[str, ...] = ()
    from_images: bool = True  # False: the measured time of a whole run of its profile

    @property
    def hours(self) -> float:
        return self.seconds / 3600


def _at_batch(table: Mapping[int, float], batch: int) -> tuple[float, str]:
    """The rate at ``batch`` from rates at measured batches, and the approximation used ("" when measured)."""
    if batch in table:
        return table[batch], ""
    below = [b for b in table if b < batch]
    above = [b for b in table if b > batch]
    if below and above:
        lo, hi = max(below), min(above)
        rate = table[lo] + (table[hi] - table[lo]) * (batch - lo) / (hi - lo)
        return rate, f"batch {batch} interpolated between {lo} and {hi}"
    nearest = min(table, key=lambda b: abs(b - batch))
    return table[nearest], f"batch {batch} at the rate of batch {nearest} (outside the measured ones)"


def _rate(
    tables: Mapping[Key, Mapping[int, float]], backbone: str, crop: int, precision: str, batch: int
) -> tuple[float, list[str]] | None:
    """The rate of ``(backbone, crop, precision)`` at ``batch`` with the approximations it needed, None where the
    backbone has no row at that precision (or at the precision :data:`SAME_SPEED` allows)."""
    notes: list[str] = []
    crops = {c: t for (b, c, p), t in tables.items() if b == backbone and p == precision}
    if not crops and precision in SAME_SPEED:
        alias = SAME_SPEED[precision]
        crops = {c: t for (b, c, p), t in tables.items() if b == backbone and p == alias}
        notes.append(f"{precision} at the {alias} rate")
    if not crops:
        return None
    measured = crop if crop in crops else min(crops, key=lambda c: abs(c - crop))
    rate, note = _at_batch(crops[measured], batch)
    if note:
        notes.append(note)
    if measured != crop:
        rate *= (measured / crop) ** 2
        notes.append(f"{crop} px crops scaled from {measured} px by the pixel ratio")
    return rate, notes


def price(work: Workload | Unpriced, cal: Calibration) -> Price | Unpriced:
    """The GPU seconds of a run that processes ``work`` on the card of ``cal`` (module docstring)."""
    if isinstance(work, Unpriced):
        return work
    w = work
    step = _rate(cal.step, w.backbone, w.crop, w.precision, w.batch)
    if step is None:
        return Unpriced(
            f"no model_step row for {w.backbone} at {w.precision} in {Path(cal.source).name} "
            f"(benchmarks/bench_gpu.py --only model_step --settings plan measures it)"
        )
    step_rate, notes = step
    loader = _at_batch(cal.loader, w.batch)[0] if cal.loader else math.inf
    if not cal.loader:
        notes.append("no loader row: model-bound")
    embed = _rate(cal.embed, w.backbone, w.crop, w.precision, w.eval_batch)
    if embed is None:
        eval_step = _rate(cal.step, w.backbone, w.crop, w.precision, w.eval_batch)
        forward = FORWARD_SPEEDUP * (eval_step or step)[0]
        notes.append(f"evaluation at {FORWARD_SPEEDUP:g} x the step's rate (no embed row)")
    else:
        forward = embed[0]
    eval_loader = _at_batch(cal.loader, w.eval_batch)[0] if cal.loader else math.inf
    eval_s = w.eval_images / min(forward, eval_loader)
    central = w.train_images / min(step_rate, loader) + eval_s
    low = (w.train_images - (1 - STAGE2_LOW) * w.stage2_images) / step_rate + w.eval_images / forward
    e2e = _rate(cal.end_to_end, w.backbone, w.crop, w.precision, w.batch)
    high = w.train_images / e2e[0] + eval_s if e2e is not None else central
    return Price(central, min(low, central), max(high, central), tuple(dict.fromkeys(notes)))


def price_config(cfg: ExperimentConfig, cal: Calibration) -> Price | Unpriced:
    """:func:`price` of :func:`workload`; a run on a dataset without a canonical size (the offline benchmark) at
    the calibration's measured seconds of a run of its profile where there are any (``quick_run`` rows)."""
    work = workload(cfg)
    measured = cal.gpu_run_s(cfg.profile) if isinstance(work, Unpriced) else None
    if measured is not None:
        return Price(measured, measured, measured, (f"a measured {cfg.profile} run",), from_images=False)
    return price(work, cal)


def hours_text(seconds: float) -> str:
    """GPU seconds as the plan and the docs print hours: ``"1,378.5"``."""
    return f"{seconds / 3600:,.1f}"


def total(prices: Iterable[Price | Unpriced | None]) -> tuple[float, float, float, int]:
    """``(central, low, high)`` GPU seconds of the priced ones, and how many are not priced."""
    prices = list(prices)
    priced = [p for p in prices if isinstance(p, Price)]
    return (
        sum(p.seconds for p in priced),
        sum(p.low_s for p in priced),
        sum(p.high_s for p in priced),
        len(prices) - len(priced),
    )
