"""Heated-up Softmax (Zhang et al., "Heated-up softmax embedding"; paper 003 in /work/shared/papers).

Sec. 5.1: GoogLeNet V1 (ImageNet), 64-d embedding, batch 32, SGD momentum 0.9 lr 0.004 on Cars, CUB and
In-Shop, Adam lr 0.01 on the product dataset (SOP) (dataset spec ``heated_optimizer``/``heated_lr``),
alpha 16; heating-up multiplies alpha by 1/4 (16 -> 4) and the lr by 0.1; "the training process usually
converges within 50 training epochs": 50 epochs. The heating epoch is not stated: 40 (dmllab choice, option
``heat_epoch``). Images "all resized to 256x256", random 224 crops + flip, one centre crop at test (the
``heated`` transform). No warm-up, no weight decay, no gradient clipping (none stated).

Sec. 5.2: "All the features are l2-normalized before calculating the evaluation metric": cosine distance for
R@K and NMI on L2-normalised features (``run.nmi_l2``); NMI for Cars, CUB and SOP as Table 1 prints (Table 2,
In-Shop: R@K only).

Variants (Sec. 5.3): SM = plain softmax (unnormalised, alpha 1); LN = L2-normalised embedding; BN =
BatchNorm without scale / sqrt(dim) on the embedding; HLN / HBN = LN / BN heated up.

Protocol: a fixed schedule of 50 epochs on every training class, the last model tested (the paper heats a
converged model). A heated run whose schedule ends before ``heat_epoch`` is an error, and so is a heated run
with the two-stage protocol (its stage 2 may stop before heating): HLN/HBN can never silently become LN/BN.
"""

from __future__ import annotations

from dataclasses import replace

from dmllab.training.config import ExperimentConfig, OptimConfig, ScheduleConfig
from dmllab.training.presets.datasets import DatasetSpec
from dmllab.training.presets.methods import Method, fixed_schedule, with_loss

HEATED_VARIANTS = ("SM", "LN", "BN", "HLN", "HBN")
EPOCHS = 50  # Sec. 5.1: "converges within 50 training epochs"
HEAT_EPOCH = 40  # not stated: dmllab choice


def heated_softmax(
    cfg: ExperimentConfig,
    spec: DatasetSpec,
    *,
    variant: str = "HLN",
    alpha: float = 16.0,
    epochs: int = EPOCHS,
    heat_epoch: int | None = None,
    two_stage: bool = False,
) -> ExperimentConfig:
    """Heated-up Softmax ``variant`` (module docstring). ``heat_epoch``: the first heated schedule epoch of
    HLN/HBN (default 40; an error for SM/LN/BN, which never heat)."""
    if variant not in HEATED_VARIANTS:
        raise ValueError(f"unknown heated_softmax variant {variant!r}; valid: {', '.join(HEATED_VARIANTS)}")
    heats = variant.startswith("H")
    if heat_epoch is not None and not heats:
        raise ValueError(f"heat_epoch is for the heated variants HLN/HBN; {variant} never heats")
    cfg = with_loss(cfg, "softmax") if variant == "SM" else with_loss(cfg, "heated_softmax", alpha=alpha)
    sgd = spec.heated_optimizer == "sgd"
    cfg = replace(
        cfg,
        data=replace(cfg.data, batch_size=32, per_class=None, transform="heated"),
        model=replace(
            cfg.model,
            backbone="googlenet",
            embedding_dim=64,
            pooling="avg",
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
        schedule=ScheduleConfig(
            epochs=epochs,
            warmup_epochs=0,
            scheduler="none",
            heat_epoch=(HEAT_EPOCH if heat_epoch is None else heat_epoch) if heats else None,
        ),
        run=replace(
            cfg.run,
            distance="cosine",
            nmi_l2=True,
            metrics=("recall", "nmi") if spec.heated_nmi else ("recall",),
        ),
    )
    return fixed_schedule(cfg, spec, two_stage=two_stage)


# The small from-pretrained CNN: 10 x the paper's lr (dmllab choice).
OVERLAYS = {profile: {"optim.lr": lambda cfg: 10 * cfg.optim.lr} for profile in ("quick", "smoke")}

METHODS = (
    Method("heated_softmax", heated_softmax, OVERLAYS, variant_option="variant", default_variant="HLN"),
)
