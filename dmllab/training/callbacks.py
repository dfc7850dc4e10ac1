"""Trainer callbacks: behaviour that a run switches on, attached to the trainer's hooks.

A callback is any object with some of these methods (no base class needed; :class:`Callback` documents them):

* ``on_build(trainer)``: after the stage's model, loss and optimiser are built, before a parent's weights are
  loaded into them (a fine-tune);
* ``on_train_start(trainer)``: before the stage's first epoch;
* ``on_epoch_start(trainer, epoch, sched_epoch)``: before the epoch's learning rates are set; a callback may
  scale them through ``trainer.lr_scale`` (1 at the start of every epoch);
* ``on_step_end(trainer, info)``: after ``backward()`` and *before* gradient clipping, ``optimizer.step()`` and
  the next ``zero_grad`` (``info``: ``stage, epoch, sched_epoch, step, loss, batch_size, embeddings``);
* ``on_epoch_end(trainer, epoch, row)``: after the epoch's history row (``row``);
* ``on_stage_end(trainer)``: after the stage's last epoch.

Callbacks a config switches on are specs in ``cfg.callbacks`` (:data:`CALLBACKS`, e.g. Heated-up Softmax's
``heating``); the run protocol adds :class:`KeepBest` (``run.keep_best``), :class:`FastDevRun`
(``run.fast_dev_run``) and :class:`EpochCheckpoint` itself.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch

from dmllab.losses import LOSSES
from dmllab.registry import Registry
from dmllab.spec import Spec
from dmllab.training import schedules

# Hooks receive the trainer (:class:`dmllab.training.trainer.Trainer`, which imports this module) and the
# builders a config (:class:`dmllab.training.config.ExperimentConfig`); neither is imported here.
Trainer = Any
ExperimentConfig = Any


class Callback:
    """The hooks a callback may define (module docstring); every one does nothing here."""

    def on_build(self, trainer: Trainer) -> None: ...

    def on_train_start(self, trainer: Trainer) -> None: ...

    def on_epoch_start(self, trainer: Trainer, epoch: int, sched_epoch: int) -> None: ...

    def on_epoch_end(self, trainer: Trainer, epoch: int, row: dict) -> None: ...

    def on_stage_end(self, trainer: Trainer) -> None: ...


class Heating(Callback):
    """Heated-up Softmax (Zhang et al., Sec. 3.3): from schedule epoch ``epoch`` on, the loss's scale ``alpha`` is
    multiplied by ``alpha_factor`` (16 -> 4) and every learning rate by ``lr_factor``.

    The loss is the trainer's loss, or the loss a wrapper (Proxy Synthesis) wraps; it needs an ``alpha``.
    Heating starts from the alpha the loss was built with (a fine-tune's parent weights are loaded after it).

    Args:
        epoch: the first heated schedule epoch (1-based).
        alpha_factor, lr_factor: the factors (> 0).
    """

    def __init__(self, epoch: int, *, alpha_factor: float = 0.25, lr_factor: float = 0.1) -> None:
        from dmllab.validation import check_int, check_number

        self.epoch = check_int("callbacks.heating.epoch", epoch)
        self.alpha_factor = check_number(
            "callbacks.heating.alpha_factor", alpha_factor, low=0.0, low_open=True
        )
        self.lr_factor = check_number("callbacks.heating.lr_factor", lr_factor, low=0.0, low_open=True)
        self.base_alpha: float | None = None

    def check_loss(self, loss: Spec) -> None:
        """Raise ValueError when ``loss``'s innermost loss (under any wrappers) has no ``alpha`` scale to heat."""
        leaf = loss.leaf
        if "alpha" not in inspect.signature(LOSSES.get(leaf.name)).parameters:
            raise ValueError(
                f"callbacks.heating needs a loss with an 'alpha' scale; {leaf.name} has none (heating is "
                "Heated-up Softmax's: method heated_softmax)"
            )

    def check(self, *, epochs: int, two_stage: bool) -> None:
        """Raise ValueError when the heating cannot happen in a schedule of ``epochs`` epochs, or with the
        two-stage protocol (its stage 2 stops at the stage-1 best epoch, possibly before heating)."""
        if not 1 <= self.epoch <= epochs:
            raise ValueError(
                f"callbacks.heating.epoch={self.epoch} is outside 1..schedule.epochs={epochs}: the run would end "
                "before heating (HLN/HBN would be LN/BN); lengthen the schedule or heat earlier"
            )
        if two_stage:
            raise ValueError(
                "a heated run (callbacks.heating) trains a fixed schedule: the two-stage protocol stops stage 2 "
                "at the stage-1 best epoch, possibly before heating; use run.two_stage=false"
            )

    @staticmethod
    def target(loss: torch.nn.Module) -> Any:
        """The module whose ``alpha`` heats: the innermost loss, under any wrappers (``.base``; a wrapper's own
        ``alpha``, e.g. Proxy Synthesis' Beta parameter, is not a scale)."""
        while hasattr(loss, "base"):
            loss = loss.base
        if not hasattr(loss, "alpha"):
            raise ValueError(
                f"callbacks.heating needs a loss with an 'alpha' scale; {type(loss).__name__} has none"
            )
        return loss

    def on_build(self, trainer: Trainer) -> None:
        self.base_alpha = float(self.target(trainer.loss).alpha)

    def on_epoch_start(self, trainer: Trainer, epoch: int, sched_epoch: int) -> None:
        if sched_epoch > 0 and schedules.heated(sched_epoch, self.epoch):
            trainer.lr_scale *= self.lr_factor
        self.target(trainer.loss).alpha = schedules.loss_alpha(
            max(sched_epoch, 1), self.base_alpha, heat_epoch=self.epoch, heat_alpha_factor=self.alpha_factor
        )


class KeepBest(Callback):
    """``run.keep_best``: a CPU copy of the model's and the loss's weights at the best monitored validation value
    (``val_monitor`` of the history row; warm-up epochs excluded), loaded back by :meth:`restore` for the test.
    Its state travels in the epoch checkpoint (it observes an epoch before :class:`EpochCheckpoint` saves it),
    so a resumed run keeps its best epoch."""

    def __init__(self) -> None:
        self.best: float | None = None
        self.epoch: int | None = None
        self.state: dict[str, dict[str, torch.Tensor]] | None = None

    def on_epoch_end(self, trainer: Trainer, epoch: int, row: dict) -> None:
        value = row.get("val_monitor")
        if value is None or row.get("warmup"):
            return
        if self.best is None or value > self.best:
            self.best, self.epoch = float(value), int(row["sched_epoch"])
            self.state = {
                "model": {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()},
                "loss": {k: v.detach().cpu().clone() for k, v in trainer.loss.state_dict().items()},
            }

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "epoch": self.epoch, "state": self.state}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state:
            self.best, self.epoch, self.state = state["best"], state["epoch"], state["state"]

    def restore(self, trainer: Trainer) -> None:
        """Load the best epoch's weights into ``trainer`` (no-op without a validated epoch)."""
        if self.state is not None:
            trainer.model.load_state_dict(self.state["model"])
            trainer.loss.load_state_dict(self.state["loss"])


