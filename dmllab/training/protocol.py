"""The evaluation protocols: ProxyNCA++'s two-stage protocol and a single-stage mode.

Two-stage (ProxyNCA++ Sec. 4.1, official-code.md): stage 1 trains on ``train`` with a validation value every
epoch (``schedule.monitor``: R@1 as in the paper, or the NMI/R@1 harmonic mean as in the authors' code) and
ReduceLROnPlateau(max, patience 4, factor 0.1) on it; the epochs where the lr dropped and the best epoch
are recorded. Stage 2 trains a fresh model on ``trainval`` with the lr dropped at those epochs (MultiStepLR,
``schedule.stage2_drop_lag`` epochs later) and stops after the best epoch; that final model is tested. With a non-plateau scheduler stage 2 follows the
same schedule and also stops after the best epoch. Model selection never looks at the test split.

Single-stage: train on ``data.train_split`` (``trainval`` for In-Shop, constant lr) for all epochs,
optionally watching ``val``, and test the last model.

Fine-tune (``finetune.epochs > 0``, :class:`dmllab.training.config.FinetuneConfig`): one stage ("finetune") that
starts from the parent run's final model (``init_from``, which :func:`dmllab.training.store.run` trains or loads
first) and trains :func:`training_config`'s schedule; the parent's protocol is not repeated.

Interrupted runs resume from the epoch checkpoint (``checkpoint``): finished stages are skipped (their
bookkeeping is re-derived from the saved history), the current stage continues at the next epoch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dmllab.fileio import atomic_open, sidecar, write_sidecar
from dmllab.spec import Spec
from dmllab.training import schedules
from dmllab.training.callbacks import EpochCheckpoint, KeepBest, check_callbacks
from dmllab.training.checkpoint import CorruptCheckpointError, load_checkpoint
from dmllab.training.config import ExperimentConfig, ScheduleConfig, config_hash, is_finetune
from dmllab.training.trainer import StagePlan, Trainer


@dataclass
class RunResult:
    """Outcome of a run: test ``metrics`` (fractions in [0, 1]), per-epoch ``history`` rows (stage, epoch,
    loss, lrs, validation metrics, time), stage-1 ``best_epoch`` and ``lr_drop_epochs`` (None / [] without
    validation), wall time, identity (config hash, seed), where it is stored, whether it came from the store, and the
    precision it trained in; ``train_metrics``: R@1 of the final model on (a sample of) the split it last trained
    on, test transform (:data:`TRAIN_SAMPLE`), so that a reader sees how far a model fits its training classes (the
    artifacts' rows call it ``train_R@1``)."""

    metrics: dict[str, float]
    history: list[dict]
    best_epoch: int | None
    lr_drop_epochs: list[int]
    wall_time_s: float
    config_hash: str
    seed: int
    device: str
    run_dir: str | None = None
    cached: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    precision: str | None = None  # the training's arithmetic (Trainer.precision)
    train_metrics: dict[str, float] = field(default_factory=dict)  # the final model on its training split


#: At most about this many images of the final training split are embedded for ``RunResult.train_metrics`` (every
#: k-th image, so every class is seen).
TRAIN_SAMPLE = 1000
#: A fast dev run's schedule (``run.fast_dev_run``): at most this many warm-up and schedule epochs per stage.
FAST_DEV_WARMUP_EPOCHS = 1
FAST_DEV_EPOCHS = 1


def training_config(cfg: ExperimentConfig) -> ExperimentConfig:
    """The config the trainer runs: ``cfg`` itself, or for a fine-tune (:class:`~dmllab.training.config.FinetuneConfig`)
    the fine-tune's own training: ``finetune.epochs`` epochs on the split the parent's final model was trained on
    (``trainval`` after a two-stage parent, else ``data.train_split``), no warm-up, every base lr x
    ``finetune.lr_factor`` (a "multistep" drop at 0) and the loss's alpha x ``finetune.alpha_factor`` (a heating
    epoch 1) from the first epoch, a single stage. A fast dev run (``run.fast_dev_run``) then trains the schedule
    cut short (:func:`fast_dev_schedule`). Idempotent."""
    if is_finetune(cfg):
        cfg = _finetune_training(cfg)
    return fast_dev_schedule(cfg)


def fast_dev_schedule(cfg: ExperimentConfig) -> ExperimentConfig:
    """A fast dev run's schedule: at most :data:`FAST_DEV_WARMUP_EPOCHS` warm-up and :data:`FAST_DEV_EPOCHS`
    schedule epochs per stage, every scheduled event moved inside them (a "multistep" milestone to
    ``min(d, epochs - 1)``, the heating callback's epoch to ``min(epoch, epochs)``), so that the warm-up, the lr drops,
    the heating and the two-stage switch all run once. ``cfg`` unchanged when ``run.fast_dev_run`` is 0."""
    s = cfg.schedule
    if not cfg.run.fast_dev_run:
        return cfg
    epochs = min(s.epochs, FAST_DEV_EPOCHS)
    schedule = dataclasses.replace(
        s,
        epochs=epochs,
        warmup_epochs=min(s.warmup_epochs, FAST_DEV_WARMUP_EPOCHS),
        milestones=tuple(sorted({min(d, epochs - 1) for d in s.milestones})),
    )
    heating = cfg.callback("heating")
    if heating is not None:
        cfg = cfg.replace("callbacks.heating.epoch", min(heating.get("epoch"), epochs))
    return dataclasses.replace(cfg, schedule=schedule)


def _finetune_training(cfg: ExperimentConfig) -> ExperimentConfig:
    ft, d = cfg.finetune, cfg.data
    schedule = ScheduleConfig(
        epochs=ft.epochs,
        warmup_epochs=0,
        scheduler="none" if ft.lr_factor == 1.0 else "multistep",
        milestones=() if ft.lr_factor == 1.0 else (0,),
        factor=ft.lr_factor,
        monitor=cfg.schedule.monitor,
    )
    others = tuple(c for c in cfg.callbacks if c.name != "heating")
    heating = (
        ()
        if ft.alpha_factor == 1.0
        else (Spec("heating", {"epoch": 1, "alpha_factor": ft.alpha_factor, "lr_factor": 1.0}),)
    )
    split = d.trainval_split if cfg.run.two_stage else d.train_split
    return dataclasses.replace(
        cfg,
        data=dataclasses.replace(d, train_split=split),
        schedule=schedule,
        run=dataclasses.replace(cfg.run, two_stage=False, keep_best=False),
        callbacks=tuple(sorted(others + heating, key=lambda c: c.name)),
    )


def on_validation(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` trained on the ``train`` split for its whole schedule (one stage) and evaluated on the validation
    split as its test split: the run's metrics are validation metrics and the test split is never read. The
    validation split is watched every epoch only where a plateau rule needs it (the smoke profile; the quick
    profile's schedules have none).

    Raises ValueError: the dataset has no validation split."""
    d = cfg.data
    if d.val_split is None:
        raise ValueError(f"dataset {cfg.dataset!r} has no validation split to tune on")
    return dataclasses.replace(
        cfg,
        data=dataclasses.replace(
            d,
            train_split="train",
            val_split=d.val_split if cfg.schedule.scheduler == "plateau" else None,
            test_split=d.val_split,
            query_split=None,
            gallery_split=None,
        ),
        run=dataclasses.replace(cfg.run, two_stage=False, keep_best=False),
    )


def stage_plans(cfg: ExperimentConfig) -> list[StagePlan]:
    """The first stage of the config's protocol (stage 2 depends on stage 1's outcome: :func:`stage2_plan`);
    a fine-tune's one stage ("finetune", :func:`training_config`). The schedule is checked first
    (:func:`dmllab.training.schedules.check_schedule`)."""
    cfg = training_config(cfg)
    d, s = cfg.data, cfg.schedule
    schedules.check_schedule(epochs=s.epochs, scheduler=s.scheduler, milestones=s.milestones)
    check_callbacks(cfg, epochs=s.epochs, two_stage=cfg.run.two_stage)
    if cfg.run.two_stage and d.val_split is None:
        raise ValueError(f"two-stage protocol needs a validation split; dataset {cfg.dataset!r} has none")
    if cfg.run.two_stage:
        name, eval_split = "stage1", d.val_split
    else:
        name = "finetune" if is_finetune(cfg) else "single"
        eval_split = d.val_split if d.train_split != d.trainval_split else None
    return [StagePlan(name, d.train_split, eval_split, s.epochs, s.warmup_epochs, s.scheduler, s.milestones)]


def stage1_summary(cfg: ExperimentConfig, rows: list[dict]) -> tuple[int, list[int]]:
    """Best schedule epoch and plateau drop epochs of stage 1's history rows, both by the monitored validation
    value (``schedule.monitor``: R@1 as in the paper, or the NMI/R@1 harmonic mean as in the authors' code)."""
    monitor = cfg.schedule.monitor
    values = [
        schedules.monitored_value(r, monitor) for r in rows if r["stage"] == "stage1" and not r["warmup"]
    ]
    if not values:
        raise ValueError("stage 1 has no validation history")
    drops = (
        schedules.plateau_drop_epochs(values, patience=cfg.schedule.patience)
        if cfg.schedule.scheduler == "plateau"
        else []
    )
    return schedules.best_epoch(values), drops


def stage2_plan(cfg: ExperimentConfig, best: int, drops: list[int]) -> StagePlan:
    """Stage 2: ``trainval``, the stage-1 drops as MultiStepLR milestones (plateau; shifted by
    ``schedule.stage2_drop_lag``: 0 = paper, 1 = authors' code, see
    :func:`dmllab.training.schedules.lagged_milestones`) or the same schedule, ``best`` schedule epochs (stop
    after the best epoch), no validation."""
    s = cfg.schedule
    scheduler, milestones = s.scheduler, s.milestones
    if s.scheduler == "plateau":
        scheduler, milestones = "multistep", schedules.lagged_milestones(drops, s.stage2_drop_lag)
    return StagePlan("stage2", cfg.data.trainval_split, None, best, s.warmup_epochs, scheduler, milestones)


def _resume_state(path: Path) -> dict[str, Any] | None:
    """The epoch checkpoint to resume from, or None. A checkpoint that cannot be read (or lacks the keys
    of one) is moved aside to ``<name>.corrupt`` and the run restarts from scratch, saying so."""
    try:
        state = load_checkpoint(path, "epoch checkpoint")
        missing = {"config_hash", "seed", "trainer", "history", "elapsed_s"} - state.keys()
        if missing:
            raise CorruptCheckpointError(f"epoch checkpoint {path} lacks {sorted(missing)}")
    except CorruptCheckpointError as err:
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        if sidecar(path).exists():
            os.replace(sidecar(path), sidecar(aside))
        print(
            f"dmllab: warning: {err}; moved it to {aside}, restarting the run from scratch", file=sys.stderr
        )
        return None
    return state


class _HashingWriter:
    """A binary file that also feeds what is written to a sha256 (the checksum costs no second read)."""

    def __init__(self, fh: Any) -> None:
        self.fh, self.hash = fh, hashlib.sha256()

    def write(self, data: Any) -> int:
        self.hash.update(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


def save_atomic(obj: Any, path: Path) -> str:
    """torch.save to a temporary file renamed into place, then its checksum sidecar (:mod:`dmllab.fileio`);
    returns the sha256. On any failure (full disk: an OSError naming ``path``) the temporary is removed, so
    neither a partial checkpoint nor a stray file is left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as fh:
        writer = _HashingWriter(fh)
        torch.save(obj, writer)
    return write_sidecar(path, writer.hash.hexdigest())


def run_protocol(
    cfg: ExperimentConfig,
    *,
    seed: int | None = None,
    hooks: tuple = (),
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
    final_model: str | os.PathLike | None = None,
    init_from: str | os.PathLike | None = None,
) -> RunResult:
    """Train and test ``cfg`` with its protocol (``run.two_stage``); see the module docstring.

    Args:
        seed: overrides ``cfg.run.seed``.
        checkpoint: epoch checkpoint file (written atomically as ``run.checkpoint_minutes`` says and after every
            stage, resumed from if present).
        final_model: where to save the final model's and the loss's state dicts (``{"config", "model", "loss"}``,
            for ``dmllab evaluate`` / export and the artifacts that read learned proxies or scales).
        init_from: a fine-tune's start: the parent run's final model file (model and loss state dicts).

    Raises:
        ValueError: a fine-tune without ``init_from``, or ``init_from`` for a config that is not a fine-tune.
    """
    if is_finetune(cfg) != (init_from is not None):
        raise ValueError(
            "a fine-tune (finetune.epochs > 0) starts from its parent's final model: train it with "
            "dmllab.training.store.run, which trains or loads the parent first"
            if init_from is None
            else "init_from is for a fine-tune (finetune.epochs > 0)"
        )
    seed = cfg.run.seed if seed is None else seed
    run = _ProtocolRun(cfg, seed, Path(checkpoint) if checkpoint else None, hooks, progress, init_from)
    history, best, drops = run.train()
    metrics, train_metrics = run.test()
    if final_model is not None:
        run.save_final(Path(final_model))
    trainer = run.trainer
    return RunResult(
        metrics=metrics,
        history=history,
        best_epoch=best,
        lr_drop_epochs=list(drops),
        wall_time_s=run.elapsed + time.perf_counter() - run.t0,
        config_hash=run.h,
        seed=seed,
        device=str(trainer.device),
        extra={
            "timings": {**run.phase, **trainer.timings},
            "torch_threads": torch.get_num_threads(),  # what it trained on (the store's provenance)
            **(
                {"fast_dev": {"steps": trainer.steps, "shrunk": list(trainer.fast_dev.shrunk)}}
                if trainer.fast_dev
                else {}
            ),
        },
        precision=trainer.precision,
        train_metrics=train_metrics,
    )


class _ProtocolRun:
    """One call of :func:`run_protocol`: the checkpoint it resumes from and writes (through the trainer's epoch
    hook), its keep-best hook, its trainer, its stages and its test, and the seconds of its phases (the trainer
    times data, steps and evaluation)."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        seed: int,
        ckpt_path: Path | None,
        hooks: tuple,
        progress: bool,
        init_from: str | os.PathLike | None,
    ) -> None:
        self.seed, self.ckpt_path, self.t0 = seed, ckpt_path, time.perf_counter()
        saved = _resume_state(ckpt_path) if ckpt_path and ckpt_path.exists() else None
        self.h = config_hash(cfg)
        if saved is not None and (saved["config_hash"] != self.h or saved["seed"] != seed):
            saved = None  # a checkpoint of another run: ignore it
        self.saved, self.elapsed = saved, saved["elapsed_s"] if saved else 0.0
        if saved is not None and progress:
            st = saved["trainer"]
            print(
                f"resuming from {ckpt_path} ({st['plan']['name']}, after epoch {st.get('epoch', '?')})",
                flush=True,
            )
        self.config = cfg  # what the final model file records; a fine-tune trains its training_config
        self.cfg = cfg = training_config(cfg)
        self.keep = KeepBest() if cfg.run.keep_best else None
        if self.keep is not None:
            if cfg.run.two_stage or stage_plans(cfg)[0].eval_split is None:
                raise ValueError(
                    "run.keep_best needs a single stage that watches a validation split (data.train_split other "
                    f"than {cfg.data.trainval_split!r}, data.val_split set)"
                )
            if saved is not None:
                self.keep.load_state_dict(saved.get("keep_best"))
        self.phase = {"setup": 0.0, "checkpoint": 0.0, "test": 0.0}  # seconds
        self.prior: list[dict] = []  # the finished stages' history rows, saved with each epoch checkpoint
        # KeepBest observes an epoch before the checkpoint holds it; the caller's hooks see a checkpointed epoch
        own = ([self.keep] if self.keep is not None else []) + [
            EpochCheckpoint(self.save_checkpoint, cfg.run.checkpoint_minutes)
        ]
        self.trainer = Trainer(cfg, hooks=(*own, *hooks), progress=progress, seed=seed, init_from=init_from)

    def save_checkpoint(self, tr: Trainer) -> None:
        if self.ckpt_path is None:
            return
        t_ckpt = time.perf_counter()
        state = {
            "config_hash": self.h,
            "seed": self.seed,
            "trainer": tr.state_dict(),
            "history": list(self.prior),
            "elapsed_s": self.elapsed + time.perf_counter() - self.t0,
        }
        if self.keep is not None:
            state["keep_best"] = self.keep.state_dict()
        save_atomic(state, self.ckpt_path)
        self.phase["checkpoint"] += time.perf_counter() - t_ckpt

    def run_stage(self, plan: StagePlan, before: list[dict]) -> list[dict]:
        t_setup = time.perf_counter()
        self.trainer.setup(plan)
        if self.saved is not None and self.saved["trainer"]["plan"]["name"] == plan.name:
            self.trainer.load_state_dict(self.saved["trainer"])
        self.phase["setup"] += time.perf_counter() - t_setup
        self.prior[:] = before
        return self.trainer.fit()

    def train(self) -> tuple[list[dict], int | None, list[int]]:
        """The stages (stage 2 after stage 1 on the two-stage protocol): ``(history, best epoch, lr drops)``."""
        cfg, saved = self.cfg, self.saved
        self.first = first = stage_plans(cfg)[0]
        best, drops = None, []
        # A checkpoint in stage 2 means stage 1 finished: its rows are the checkpoint's prior history.
        if saved is not None and saved["trainer"]["plan"]["name"] == "stage2":
            history = list(saved["history"])
        else:
            history = self.run_stage(first, [])
        if cfg.run.two_stage:
            best, drops = stage1_summary(cfg, history)
            history = history + self.run_stage(stage2_plan(cfg, best, drops), history)
        elif first.eval_split is not None:
            drops = self.trainer.lr_drop_epochs() if cfg.schedule.scheduler == "plateau" else []
        if self.keep is not None:
            self.keep.restore(self.trainer)
            best = self.keep.epoch
        return history, best, drops

    def test(self) -> tuple[dict[str, float], dict[str, float]]:
        """The final model's test metrics and its R@1 on (a sample of) its last training split."""
        cfg, trainer, d = self.cfg, self.trainer, self.cfg.data
        t_test = time.perf_counter()
        if d.query_split is not None:
            metrics = trainer.evaluate(query_split=d.query_split, gallery_split=d.gallery_split)
        else:
            metrics = trainer.evaluate(d.test_split)
        last_split = d.trainval_split if cfg.run.two_stage else self.first.train_split  # stage 2's split
        n_train = len(trainer.data.dataset(last_split, train=False))
        every = max(1, n_train // TRAIN_SAMPLE)
        train_metrics = trainer.evaluate(last_split, metrics=("recall",), ks=(1,), every=every)
        trainer.data.close()  # the test evaluation's loader workers
        self.phase["test"] += time.perf_counter() - t_test
        return metrics, train_metrics

    def save_final(self, path: Path) -> None:
        """The final model's and the loss's state dicts (learned proxies, scales such as Heated-up's alpha,
        classifier weights) with the config they were trained for."""
        t_ckpt = time.perf_counter()
        final = {
            "config": self.config.to_dict(),
            "model": self.trainer.model.state_dict(),
            "loss": self.trainer.loss.state_dict(),
        }
        save_atomic(final, path)
        self.phase["checkpoint"] += time.perf_counter() - t_ckpt


def run_single_stage(cfg: ExperimentConfig, **kwargs: Any) -> RunResult:
    """:func:`run_protocol` with ``run.two_stage=False``."""
    return run_protocol(cfg.replace("run.two_stage", False), **kwargs)
