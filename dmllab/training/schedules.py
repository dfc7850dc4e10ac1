"""Learning-rate and temperature schedules as pure functions of the schedule epoch.

Epochs here are *schedule epochs*, 1-based, after the warm-up epochs (which the schedules never see,
official-code.md: "5 extra epochs before the schedule starts"). A "drop epoch" ``d`` means: the lr is
lowered after epoch ``d`` finished, i.e. epochs ``> d`` run with the lower lr. This is what
``torch.optim.lr_scheduler.ReduceLROnPlateau.step(metric)`` and ``MultiStepLR`` (milestone ``d``, stepped
once per epoch) do, and is how ProxyNCA++ stage 2 replays the drops recorded in stage 1 (paper Sec. 4.1).

Because the plateau decision is a pure function of the validation history, resuming a run only needs the
history, and the two-stage bookkeeping is testable without training.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MONITORS = ("R@1", "hmean_r1", "hmean_nmi_r1")


def plateau_drop_epochs(
    values: Sequence[float], *, patience: int, threshold: float = 1e-4, cooldown: int = 0
) -> list[int]:
    """Epochs after which ReduceLROnPlateau(mode="max", threshold_mode="rel") lowers the lr.

    Mirrors torch's rule: a value improves when ``v > best * (1 + threshold)``; after more than
    ``patience`` epochs without improvement the lr drops and the bad-epoch count restarts (after
    ``cooldown`` epochs during which bad epochs are not counted). torch also skips a drop smaller than
    ``eps=1e-8`` in absolute lr; that floor is not modelled (it is reached only after ~6 drops of a 4e-3 lr).

    Args:
        values: validation metric (e.g. R@1) per schedule epoch, epoch 1 first.
        patience: epochs without improvement tolerated (ProxyNCA++: 4).
    Returns:
        1-based drop epochs, ascending.
    """
    best = -math.inf
    bad = 0
    cool = 0
    drops: list[int] = []
    for epoch, v in enumerate(values, start=1):
        if v > best * (1.0 + threshold):  # torch's rule, also for best <= 0
            best = v
            bad = 0
        else:
            bad += 1
        if cool > 0:
            cool -= 1
            bad = 0
        if bad > patience:
            drops.append(epoch)
            cool = cooldown
            bad = 0
    return drops


def hmean_nmi_r1(nmi: float, r1: float) -> float:
    """Harmonic mean ``2 * NMI * R@1 / (NMI + R@1)`` (the ProxyNCA++ authors' code, train.py ``chmean``);
    both on the same scale (fractions here); 0 when both are 0."""
    total = nmi + r1
    return 0.0 if total == 0 else 2.0 * nmi * r1 / total


def hmean_r1(r1: float) -> float:
    """``2 * R@1 / (1 + R@1)`` (R@1 a fraction): what the ProxyNCA++ authors' code monitors in its train mode, where
    ``--eval_nmi`` is off (train.py sets it only for the trainval/test modes), ``utils.evaluate`` returns
    ``nmi = 1`` and ``chmean = 2 * nmi * R@1 / (nmi + R@1)`` (train.py). It ranks epochs exactly as R@1 (strictly
    increasing), but ReduceLROnPlateau's relative threshold (``v > best * (1 + 1e-4)``) sees it improve by a factor
    ``1 + R@1`` less than R@1, so a small gain in R@1 can count for one and not for the other."""
    return hmean_nmi_r1(1.0, r1)


def monitor_needs_nmi(monitor: str) -> bool:
    """Whether the per-epoch validation must compute NMI for ``monitor`` (see :func:`monitored_value`)."""
    if monitor not in MONITORS:
        raise ValueError(f"unknown monitor {monitor!r}; valid: {', '.join(MONITORS)}")
    return monitor == "hmean_nmi_r1"


def monitored_value(row: Mapping[str, float], monitor: str) -> float:
    """The value the plateau rule and the best-epoch choice look at, from a history row's ``val_R@1`` /
    ``val_NMI``: "R@1" (the ProxyNCA++ paper, Sec. 4.1), "hmean_r1" (the authors' code as released and run:
    :func:`hmean_r1`) or "hmean_nmi_r1" (the harmonic mean with the validation NMI, which the authors' code
    computes only when ``--eval_nmi`` is given)."""
    if not monitor_needs_nmi(monitor):
        r1 = float(row["val_R@1"])
        return hmean_r1(r1) if monitor == "hmean_r1" else r1
    if "val_NMI" not in row:
        raise ValueError("monitor 'hmean_nmi_r1' needs the validation NMI (val_NMI) in every history row")
    return hmean_nmi_r1(float(row["val_NMI"]), float(row["val_R@1"]))


def lagged_milestones(drops: Sequence[int], lag: int) -> tuple[int, ...]:
    """Stage-2 MultiStepLR milestones replaying stage-1 drop epochs ``drops`` ``lag`` epochs later.

    ``lag=0``: the paper's description (Sec. 4.1: the lr drops at the same epochs as in stage 1).
    ``lag=1``: the authors' code, which calls ``MultiStepLR.step(e)`` at the *end* of epoch ``e`` with the
    milestones = the stage-1 epochs that first ran at the lower lr (``d + 1``), so epoch ``d + 1`` still runs
    at the old lr and the drop takes effect from epoch ``d + 2``.
    """
    if lag < 0:
        raise ValueError(f"stage2_drop_lag must be >= 0, got {lag}")
    return tuple(d + lag for d in drops)


def best_epoch(values: Sequence[float]) -> int:
    """1-based epoch of the highest value (the first one on ties), as used for early stopping."""
    if not values:
        raise ValueError("best_epoch needs at least one value")
    best = max(range(len(values)), key=lambda i: (values[i], -i))
    return best + 1


def drops_multiplier(epoch: int, drops: Sequence[int], factor: float) -> float:
    """lr multiplier at schedule epoch ``epoch`` when the lr is multiplied by ``factor`` after each drop epoch."""
    return factor ** sum(1 for d in drops if d < epoch)


def step_multiplier(epoch: int, step_size: int, gamma: float) -> float:
    """StepLR: ``gamma ** ((epoch - 1) // step_size)`` (stepped once per epoch)."""
    if step_size <= 0:
        raise ValueError(f"step_size must be positive, got {step_size}")
    return gamma ** ((epoch - 1) // step_size)


def heated(epoch: int, heat_epoch: int | None) -> bool:
    """Heated-up softmax (Zhang et al., Sec. 3.3): whether schedule epoch ``epoch`` runs "heated"."""
    return heat_epoch is not None and epoch >= heat_epoch


def lr_multiplier(
    epoch: int,
    *,
    scheduler: str,
    drops: Sequence[int] = (),
    factor: float = 0.1,
    milestones: Sequence[int] = (),
    step_size: int = 10,
    gamma: float = 0.5,
) -> float:
    """The factor applied to every base lr at schedule epoch ``epoch`` (1-based); a callback may scale it further
    (Heated-up Softmax's heating, :class:`dmllab.training.callbacks.Heating`).

    Args:
        scheduler: "plateau" (``drops`` from :func:`plateau_drop_epochs` on the history so far),
            "multistep" (``milestones`` and ``factor``), "step" (``step_size``, ``gamma``), "none".
    """
    if epoch < 1:
        raise ValueError(f"schedule epochs are 1-based, got {epoch}")
    if scheduler == "plateau":
        m = drops_multiplier(epoch, drops, factor)
    elif scheduler == "multistep":
        m = drops_multiplier(epoch, milestones, factor)
    elif scheduler == "step":
        m = step_multiplier(epoch, step_size, gamma)
    elif scheduler == "none":
        m = 1.0
    else:
        raise ValueError(f"unknown scheduler {scheduler!r}; valid: plateau, multistep, step, none")
    return m


def check_schedule(*, epochs: int, scheduler: str, milestones: Sequence[int] = ()) -> None:
    """Reject a schedule whose scheduled events cannot all happen, so that a run never silently trains
    something else than its config says.

    * a "multistep" milestone ``d`` (lr lowered after schedule epoch ``d``) must satisfy ``0 <= d < epochs``:
      ``d >= epochs`` would never take effect; ``d = 0`` lowers the lr before the first schedule epoch (after
      the warm-up; the released Proxy Anchor code's StepLR counts its warm-up epochs).

    A callback's events are the callback's to check (:func:`dmllab.training.callbacks.check_callbacks`).

    Raises ValueError: naming the offending value and the fix."""
    if epochs < 1:
        raise ValueError(f"schedule.epochs must be >= 1, got {epochs}")
    if scheduler == "multistep":
        late = [d for d in milestones if not 0 <= d < epochs]
        if late:
            raise ValueError(
                f"schedule.milestones {list(late)} lie outside 0..{epochs - 1}: an lr drop after schedule epoch "
                f"d >= schedule.epochs={epochs} never happens; lengthen the schedule or move the drop"
            )


def loss_alpha(epoch: int, base_alpha: float, *, heat_epoch: int | None, heat_alpha_factor: float) -> float:
    """Heated-up softmax scale: ``alpha`` before ``heat_epoch``, ``alpha * heat_alpha_factor`` from it on
    (paper: 16 -> 4)."""
    return base_alpha * heat_alpha_factor if heated(epoch, heat_epoch) else base_alpha


@dataclass(frozen=True)
class StagePlan:
    """What one stage trains on and for how long.

    Args:
        name: "stage1", "stage2", "single", "finetune" (or "pretrain"); part of the per-epoch seed.
        train_split: split to train on; ``eval_split`` evaluated every ``eval_every`` epochs (None: none).
        epochs: schedule epochs (after ``warmup_epochs`` warm-up epochs with the backbone frozen).
        scheduler, milestones: see :func:`dmllab.training.schedules.lr_multiplier`.
    """

    name: str
    train_split: str
    eval_split: str | None
    epochs: int
    warmup_epochs: int
    scheduler: str
    milestones: tuple[int, ...] = ()

    @property
    def total_epochs(self) -> int:
        return self.warmup_epochs + self.epochs
