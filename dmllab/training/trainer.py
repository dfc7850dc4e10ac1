"""One trainer for every method: it trains one stage of a run, epoch by epoch; behaviour that a run switches on
is a callback on its hooks (:mod:`dmllab.training.callbacks`).

The trainer's parts come from elsewhere: components from :mod:`dmllab.training.build` (model, loss, callbacks),
batches from :class:`dmllab.data.loaders.RunData`, learning rates from the pure functions of
:mod:`dmllab.training.schedules`, the stages from :mod:`dmllab.training.protocol`.

Randomness: every epoch reseeds ``torch``, ``numpy``, ``random`` and the batches from ``(seed, stage, epoch)``
(:func:`dmllab.rng.epoch_seed`), so a run resumed from an epoch checkpoint draws exactly the batches and
augmentations of an uninterrupted run, and the same seed on the CPU gives identical metrics - with the same
number of torch threads (``OMP_NUM_THREADS``): convolution kernels reduce in a thread-count-dependent order, so 1
and 2 threads give different, equally valid runs (provenance.json records ``torch_threads``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dmllab.data.loaders import Prefix, RunData
from dmllab.profiles import check_device, resolve_device
from dmllab.rng import epoch_seed, seed_everything
from dmllab.training import build, schedules
from dmllab.training.callbacks import FastDevRun
from dmllab.training.config import ExperimentConfig
from dmllab.training.evaluation import EpochLoss, embed_batches, evaluate_split, precision_name, resolve_amp
from dmllab.training.optim import build_optimizer, check_all_params_in_groups, param_groups
from dmllab.training.schedules import StagePlan


@dataclass
class StageState:
    """Mutable progress of the current stage (saved in checkpoints through ``Trainer.state_dict``)."""

    plan: StagePlan
    epoch: int = 0  # completed epochs in this stage, warm-up included
    rows: list[dict] = field(default_factory=list)


class Trainer:
    """Trains one :class:`StagePlan` of an experiment config.

    Args:
        cfg: the experiment config (``run.seed`` is the seed unless ``seed`` is given).
        hooks: callbacks (:mod:`dmllab.training.callbacks`), called after those the config switches on.
        progress: show a tqdm bar per epoch (loss, lr, last validation R@1); False for batch runs.
        seed: overrides ``cfg.run.seed``.
        init_from: a final model file (``{"model", "loss"}`` state dicts) loaded into the model and the loss of
            every stage after they are built: a fine-tune starts from its parent's weights.
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        *,
        hooks: Iterable[Any] = (),
        progress: bool = True,
        seed: int | None = None,
        init_from: str | os.PathLike | None = None,
    ) -> None:
        from dmllab.validation import check_value

        self.cfg = build.check(cfg)
        self.seed = cfg.run.seed if seed is None else seed
        check_value("run.seed", self.seed)
        self.fast_dev = FastDevRun(cfg.run.fast_dev_run) if cfg.run.fast_dev_run else None
        self.hooks = [*build.build_callbacks(cfg), *([self.fast_dev] if self.fast_dev else []), *hooks]
        self.progress = progress
        self.init_from = init_from
        # a placed run names its device; "auto" only from a library user's own config
        device = cfg.run.device
        self.device = torch.device(resolve_device(device) if device == "auto" else check_device(device))
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # fixed input sizes: let cuDNN pick its fastest kernels
        self.amp_dtype = resolve_amp(cfg.run.amp, self.device)
        cl = cfg.run.channels_last
        self.channels_last = cl == "on" or (cl == "auto" and self.device.type == "cuda")
        # Seconds spent per phase (summed over stages): data, step (forward/backward/update), eval, cache_build.
        self.timings: dict[str, float] = {"data": 0.0, "step": 0.0, "eval": 0.0, "cache_build": 0.0}
        self.data = RunData(
            cfg.data,
            seed=self.seed,
            device=self.device,
            limit=self.fast_dev.batches if self.fast_dev else None,
            progress=progress,
            timings=self.timings,
            channels_last=self.channels_last,
            image_size=self.fast_dev.image_size(cfg.data) if self.fast_dev else None,
        )
        self.model: nn.Module | None = None
        self.loss: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scaler: torch.amp.GradScaler | None = None
        self.state: StageState | None = None
        self.lr_scale = 1.0  # the epoch's lr factor from callbacks (heating), reset every epoch
        self.steps = 0  # optimiser steps taken, over every stage
        self.images = 0  # training images of those steps

    def _call(self, name: str, *args: Any) -> None:
        for hook in self.hooks:
            fn = getattr(hook, name, None)
            if fn is not None:
                fn(self, *args)

    @property
    def precision(self) -> str:
        """The arithmetic of training and evaluation (:func:`dmllab.training.evaluation.precision_name`)."""
        return precision_name(self.amp_dtype)

    # ------------------------------------------------------------------------------------------ building
    def setup(self, plan: StagePlan) -> None:
        """Build the stage: seeded model and loss, optimiser groups (all loss params asserted), scaler; then the
        ``on_build`` hooks, then a parent's weights (``init_from``)."""
        from dmllab.training.checkpoint import CorruptCheckpointError, load_checkpoint

        seed_everything(epoch_seed(self.seed, plan.name, 0))
        num_classes = self.data.dataset(plan.train_split, train=True).num_classes
        self.model = build.build_model(self.cfg.model, progress=self.progress).to(self.device)
        build.freeze_prefix(self.model, self.cfg.model.frozen_blocks)
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.loss = build.build_loss(self.cfg, num_classes).to(self.device)
        self.reset_optimizer()
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None
        self._call("on_build")
        if self.init_from is not None:
            state = load_checkpoint(self.init_from, "parent model")
            if not isinstance(state.get("model"), dict) or not isinstance(state.get("loss"), dict):
                raise CorruptCheckpointError(
                    f"parent model {self.init_from} lacks the model or the loss state"
                )
            self.model.load_state_dict(state["model"])
            self.loss.load_state_dict(state["loss"])
        self.state = StageState(plan)

    def prefix(self) -> Prefix:
        """The frozen trunk prefix whose outputs the data path caches (:func:`dmllab.training.build.frozen_prefix`)."""
        return build.frozen_prefix(self.model, self.cfg)

    def embedder(self) -> nn.Module:
        """The module mapping a batch of the data path to embeddings (:func:`dmllab.training.build.embedder`)."""
        return build.embedder(self.model, self.cfg)

    def batch_shape(self, split: str) -> tuple[int, int | None]:
        """``(batch_size, per_class)`` of the training batches of ``split`` (a fast dev run shrinks them to fit)."""
        d = self.cfg.data
        if self.fast_dev is None:
            return d.batch_size, None
        labels = self.data.labels(split, prefix=self.prefix())
        return self.fast_dev.batch_shape(self.cfg.dataset, split, labels, d.batch_size, d.per_class)

    # ------------------------------------------------------------------------------------------ schedule
    def apply_schedule(self, plan: StagePlan, epoch: int) -> dict[str, float]:
        """Set group lrs and the backbone freezing (warm-up) for ``epoch``, after the ``on_epoch_start`` hooks
        (which may scale the lrs, ``lr_scale``); return the lrs."""
        sc = self.cfg.schedule
        sched_epoch = epoch - plan.warmup_epochs
        warm = sched_epoch <= 0
        self.lr_scale = 1.0
        self._call("on_epoch_start", epoch, sched_epoch)
        if warm:
            mult = 1.0
        else:
            drops = self.lr_drop_epochs() if plan.scheduler == "plateau" else ()
            mult = schedules.lr_multiplier(
                sched_epoch,
                scheduler=plan.scheduler,
                drops=drops,
                factor=sc.factor,
                milestones=plan.milestones,
                step_size=sc.step_size,
                gamma=sc.gamma,
            )
            if self.lr_scale != 1.0:
                mult *= self.lr_scale
        lrs = {}
        for g in self.optimizer.param_groups:
            g["lr"] = 0.0 if (warm and g["name"] == "backbone") else g["base_lr"] * mult
            lrs[g["name"]] = g["lr"]
        for p in self.model.backbone.parameters():
            p.requires_grad_(not warm)
        build.freeze_prefix(self.model, self.cfg.model.frozen_blocks)  # they stay frozen after the warm-up
        # model.freeze_bn_affine: the BN affine parameters stay without gradient after the loop above; without it
        # they train from the end of the warm-up on (the Proxy Anchor release, train.py at epoch == args.warm)
        self.model.refreeze_bn()
        return lrs

    def val_values(self) -> list[float]:
        """The monitored validation value (``schedule.monitor``) of every validated schedule epoch of the stage."""
        rows = [r for r in self.state.rows if not r["warmup"] and "val_R@1" in r]
        return [schedules.monitored_value(r, self.cfg.schedule.monitor) for r in rows]

    def lr_drop_epochs(self) -> list[int]:
        """Schedule epochs after which ReduceLROnPlateau dropped the lr, from the monitored validation history."""
        return schedules.plateau_drop_epochs(self.val_values(), patience=self.cfg.schedule.patience)

    # ------------------------------------------------------------------------------------------ training
    def _sync_free_steps(self) -> bool:
        """On CUDA without progress bar and step hooks nothing needs the loss on the host each step: the finite
        checks and the loss sum stay on the device and are read once per epoch."""
        return (
            self.device.type == "cuda"
            and not self.progress
            and not any(hasattr(h, "on_step_end") for h in self.hooks)
        )

    def train_epoch(self, plan: StagePlan, epoch: int) -> float:
        """One pass over the epoch's batches of the data path (:meth:`train_batches`); returns the mean loss."""
        split = plan.train_split
        batches = self.data.train_batches(
            plan.name, split, epoch, self.batch_shape(split), self.prefix(), until=plan.total_epochs
        )
        return self.train_batches(plan, epoch, batches)

    def train_batches(self, plan: StagePlan, epoch: int, batches: Iterable[Any]) -> float:
        """Train on ``batches`` (``(inputs, labels)`` pairs, on any device) as epoch ``epoch`` of ``plan`` at the
        lrs set (:meth:`apply_schedule`): forward, loss, backward, the step hooks, clipping, the optimiser step;
        returns the mean loss. Raises NonFiniteLossError on NaN/inf (on the sync-free path, after the last
        batch: :class:`dmllab.training.evaluation.EpochLoss`)."""
        from tqdm.auto import tqdm

        self.model.train()
        self.loss.train()
        last = self.state.rows[-1] if self.state.rows else {}
        bar = tqdm(batches, total=getattr(batches, "total", None), desc=f"{plan.name} ep {epoch}/{plan.total_epochs}",
                   disable=not self.progress, leave=False, dynamic_ncols=True)  # fmt: skip
        sched_epoch = epoch - plan.warmup_epochs
        at = f"stage {plan.name}, epoch {epoch} (schedule epoch {sched_epoch})"
        embedder = self.embedder()
        meter = EpochLoss(self.device, lazy=self._sync_free_steps())
        with meter.context():
            for step, (images, labels) in enumerate(bar, start=1):
                where = f"{at}, step {step}"
                t_step = time.perf_counter()
                emb, draw, labels = self._embed(embedder, images, labels)
                meter.embeddings(emb, where)
                loss = self.loss(emb, labels) if draw is None else self.loss(emb, labels, draw)
                value = meter.add(loss, where)
                info = dict(stage=plan.name, epoch=epoch, sched_epoch=sched_epoch, step=step, loss=value,
                            batch_size=int(labels.shape[0]), embeddings=emb.detach())  # fmt: skip
                self._update(loss, info)
                self.timings["step"] += time.perf_counter() - t_step
                self.steps += 1
                self.images += int(labels.shape[0])
                if self.progress:
                    postfix = {"loss": f"{meter.total / meter.count:.4f}",
                               "lr": f"{self.optimizer.param_groups[0]['lr']:.2e}"}  # fmt: skip
                    if "val_R@1" in last:
                        postfix["val R@1"] = f"{100 * last['val_R@1']:.1f}"
                    bar.set_postfix(postfix, refresh=False)  # drawn at tqdm's own rate, not every step
        if meter.count == 0:
            raise ValueError(f"no training batch in {plan.train_split!r} (fewer images than one batch?)")
        return meter.mean(at)

    def _embed(self, embedder: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> tuple:
        """``(embeddings, draw, labels)`` of one batch moved to the device, embedded in the run's precision; a
        training-step regulariser (mixup: a loss with ``embed``) embeds the batch itself and returns its draw,
        else ``draw`` is None."""
        images = images.to(self.device, non_blocking=True)
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        labels = labels.to(self.device, non_blocking=True)
        dtype, amp = self.amp_dtype or torch.float32, self.amp_dtype is not None
        with torch.autocast(self.device.type, dtype=dtype, enabled=amp):
            if hasattr(self.loss, "embed"):
                emb, draw = self.loss.embed(embedder, images)  # (B, D)
                return emb, draw, labels
            return embedder(images), None, labels  # (B, D)

    def _update(self, loss: torch.Tensor, info: dict[str, Any]) -> None:
        """Backward, the ``on_step_end`` hooks (raw gradients), gradient clipping by value, the optimiser step."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        self._call("on_step_end", info)
        clip = self.cfg.optim.grad_clip_value
        if clip is not None:
            params = [
                *self.model.parameters(),
                *(self.loss.parameters() if self.cfg.optim.clip_proxies else ()),
            ]
            torch.nn.utils.clip_grad_value_(params, clip)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def evaluate(
        self,
        split: str | None = None,
        *,
        query_split: str | None = None,
        gallery_split: str | None = None,
        metrics: Sequence[str] | None = None,
        ks: Sequence[int] | None = None,
        every: int = 1,
    ) -> dict[str, float]:
        """Embed and evaluate ``split`` (or ``query_split`` against ``gallery_split``; every ``every``-th image)
        with dmllab.metrics, in the training's precision and memory format: fractions in [0, 1];
        ``metrics``/``ks`` default to ``cfg.run``."""
        prefix, embedder = self.prefix(), self.embedder()

        def embed(name: str) -> tuple[torch.Tensor, torch.Tensor]:
            batches = self.data.eval_batches(name, prefix, every)
            return embed_batches(embedder, batches, name, self.device, self.amp_dtype, self.channels_last,
                                 allow_collapsed=self.fast_dev is not None)  # fmt: skip

        kw = dict(query_split=query_split, gallery_split=gallery_split, metrics=metrics, ks=ks)
        return evaluate_split(self.cfg.run, embed, split, **kw)

    def fit(self) -> list[dict]:
        """Run the remaining epochs of the set-up stage; returns the stage's history rows. After each epoch: the
        history row, then the ``on_epoch_end`` hooks (the epoch checkpoint among them)."""
        plan = self.state.plan
        if plan.scheduler == "plateau" and (plan.eval_split is None or self.cfg.run.eval_every != 1):
            raise ValueError(
                "the plateau scheduler needs a validation split evaluated every epoch (run.eval_every=1)"
            )
        self._call("on_train_start")
        try:
            self._fit_epochs(plan)
        finally:
            self.data.close()  # the loader workers end with the stage, also when it fails
        self._call("on_stage_end")
        return self.state.rows

    def _fit_epochs(self, plan: StagePlan) -> None:
        from tqdm.auto import tqdm

        for epoch in range(self.state.epoch + 1, plan.total_epochs + 1):
            t0 = time.perf_counter()
            seed_everything(epoch_seed(self.seed, plan.name, epoch))
            if (
                self.cfg.optim.fresh_after_warmup
                and plan.warmup_epochs > 0
                and epoch == plan.warmup_epochs + 1
            ):
                self.reset_optimizer()
            lrs = self.apply_schedule(plan, epoch)
            mean_loss = self.train_epoch(plan, epoch)
            sched_epoch = epoch - plan.warmup_epochs
            row: dict[str, Any] = {
                "stage": plan.name,
                "epoch": epoch,
                "sched_epoch": sched_epoch,
                "warmup": sched_epoch <= 0,
                "loss": mean_loss,
                **{f"lr_{k}": v for k, v in lrs.items()},
            }
            if plan.eval_split and (epoch % self.cfg.run.eval_every == 0 or epoch == plan.total_epochs):
                monitor = self.cfg.schedule.monitor
                wanted = ("recall", "nmi") if schedules.monitor_needs_nmi(monitor) else ("recall",)
                t_eval = time.perf_counter()
                val = self.evaluate(plan.eval_split, metrics=wanted)
                self.timings["eval"] += time.perf_counter() - t_eval
                row.update({f"val_{k}": v for k, v in val.items()})
                row["val_monitor"] = schedules.monitored_value(row, monitor)
            row["time_s"] = time.perf_counter() - t0
            self.state.rows.append(row)
            self.state.epoch = epoch
            if self.progress:
                val_txt = f" val R@1 {100 * row['val_R@1']:.2f}" if "val_R@1" in row else ""
                tqdm.write(f"[{plan.name}] epoch {epoch}/{plan.total_epochs} loss {mean_loss:.4f}{val_txt}")
            self._call("on_epoch_end", epoch, row)

    def reset_optimizer(self) -> None:
        """Replace the optimiser by a fresh one over the same groups (empty Adam moments and step counts).

        With ``optim.fresh_after_warmup`` this runs at the start of the first schedule epoch: the authors' code
        warms up with a separate optimiser that it then discards. A run resumed after that epoch loads the
        checkpointed (post-warm-up) optimiser state and never resets it again, since the reset is tied to the
        epoch number, not to the start of :meth:`fit`.
        """
        groups = param_groups(self.model, self.loss, self.cfg.optim)
        self.optimizer = build_optimizer(groups, self.cfg.optim, fused=self.device.type == "cuda")
        check_all_params_in_groups(self.optimizer, [self.model, self.loss])

    # ------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the stage: model, loss, optimiser, scaler, plan, epoch, rows."""
        return {
            "model": self.model.state_dict(),
            "loss": self.loss.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": None if self.scaler is None else self.scaler.state_dict(),
            "plan": self.state.plan.__dict__,
            "epoch": self.state.epoch,
            "rows": list(self.state.rows),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` into a trainer already :meth:`setup` for the same plan."""
        plan = StagePlan(**{**state["plan"], "milestones": tuple(state["plan"]["milestones"])})
        if plan != self.state.plan:
            raise ValueError(f"checkpoint is for {plan}, the trainer is set up for {self.state.plan}")
        self.model.load_state_dict(state["model"])
        self.loss.load_state_dict(state["loss"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.state.epoch = int(state["epoch"])
        self.state.rows = list(state["rows"])
