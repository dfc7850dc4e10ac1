"""Whether the methods a claim compares learn on a profile (the offline benchmark's validation gate:
:func:`training_status`, :class:`Gate`, :func:`testability`), how much relative to ProxyNCA++ (:func:`learning`, a
caveat) and whether the profile is in the papers' regime (:func:`regime`: the mean training R@1 of the profile's
committed ProxyNCA++ runs; the regime benchmark, ``benchmarks/quick_regime.py``, :func:`regime_benchmark`, adds
whether a cheaper setting was measured to fit); the rules are docs/preregistration.md's.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmllab.experiments import stats
from dmllab.experiments.artifact import Claim

# The offline benchmark's rows that say whether a method trains on a profile: validation R@1 of the method's
# default recipe trained on the training classes minus the pre-trained network's (same pooling, same draw), one
# row per seed.
STATUS_ARTIFACT = "offline_benchmark"
GAIN_METRIC = "val_gain_over_pretrained"
# Pre-registered (docs/preregistration.md): the gain's 95% lower bound must be above THRESHOLD, with at most
# MAX_DIVERGED diverged seeds; the learning caveat is relative to REFERENCE_METHOD; the profile is in the papers'
# regime when REFERENCE_METHOD's training R@1 (percent) reaches REGIME_TRAIN_R1.
THRESHOLD = 0.0
MAX_DIVERGED = 0
REFERENCE_METHOD = "proxynca++"
REGIME_TRAIN_R1 = 85.0
# The committed runs' training R@1 the regime reads: ProxyNCA++'s test-split runs of the offline benchmark.
REGIME_VARIANT, TRAIN_METRIC = "ProxyNCA++", "train_R@1"
# The regime benchmark's CSV under the results folder (benchmarks/quick_regime.py): per candidate setting and method,
# train_R1 and test_R1 (percent), the projected study (projected_study_min), fits and in_budget.
REGIME_BENCHMARK = Path("benchmarks") / "quick_regime.csv"


@dataclass(frozen=True)
class Gate:
    """Whether a method trains on a profile: its per-seed validation gains' mean and 95% lower bound, the
    threshold the lower bound must be above, the seeds that did not diverge and those that did."""

    mean: float
    low: float
    threshold: float
    seeds: int
    diverged: int = 0

    @property
    def trains(self) -> bool:
        return self.low > self.threshold and self.diverged <= MAX_DIVERGED


TrainingStatus = Mapping[str, Gate]


def training_status(profile: str, results_dir: str | os.PathLike | None = None) -> dict[str, Gate]:
    """``{method label: Gate}`` from the offline benchmark's :data:`GAIN_METRIC` rows of ``profile`` in
    ``<results>/offline_benchmark.csv``, judged against :data:`THRESHOLD` (a ``param_threshold`` the rows may
    still carry is an older rule's, not read). Empty when the file or the rows are absent (the status is then
    unknown)."""
    rows = _status_rows(profile, results_dir)
    if rows is None:
        return {}
    rows = rows[rows["metric"] == GAIN_METRIC]
    return {str(label): from_gains(part["value"]) for label, part in rows.groupby("variant", sort=False)}


def _status_rows(profile: str, results_dir: str | os.PathLike | None) -> Any:
    """``profile``'s rows of ``<results>/offline_benchmark.csv``; None when the file is absent."""
    from dmllab import paths
    from dmllab.results import read_rows

    path = Path(results_dir if results_dir is not None else paths.results_dir()) / f"{STATUS_ARTIFACT}.csv"
    if not path.exists():
        return None
    rows = read_rows(path)
    return rows[rows["profile"] == profile]


def from_gains(gains: Any, threshold: float = THRESHOLD) -> Gate:
    """A method's :class:`Gate` from its per-seed gains; a diverged seed's gain is NaN (counted in
    ``diverged``: more than :data:`MAX_DIVERGED` and the method does not train)."""
    raw = [float(v) for v in gains]
    values = [v for v in raw if math.isfinite(v)]
    iv = stats.interval(values) if values else None
    low = iv.low if iv is not None and iv.n >= stats.MIN_SEEDS else -math.inf
    return Gate(iv.mean if iv else math.nan, low, threshold, len(values), len(raw) - len(values))


def testability(claim: Claim, profile: str | None, status: TrainingStatus | None) -> tuple[bool, str]:
    """``(testable, why)``: not testable when ``claim.not_testable`` names ``profile`` or one of ``claim.arms``
    (the methods the claim says are better or equal; never its ``worse_arms``) does not train there (a method
    whose status is unknown is judged as if it trained: the report says once that the status is unknown)."""
    if profile in claim.not_testable:
        return False, claim.not_testable[profile]
    status = status or {}
    failing = [a for a in claim.arms if a in status and not status[a].trains]
    if failing:
        return False, "; ".join(fails(a, status[a], profile) for a in failing)
    return True, ""


