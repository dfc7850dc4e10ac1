"""The paper base and the quick and smoke profiles as overlays on a method's ``paper`` config.

``paper_base(spec)`` is the ProxyNCA++ setup every method builder starts from (ProxyNCA++ Table 1, Sec. 4.1,
official-code.md); the method module replaces what its paper does differently. The ``quick`` and ``smoke``
profiles keep each method's loss, head, optimiser family and protocol and replace the *scale*: backbone,
image size, embedding size, batch, number of epochs, device. The schedule keeps its shape: warm-up (one
epoch if the paper warms up), lr drops and the heating epoch at the same fraction of training
(:func:`compress_schedule`); a fine-tune (Heated-up's heating) keeps its share of its parent's epochs
(:func:`compress_finetune`). Precision is the default (none on the CPU), not the paper's. What a method sets differently at a profile's scale (its learning rates for the
small CNN) is the method's own overlay (``Method.overlays``), applied after these.

The profile names are :data:`dmllab.profiles.PROFILES` (the one definition).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from dmllab.profiles import PROFILES
from dmllab.spec import Spec
from dmllab.training.config import (
    DataConfig,
    ExperimentConfig,
    FinetuneConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    ScheduleConfig,
)
from dmllab.training.presets.datasets import DatasetSpec

# The quick profile: the offline benchmark on 2 CPU cores (dmllab choice). SmallCNN width 16 pre-trained on the
# synthetic pre-training pool (the "synthetic-pretrain" weights source), 64x64 images with 56-pixel crops, 128-d,
# batch 32 (8 x 4 with class-balanced batches), 1 warm-up + 8 epochs, plateau patience 2, CPU. What makes it
# fast, chosen on the validation split (benchmarks/select_quick.py -> results/benchmarks/quick_selection.csv;
# docs/quick-profile.md): the images live in memory and are augmented a batch at a time (data.in_memory), the
# first 4 of the 6 SmallCNN blocks are frozen and their output is cached for 4 augmented views per image
# (model.frozen_blocks, data.feature_views), so only the last two blocks, the head and the proxies train;
# ProxyNCA++'s two-stage protocol becomes one stage on trainval (see quick()).
QUICK = dict(
    epochs=8,
    warmup=1,
    patience=2,
    batch_size=32,
    per_class=4,
    image_size=64,
    width=16,
    dim=128,
    frozen_blocks=4,
    feature_views=4,
)
# The smoke profile: seconds, for tests. 24 synthetic classes x 10 images at 32x32 (train 6 classes, val 6,
# test 12), SmallCNN width 8 from scratch, 16-d, batch 16 (4 x 4), 2 epochs, no warm-up, CPU.
SMOKE = dict(epochs=2, warmup=0, patience=1, batch_size=16, per_class=4, image_size=32, width=8, dim=16)


def paper_base(spec: DatasetSpec) -> ExperimentConfig:
    """ProxyNCA++ setup (Table 1, Sec. 4.1, official-code.md): ResNet-50 (ImageNet), 2048-d, Adam eps 1,
    Table 1 lrs, warm-up 5 epochs, grad clip 10, plateau(4, 0.1) two-stage (In-Shop: trainval, constant lr),
    256 crops, the dataset's R@K (and NMI on CUB/Cars), fp16 autocast with loss scaling (the release's apex O1)."""
    return ExperimentConfig(
        dataset=spec.name,
        profile="paper",
        data=DataConfig(
            dataset=Spec(spec.name),
            val_split=spec.val_split,
            train_split="train" if spec.two_stage else "trainval",
            test_split=spec.test_split,
            query_split=spec.query_split,
            gallery_split=spec.gallery_split,
            batch_size=spec.batch_size,
            sampler=class_balanced(spec.per_class),
            transform="proxynca++",
            num_workers="auto",  # the usable cores minus 2 (dmllab.data.loaders.resolve_num_workers)
        ),
        model=ModelConfig(backbone=Spec("resnet50"), pretrained=True, embedding_dim=2048),
        loss=Spec("proxynca", {"temperature": 1 / 9, "prob": True}),
        optim=OptimConfig(name="adam", lr=spec.lr, lr_proxies=spec.lr_proxies, eps=1.0, grad_clip_value=10.0),
        schedule=ScheduleConfig(
            epochs=spec.epochs,
            warmup_epochs=5,
            scheduler="plateau" if spec.two_stage else "none",
            patience=4,
            factor=0.1,
        ),
        run=RunConfig(
            amp="fp16",  # the ProxyNCA++ release's apex O1 (README: --apex); other families set their own
            two_stage=spec.two_stage,
            metrics=("recall", "nmi") if spec.nmi else ("recall",),
            ks=spec.ks,
        ),
    )


def class_balanced(per_class: int | None) -> Spec:
    """``data.sampler``: class-balanced batches of ``per_class`` images per class, or random batches for None."""
    return Spec("random") if per_class is None else Spec("class_balanced", {"per_class": per_class})


def compress_heating(cfg: ExperimentConfig, *, epochs: int) -> ExperimentConfig:
    """``cfg``'s heating epoch ``h`` (``callbacks.heating``) at the same fraction of a schedule of ``epochs``
    epochs: ``round((h - 1) * r) + 1`` within ``2..epochs`` (some epochs before heating, heating inside the run)."""
    heating = cfg.callback("heating")
    if heating is None:
        return cfg
    r = epochs / cfg.schedule.epochs
    h = heating.get("epoch")
    return cfg.replace(
        "callbacks.heating.epoch", min(max(int(math.floor((h - 1) * r + 0.5)) + 1, min(2, epochs)), epochs)
    )


def compress_schedule(s: ScheduleConfig, *, epochs: int, warmup: int, patience: int) -> ScheduleConfig:
    """The schedule ``s`` squeezed into ``epochs`` schedule epochs with the same shape.

    Every position moves to the same fraction of training, rounded half up: a milestone ``d`` (lr lowered
    after epoch ``d``) to ``round(d * epochs / s.epochs)``, kept in ``1..epochs-1`` (0 stays 0: a drop before the
    first schedule epoch), so every drop still happens inside the run (each is kept, so the final lr is the
    paper's); a "step" scheduler's step size to ``max(1, round(step * r))`` (a heating epoch:
    :func:`compress_heating`). ``warmup`` warm-up epochs if the paper warms up, none otherwise; plateau
    ``patience`` as given.
    """
    r = epochs / s.epochs

    def at(x: float) -> int:
        return int(math.floor(x * r + 0.5))

    milestones = tuple(min(max(at(d), 1 if d > 0 else 0), epochs - 1) for d in s.milestones)
    return replace(
        s,
        epochs=epochs,
        warmup_epochs=warmup if s.warmup_epochs > 0 else 0,
        milestones=milestones,
        step_size=max(1, at(s.step_size)) if s.scheduler == "step" else s.step_size,
        patience=patience,
    )


def compress_finetune(ft: FinetuneConfig, *, parent_epochs: int, epochs: int) -> FinetuneConfig:
    """A fine-tune (:class:`~dmllab.training.config.FinetuneConfig`) of a parent whose ``parent_epochs`` epochs become
    ``epochs``: its epochs keep their share of the parent's, rounded up (at least 1). Not a fine-tune: unchanged."""
    if ft.epochs == 0:
        return ft
    return replace(ft, epochs=max(1, math.ceil(ft.epochs * epochs / parent_epochs)))


def _scaled(
    cfg: ExperimentConfig, spec: DatasetSpec, profile: str, p: dict, **extra_kwargs: int
) -> ExperimentConfig:
    """The common part of the quick and smoke overlays: the profile's scale ``p`` on ``cfg``."""
    dataset = cfg.data.dataset
    if spec.sized_by_profile:
        dataset = Spec(dataset.name, {"image_size": p["image_size"], **extra_kwargs})
    cfg = compress_heating(cfg, epochs=p["epochs"])
    return replace(
        cfg,
        profile=profile,
        data=replace(
            cfg.data,
            dataset=dataset,
            batch_size=p["batch_size"],
            sampler=class_balanced(p["per_class"] if cfg.data.per_class else None),
            transform=profile,
            num_workers=0,
        ),
        # BN trains in the small CNN (dmllab choice): its statistics adapt to the benchmark's images.
        model=replace(
            cfg.model,
            backbone=Spec("smallcnn", {"width": p["width"]}),
            weights_path=None,
            embedding_dim=p["dim"],
            freeze_bn=False,
            freeze_bn_affine=None,
        ),
        schedule=compress_schedule(
            cfg.schedule, epochs=p["epochs"], warmup=p["warmup"], patience=p["patience"]
        ),
        # precision: the default ("auto": none on the CPU these profiles run on), not the paper's
        run=replace(cfg.run, amp=RunConfig.amp),
        finetune=compress_finetune(cfg.finetune, parent_epochs=cfg.schedule.epochs, epochs=p["epochs"]),
    )


def quick(cfg: ExperimentConfig, spec: DatasetSpec) -> ExperimentConfig:
    """The quick profile on a method's paper config (:data:`QUICK`): pre-trained SmallCNN, 64x64 images with
    56-pixel crops ("quick" transform), CPU, R@K and NMI; on a dataset held in memory (the offline benchmark,
    ``DatasetSpec.images_in_memory``) the images are augmented a batch at a time and the SmallCNN's first
    ``frozen_blocks`` blocks are frozen and cached for ``feature_views`` augmented views per image.

    ProxyNCA++'s two-stage protocol (stage 1 on ``train`` watching ``val`` with a plateau lr rule, stage 2 on
    ``trainval`` stopped after the stage-1 best epoch) becomes one stage on ``trainval`` for the whole schedule
    at a constant lr after the warm-up: with this recipe stage 1 does not plateau within its 8 epochs and its
    best epoch is the last one (results/benchmarks/quick_selection.csv, candidate b4_lr1), so stage 2 would be
    exactly this run, and stage 1 would only double the cost (docs/quick-profile.md, "What makes it cheap").
    """
    cfg = _scaled(cfg, spec, "quick", QUICK)
    if cfg.run.two_stage and cfg.schedule.scheduler == "plateau":
        cfg = replace(
            cfg,
            data=replace(cfg.data, train_split=cfg.data.trainval_split),
            schedule=replace(cfg.schedule, scheduler="none"),
            run=replace(cfg.run, two_stage=False),
        )
    cfg = replace(
        cfg,
        data=replace(cfg.data, eval_batch_size=256),
        model=replace(cfg.model, pretrained=True),
        run=replace(cfg.run, device="cpu", metrics=("recall", "nmi")),
    )
    if not spec.images_in_memory:  # image files on disk (real datasets): per-image loader, full fine-tuning
        return cfg
    return replace(
        cfg,
        data=replace(cfg.data, in_memory=True, feature_views=QUICK["feature_views"]),
        model=replace(cfg.model, frozen_blocks=QUICK["frozen_blocks"]),
    )


def smoke(cfg: ExperimentConfig, spec: DatasetSpec) -> ExperimentConfig:
    """The smoke profile on a method's paper config (:data:`SMOKE`): SmallCNN from scratch, 32x32 images of 24
    classes, CPU, R@1,2,4."""
    cfg = _scaled(cfg, spec, "smoke", SMOKE, num_classes=24, images_per_class=10, num_pretrain_classes=8)
    return replace(
        cfg,
        data=replace(cfg.data, eval_batch_size=64),
        model=replace(cfg.model, pretrained=False),
        run=replace(cfg.run, device="cpu", metrics=("recall",), ks=(1, 2, 4)),
    )


PROFILE_OVERLAYS: dict[str, Callable[[ExperimentConfig, DatasetSpec], ExperimentConfig]] = {
    "smoke": smoke,
    "quick": quick,
    "paper": lambda cfg, spec: cfg,
}
if tuple(PROFILE_OVERLAYS) != PROFILES:  # pragma: no cover - a new profile needs its overlay here
    raise RuntimeError(
        f"presets define overlays for {tuple(PROFILE_OVERLAYS)}, dmllab.profiles has {PROFILES}"
    )