class FastDevRun(Callback):
    """``run.fast_dev_run`` = N: a run that checks its code path in seconds. The data keep the first N batches of
    every epoch and evaluation (:class:`dmllab.data.loaders.RunData`'s ``limit``), the DataLoader path's images
    are resized to :data:`IMAGE_SIZE` after the preset's transform, a class-balanced batch shrinks
    to fit a split with fewer classes or images than it holds (:meth:`batch_shape`, recorded in ``shrunk``), and
    the evaluation accepts collapsed embeddings (a few steps from a random trunk may leave them so). The
    schedule is cut by :func:`dmllab.training.protocol.training_config`."""

    #: The images of the DataLoader path are resized to this size after the preset's transform (every step of the
    #: transform still runs, on the real images): the real backbone at the papers' 224-256 px crops takes minutes
    #: a step on a laptop's CPU, at this size seconds (Inception-v3, the pickiest backbone, needs 75 px).
    IMAGE_SIZE = 96

    def __init__(self, batches: int) -> None:
        self.batches = int(batches)
        self.shrunk: list[str] = []  # what was shrunk to fit the data, one line each

    def image_size(self, data: Any) -> int | None:
        """The size a fast dev run's DataLoader images are resized to (:data:`IMAGE_SIZE`), recorded in ``shrunk``;
        None for in-memory data and for crops no larger (never enlarged)."""
        from dmllab.data.transforms import crop_size

        if data.in_memory:
            return None
        crop = crop_size(data.transform)
        if crop <= self.IMAGE_SIZE:
            return None
        note = f"images: the {data.transform} preset's {crop} px crops resized to {self.IMAGE_SIZE} x {self.IMAGE_SIZE}"
        if note not in self.shrunk:
            self.shrunk.append(note)
        return self.IMAGE_SIZE

    def batch_shape(
        self, dataset: str, split: str, labels: Any, batch_size: int, per_class: int | None
    ) -> tuple[int, int | None]:
        """``(batch_size, per_class)`` shrunk to fit ``split``: ``batch_size // per_class`` classes capped at the
        split's classes, then ``per_class`` capped so that one batch fits."""
        labels = np.asarray(labels).reshape(-1)
        n, n_classes = len(labels), len(np.unique(labels))
        if per_class:
            classes = max(1, min(batch_size // per_class, n_classes))
            fit = per_class if classes * per_class <= n else max(1, n // classes)
            shape: tuple[int, int | None] = (classes * fit, fit)
        else:
            shape = (max(1, min(batch_size, n)), None)
        if shape != (batch_size, per_class):

            def fmt(bs: int, pc: int | None) -> str:
                return f"{bs} = {bs // pc} classes x {pc}" if pc else f"{bs} random images"

            note = (
                f"{dataset} {split}: batch {fmt(batch_size, per_class)} -> {fmt(*shape)} "
                f"({n_classes} classes, {n} images)"
            )
            if note not in self.shrunk:
                self.shrunk.append(note)
        return shape


class EpochCheckpoint(Callback):
    """Writes the run's epoch checkpoint (``save(trainer)`` builds and writes it) after an epoch when ``minutes``
    have passed since the stage started or since the last checkpoint was written, and after the stage's last
    epoch (``run.checkpoint_minutes``; 0: after every epoch).

    An interrupted run resumes after its last checkpointed epoch and trains the epochs after it again; every epoch
    is reseeded from (seed, stage, epoch), so it draws the same batches and ends as an uninterrupted run would:
    the interval bounds the work lost, never the result.

    :meth:`request` (process-wide: a SLURM job's preemption signal) makes the next epoch's end write the
    checkpoint whatever the interval, then call what asked with the epoch; :attr:`written` counts the checkpoints this process
    wrote (a requeued job's progress)."""

    written: ClassVar[int] = 0
    _requests: ClassVar[list[Callable[[int], None]]] = []

    def __init__(
        self,
        save: Callable[[Trainer], None],
        minutes: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.save, self.seconds, self.clock = save, 60.0 * minutes, clock
        self.last = clock()

    @classmethod
    def request(cls, then: Callable[[int], None]) -> None:
        """Write the checkpoint at the end of the current epoch, then call ``then(epoch)`` (safe in a signal
        handler)."""
        cls._requests.append(then)

    def on_train_start(self, trainer: Trainer) -> None:
        self.last = self.clock()

    def on_epoch_end(self, trainer: Trainer, epoch: int, row: dict) -> None:
        asked = EpochCheckpoint._requests
        if asked or epoch >= trainer.state.plan.total_epochs or self.clock() - self.last >= self.seconds:
            self.save(trainer)
            EpochCheckpoint.written += 1
            self.last = self.clock()
        EpochCheckpoint._requests = []
        for then in asked:
            then(epoch)


#: The callbacks a config can switch on by name (``cfg.callbacks``).
CALLBACKS: Registry = Registry("callback")
CALLBACKS.register("heating", Heating)


def build_callbacks(cfg: ExperimentConfig) -> list[Any]:
    """The callbacks ``cfg.callbacks`` switches on, built from their specs (in the config's order)."""
    return [CALLBACKS.get(spec.name)(**spec.kw) for spec in cfg.callbacks]


def check_callback_losses(cfg: ExperimentConfig) -> list[Any]:
    """The callbacks of ``cfg``, built; raise ValueError when one cannot act on ``cfg``'s loss (``check_loss``)."""
    callbacks = build_callbacks(cfg)
    for callback in callbacks:
        if hasattr(callback, "check_loss"):
            callback.check_loss(cfg.loss)
    return callbacks


def check_callbacks(cfg: ExperimentConfig, *, epochs: int, two_stage: bool) -> None:
    """Raise ValueError when a callback cannot act on ``cfg``'s loss or its events cannot happen in a stage of
    ``epochs`` schedule epochs."""
    for callback in check_callback_losses(cfg):
        if hasattr(callback, "check"):
            callback.check(epochs=epochs, two_stage=two_stage)