def fails(method: str, gate: Gate, profile: str | None) -> str:
    """Why ``method`` does not train on ``profile``, in one line."""
    if gate.diverged > MAX_DIVERGED:
        return f"{method} does not train on {profile} ({gate.diverged} seed(s) diverged)"
    return (
        f"{method} does not learn on {profile} (validation R@1 gain over the pre-trained network "
        f"{gate.mean:+.1f}, 95% lower bound {gate.low:+.1f}, not above {gate.threshold:g})"
    )


def learning(claim: Claim, status: TrainingStatus | None) -> str:
    """The caveat of ``claim``: how much each method it compares learns, as its mean validation gain over the
    pre-trained network relative to :data:`REFERENCE_METHOD`'s (``""`` without the status or the reference)."""
    status = status or {}
    reference = status.get(REFERENCE_METHOD)
    methods = list(dict.fromkeys((*claim.arms, *claim.worse_arms, *claim.member_arms.values())))
    shown = [m for m in methods if m in status and m != REFERENCE_METHOD]
    if reference is None or not shown or not reference.mean > 0:
        return ""
    ratios = ", ".join(f"{m} {status[m].mean / reference.mean:.2f}" for m in shown)
    return f"learns relative to {REFERENCE_METHOD} (validation gain ratio): {ratios}"


@dataclass(frozen=True)
class Regime:
    """ProxyNCA++'s training R@1 (percent) on a profile and where the number comes from."""

    train_r1: float
    source: str

    @property
    def fits(self) -> bool:
        """Whether the profile is in the papers' regime (its models fit their training classes)."""
        return self.train_r1 >= REGIME_TRAIN_R1

    def why(self, profile: str | None) -> str:
        return (
            f"not testable on {profile}: optimisation-limited (train R@1 {self.train_r1:.1f} %, {self.source}; the "
            f"papers' regime needs >= {REGIME_TRAIN_R1:g} %)"
        )


def regime(profile: str, results_dir: str | os.PathLike | None = None) -> Regime | None:
    """ProxyNCA++'s mean training R@1 over the seeds on ``profile``: the committed runs' :data:`TRAIN_METRIC` of
    the offline benchmark's ProxyNCA++ rows, labelled as such (None: no such rows, or the paper profile, whose
    datasets are the papers' own)."""
    rows = None if profile == "paper" else _status_rows(profile, results_dir)
    if rows is None:
        return None
    train = rows.loc[(rows["variant"] == REGIME_VARIANT) & (rows["metric"] == TRAIN_METRIC), "value"]
    train = train.astype(float)
    if train.empty:
        return None
    source = (
        f"mean over {len(train)} seeds of the committed {profile} ProxyNCA++ runs' training R@1 in "
        f"results/{STATUS_ARTIFACT}.csv; {regime_benchmark(profile, results_dir)}"
    )
    return Regime(float(train.mean()), source)


def regime_benchmark(profile: str, results_dir: str | os.PathLike | None = None) -> str:
    """What the regime benchmark (:data:`REGIME_BENCHMARK`) measured for :data:`REFERENCE_METHOD` on ``profile``,
    in one clause: the cheapest setting that fits within the study's budget, or that none does with the best
    within it and the best at any cost (``"no regime benchmark committed"`` without its rows)."""
    from dmllab import paths

    path = Path(results_dir if results_dir is not None else paths.results_dir()) / REGIME_BENCHMARK
    rows = []
    if path.exists():
        with path.open(newline="") as fh:
            rows = [
                r for r in csv.DictReader(fh) if (r["profile"], r["method"]) == (profile, REFERENCE_METHOD)
            ]
    if not rows:
        return "no regime benchmark committed"

    def said(r: dict[str, str]) -> str:
        return (
            f"{r['knobs']}: train R@1 {float(r['train_R1']):.1f} %, test {float(r['test_R1']):.1f} %, a study of "
            f"about {float(r['projected_study_min']):.0f} min"
        )

    def fit(r: dict[str, str]) -> float:
        return float(r["train_R1"])

    where = f"results/{REGIME_BENCHMARK.as_posix()}"
    within = [r for r in rows if r["in_budget"] == "True"]
    fitting = [r for r in within if r["fits"] == "True"]
    if fitting:
        cheapest = min(fitting, key=lambda r: float(r["projected_study_min"]))
        return f"the cheapest {profile} setting measured to fit ({where}) is {said(cheapest)}"
    text = f"no {profile} setting measured in {where} fits within the study's budget"
    if within:
        text += f" (the best within it, {said(max(within, key=fit))})"
    return text + f"; the best measured at any cost, {said(max(rows, key=fit))}"
