"""Heated-up Softmax (Zhang et al., "Heated-up softmax embedding"; paper 003 in /work/shared/papers).

Sources: the paper (Sec. 3.4, 5.1-5.3) and the authors' release, ColumbiaDVMM/Heated_Up_Softmax_Embedding at
cb62d28 (TensorFlow): ``tensorflow/run_Inception.py`` (the commands) and ``tensorflow/deep_metric_learning_Inception.py``
(the training script, "the script" below).

Sec. 5.1: GoogLeNet V1 (ImageNet), 64-d embedding, batch 32, SGD momentum 0.9 lr 0.004 on Cars, CUB and
In-Shop, Adam lr 0.01 on the product dataset (SOP) (dataset spec ``heated_optimizer``/``heated_lr``),
alpha 16; heating-up multiplies alpha by 1/4 (16 -> 4) and the lr by 0.1. Images "all resized to 256x256", random
224 crops + flip, one centre crop at test (the ``heated`` transform). No warm-up, no weight decay, no gradient
clipping (none stated, none in the script).

Epochs: 80 for every variant (run_Inception.py:88, ``--nb_epoch 80``; the paper says the training "usually
converges within 50 training epochs": ``epochs=50``).

Heating (HLN / HBN). The paper heats a converged model: Sec. 3.4 (ii) ("training with the starting temperature
until convergence and using a higher temperature to fine-tune the trained network ... we used the latter in our
experiments"), Sec. 5.2 ("HLN: Heated-up model using alpha = 4 to fine-tune LN"). The release does it inside one
run: the script lowers the lr x 0.1 and alpha x 1/4 after 0-based epoch ``nb_epoch - nb_hu_epoch``
(deep_metric_learning_Inception.py:391-394) with ``--nb_epoch 80 --nb_hu_epoch=20`` (run_Inception.py:31-35, 88),
i.e. 61 of its 80 epochs at alpha 16 and the last 19 heated, the optimiser's momentum carried over; its LN/BN runs
train all 80 epochs at alpha 16.

* ``heating="in_run"``, the ``paper`` preset (the release's loop: where paper and code disagree the paper preset
  follows the code): one run; ``heat_epoch`` (first heated schedule epoch) defaults to ``epochs - heat_epochs + 2``
  = 62.
* ``heating="finetune"``, the ``quick`` and ``smoke`` presets (and an option on ``paper``): the paper text's
  procedure. HLN/HBN is a fine-tune (:class:`dmllab.training.config.FinetuneConfig`) of the LN/BN run with its full
  schedule, its own run in the run store keyed on that parent, for ``heat_epochs`` epochs at alpha x 1/4 and every
  lr x 0.1 with a fresh optimiser; so HLN is LN plus heating and both see the same epochs at alpha 16. The compressed
  schedules keep the paper's procedure because at their scale a model heated at the release's 76 % of training
  (epoch 7 of 8 on quick) has not converged: the heated epochs follow the whole LN/BN schedule, a quarter of its
  epochs rounded up (2 after quick's 8, 1 after smoke's 2;
  :func:`dmllab.training.presets.profiles.compress_finetune`). The learned-alpha variant of Table 5 heats the same
  way (the parent learns alpha; the fine-tune uses the learned value x 1/4, frozen; see
  :class:`dmllab.losses.HeatedSoftmaxLoss`).

``heat_epochs`` defaults to a quarter of the (parent's) epochs, rounded up: 20 of 80 on the paper profile, the
release's ``--nb_hu_epoch=20``.

Sec. 5.2: "All the features are l2-normalized before calculating the evaluation metric": cosine distance for
R@K and NMI on L2-normalised features (``run.nmi_l2``); NMI for Cars, CUB and SOP as Table 1 prints (Table 2,
In-Shop: R@K only).

Variants (Sec. 5.3): SM = plain softmax (unnormalised, alpha 1); LN = L2-normalised embedding; BN =
BatchNorm without scale / sqrt(dim) on the embedding; HLN / HBN = LN / BN heated up.

Precision: fp32 (``run.amp="off"``): the script builds a float32 graph (deep_metric_learning_Inception.py:193-196)
and has no mixed precision.

Not reproduced: the script's extra first epoch at lr 0 that only updates the BatchNorm moving averages ("learn one
epoch to heat up the bn parameter", deep_metric_learning_Inception.py:289-312).

Protocol: a fixed schedule on every training class, the last model tested. An in-run heated run whose schedule
ends before ``heat_epoch`` is an error, and so is an in-run heated run with the two-stage protocol (its stage 2 may
stop before heating): HLN/HBN can never silently become LN/BN. A fine-tune of a two-stage parent starts from the
parent's stage-2 model and fine-tunes on ``trainval``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from dmllab.spec import Spec
from dmllab.training.config import ExperimentConfig, FinetuneConfig, OptimConfig, ScheduleConfig
from dmllab.training.presets.datasets import DatasetSpec
from dmllab.training.presets.methods import fixed_schedule, method, with_loss
from dmllab.training.presets.profiles import class_balanced

HEATED_VARIANTS = ("SM", "LN", "BN", "HLN", "HBN")
HEATINGS = ("finetune", "in_run")
EPOCHS = 80  # run_Inception.py: --nb_epoch 80 (the paper: "converges within 50 training epochs")
HEAT_SHARE = 0.25  # heated epochs per parent epoch: run_Inception.py --nb_hu_epoch=20 of --nb_epoch 80
ALPHA_FACTOR = 0.25  # Sec. 5.1: alpha 16 -> 4; deep_metric_learning_Inception.py: alpha = alpha*0.25
LR_FACTOR = 0.1  # Sec. 5.1: "the learning rate will decrease to 1/10"


# The small from-pretrained CNN: 10 x the paper's lr (dmllab choice).
OVERLAYS = {profile: {"optim.lr": lambda cfg: 10 * cfg.optim.lr} for profile in ("quick", "smoke")}


def _heat_by_finetune(options: Mapping[str, Any]) -> dict[str, Any]:
    """The compressed profiles heat by fine-tuning (module docstring): HLN/HBN default to ``heating="finetune"``."""
    return {"heating": "finetune"} if str(options.get("variant", "HLN")).startswith("H") else {}


def heated_epochs(parent_epochs: int, share: float = HEAT_SHARE) -> int:
    """The epochs at the heated temperature for a parent of ``parent_epochs`` epochs: ``ceil(share * epochs)``."""
    return max(1, math.ceil(share * parent_epochs))


@method(
    "heated_softmax",
    OVERLAYS,
    variant_option="variant",
    default_variant="HLN",
    profile_options={"quick": _heat_by_finetune, "smoke": _heat_by_finetune},
    # HLN / HBN are arms of LN / BN (dmllab.training.presets.tuned.unit): tuned as those
    tuned={
        "SM": (None, "plain softmax (Heated-up Sec. 5.3, SM) has no hyper-parameter"),
        "LN": ("alpha", "Heated-up Eq. 1's alpha = 1/T; Table 3 / Fig. 4 sweep it (16)"),
        "BN": ("alpha", "Heated-up Eq. 1's alpha = 1/T; Table 3 / Fig. 4 sweep it (16)"),
    },
)
def heated_softmax(
    cfg: ExperimentConfig,
    spec: DatasetSpec,
    *,
    variant: str = "HLN",
    alpha: float = 16.0,
    epochs: int = EPOCHS,
    heating: str | None = None,
    heat_epochs: int | None = None,
    heat_epoch: int | None = None,
    two_stage: bool = False,
) -> ExperimentConfig:
    """Heated-up Softmax ``variant`` (module docstring). ``epochs``: the LN/BN schedule (for HLN/HBN: the
    parent's, or with ``heating="in_run"`` the whole run's); ``heating``: "in_run" (the release's single run,
    the default for HLN/HBN) or "finetune" (a fine-tune of the LN/BN run; the quick and smoke presets'
    default); ``heat_epochs``: heated epochs (default a quarter of ``epochs``, rounded up); ``heat_epoch``:
    the first heated epoch of an in-run heating (default the release's ``epochs - heat_epochs + 2``). Heating
    options are errors for SM/LN/BN, which never heat."""
    if variant not in HEATED_VARIANTS:
        raise ValueError(f"unknown heated_softmax variant {variant!r}; valid: {', '.join(HEATED_VARIANTS)}")
    if heating is not None and heating not in HEATINGS:
        raise ValueError(f"unknown heating {heating!r}; valid: {', '.join(HEATINGS)}")
    heats = variant.startswith("H")
    if not heats and (heat_epoch is not None or heat_epochs is not None or heating is not None):
        raise ValueError(f"heat_epoch, heat_epochs and heating are for HLN/HBN; {variant} never heats")
    heating = heating or "in_run"
    if heat_epoch is not None and heating != "in_run":
        raise ValueError(
            "heat_epoch is the first heated epoch of heating='in_run'; a fine-tune heats from its start"
        )
    hot = heated_epochs(epochs) if heat_epochs is None else heat_epochs
    in_run = heats and heating == "in_run"
    cfg = with_loss(cfg, "softmax") if variant == "SM" else with_loss(cfg, "heated_softmax", alpha=alpha)
    sgd = spec.heated_optimizer == "sgd"
    cfg = replace(
        cfg,
        data=replace(cfg.data, batch_size=32, sampler=class_balanced(None), transform="heated"),
        model=replace(
            cfg.model,
            backbone=Spec("googlenet"),
            embedding_dim=64,
            pooling=Spec("avg"),
            norm="batchnorm" if variant.endswith("BN") else "none",
            norm_position=None,
            l2_normalize=variant.endswith("LN"),
        ),
        optim=OptimConfig(
            name=spec.heated_optimizer,
            lr=spec.heated_lr,
            momentum=0.9 if sgd else 0.0,
            eps=1e-8,
            grad_clip_value=None,
        ),
        schedule=ScheduleConfig(epochs=epochs, warmup_epochs=0, scheduler="none"),
        run=replace(
            cfg.run,
            distance="cosine",
            nmi_l2=True,
            metrics=("recall", "nmi") if spec.heated_nmi else ("recall",),
            amp="off",
        ),
    )
    if in_run:
        first = epochs - hot + 2 if heat_epoch is None else heat_epoch
        cfg = replace(
            cfg,
            callbacks=(
                Spec("heating", {"epoch": first, "alpha_factor": ALPHA_FACTOR, "lr_factor": LR_FACTOR}),
            ),
        )
    cfg = fixed_schedule(cfg, spec, two_stage=two_stage)
    if heats and not in_run:
        ft = FinetuneConfig(
            epochs=hot,
            parent_method=f"heated_softmax:{variant[1:]}",
            alpha_factor=ALPHA_FACTOR,
            lr_factor=LR_FACTOR,
        )
        cfg = replace(cfg, finetune=ft)
    return cfg
