"""Whether the methods a claim compares train on a profile: the offline benchmark's validation gate.

A method trains when the lower bound of the 95% t interval of its per-seed validation R@1 gain over the pre-trained
network (its recipe trained on the training classes, the pre-trained network with the same pooling on the same draw)
reaches the threshold (:class:`Gate`); the rows are ``offline_benchmark``'s :data:`GAIN_METRIC` rows
(:func:`training_status`). A claim whose arms include a method that does not train is not testable there
(:func:`testability`).
"""

from __future__ import annotations

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
# row per seed, with the ``param_threshold`` the 95% interval's lower bound must reach.
STATUS_ARTIFACT = "offline_benchmark"
GAIN_METRIC = "val_gain_over_pretrained"


@dataclass(frozen=True)
class Gate:
    """Whether a method trains on a profile: its per-seed validation gains' mean and 95% lower bound, the
    threshold the lower bound must reach, the seeds."""

    mean: float
    low: float
    threshold: float
    seeds: int

    @property
    def trains(self) -> bool:
        return self.low >= self.threshold


TrainingStatus = Mapping[str, Gate]


def training_status(profile: str, results_dir: str | os.PathLike | None = None) -> dict[str, Gate]:
    """``{method label: Gate}`` from the offline benchmark's :data:`GAIN_METRIC` rows of ``profile`` in
    ``<results>/offline_benchmark.csv``. Empty when the file or the rows are absent (the status is then
    unknown)."""
    from dmllab import paths
    from dmllab.results import read_rows

    path = Path(results_dir if results_dir is not None else paths.results_dir()) / f"{STATUS_ARTIFACT}.csv"
    if not path.exists():
        return {}
    rows = read_rows(path)
    if "param_threshold" not in rows.columns:
        return {}
    rows = rows[(rows["profile"] == profile) & (rows["metric"] == GAIN_METRIC)]
    return {
        str(label): from_gains(part["value"], float(part["param_threshold"].astype(float).iloc[0]))
        for label, part in rows.groupby("variant", sort=False)
    }


def from_gains(gains: Any, threshold: float) -> Gate:
    """A method's :class:`Gate` from its per-seed gains (a diverged seed's NaN counts as no gain: the method then
    trains only if the other seeds clear the bar on their own)."""
    values = [float(v) for v in gains if math.isfinite(float(v))]
    iv = stats.interval(values) if values else None
    low = iv.low if iv is not None and iv.n >= stats.MIN_SEEDS else -math.inf
    return Gate(iv.mean if iv else math.nan, low, threshold, len(values))


def testability(claim: Claim, profile: str | None, status: TrainingStatus | None) -> tuple[bool, str]:
    """``(testable, why)``: not testable when ``claim.not_testable`` names ``profile`` or one of ``claim.arms``
    does not train there (a method whose status is unknown is judged as if it trained: the report says once that
    the status is unknown)."""
    if profile in claim.not_testable:
        return False, claim.not_testable[profile]
    if not claim.arms:
        return True, ""
    status = status or {}
    failing = [a for a in claim.arms if a in status and not status[a].trains]
    if failing:
        return False, "; ".join(fails(a, status[a], profile) for a in failing)
    return True, ""


def fails(method: str, gate: Gate, profile: str | None) -> str:
    """Why ``method`` does not train on ``profile``, in one line."""
    return (
        f"{method} does not train on {profile} (validation R@1 gain over the pre-trained network "
        f"{gate.mean:+.1f}, 95% lower bound {gate.low:+.1f} below {gate.threshold:g})"
    )
