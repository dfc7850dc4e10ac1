"""Pair-based baselines (pytorch-metric-learning losses) in the ProxyNCA++ protocol.

The papers compare against published numbers, so the training setup is a dmllab choice: 512-d, GAP, AdamW lr
1e-4 wd 1e-4 (paper profile), class-balanced batches (pairs need positives), learnable loss parameters at
10 x the lr, the paper base's two-stage protocol. Quick/smoke: lr 1e-3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from dmllab.spec import Spec
from dmllab.training.config import ExperimentConfig, OptimConfig
from dmllab.training.presets.datasets import DatasetSpec
from dmllab.training.presets.methods import method, with_loss


def _pair_loss(name: str) -> Callable[..., ExperimentConfig]:
    def build(cfg: ExperimentConfig, spec: DatasetSpec) -> ExperimentConfig:
        cfg = with_loss(cfg, name)
        return replace(
            cfg,
            optim=OptimConfig(name="adamw", lr=1e-4, lr_proxies=1e-3, eps=1e-8, weight_decay=1e-4),
            model=replace(cfg.model, pooling=Spec("avg"), norm="none", l2_normalize=False, embedding_dim=512),
        )

    build.__name__ = name
    build.__doc__ = f"{name} (pair-based baseline, module docstring)."
    return build


OVERLAYS = {profile: {"optim.lr": 1e-3, "optim.lr_proxies": 1e-2} for profile in ("quick", "smoke")}

TUNED = {
    "margin": ("margin", "the margin loss's margin (Wu et al. 2017, 0.2); its beta is learned"),
    "triplet_semihard": ("margin", "the triplet margin (Schroff et al. 2015, 0.2), the loss's one parameter"),
    "multi_similarity": (
        "beta",
        "Multi-Similarity's negative scale beta (Wang et al. 2019, 50), the largest of its exponents",
    ),
}
for _name in TUNED:  # one build per baseline, registered as it is made
    method(_name, OVERLAYS, tuned=TUNED[_name])(_pair_loss(_name))
