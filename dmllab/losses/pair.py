"""Pair-based baselines of ProxyNCA++ Table 11, from pytorch-metric-learning behind the dmllab interface.

Each wrapper has the uniform constructor ``(num_classes, embedding_dim, *, ...)`` and
``forward(embeddings, labels)``; the batch is validated like the proxy losses and the loss is computed in
float32 with autocast disabled. ``has_proxies`` is False. Learnable parameters (the class-specific beta of
the margin loss) live in ``loss.parameters()``.

* :class:`MarginLoss` - Wu et al., "Sampling Matters in Deep Embedding Learning" (ICCV 2017): margin 0.2,
  beta initialised at 1.2, learnable and class-specific, distance-weighted negative sampling (PML's
  ``DistanceWeightedMiner``, cut-off 0.5, non-zero-loss cut-off 1.4) on L2-normalised embeddings.
* :class:`TripletSemiHardLoss` - Schroff et al. (FaceNet): triplet margin loss (margin 0.2) on
  L2-normalised embeddings with semi-hard triplets (PML ``TripletMarginMiner(type_of_triplets="semihard")``).
* :class:`MultiSimilarityLoss` - Wang et al. (CVPR 2019): MS loss alpha 2, beta 50, base (lambda) 0.5 with
  the MS pair miner epsilon 0.1 (PML's defaults; the MS paper text is not in /work/shared/papers, so these
  values are PML's reading of the MS paper/code, not re-checked against the paper here).

The miners draw from torch's global random generator.
"""

from __future__ import annotations

import torch
from torch import nn

from dmllab.validation import check_int, check_number

from ._registry import LOSSES
from ._validate import check_batch
from .proxy import _fp32_region


class PairLoss(nn.Module):
    """Base of the PML wrappers: holds ``pml_loss`` and an optional ``miner``."""

    has_proxies = False

    def __init__(
        self, num_classes: int, embedding_dim: int, pml_loss: nn.Module, miner: nn.Module | None
    ) -> None:
        super().__init__()
        self.num_classes = check_int("num_classes", num_classes)
        self.embedding_dim = check_int("embedding_dim", embedding_dim)
        self.pml_loss = pml_loss
        self.miner = miner

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Loss of a batch: ``embeddings`` (B, D), ``labels`` (B,) in [0, C) -> float32 scalar."""
        check_batch(embeddings, labels, num_classes=self.num_classes, embedding_dim=self.embedding_dim)
        with _fp32_region(embeddings.device):
            emb, labels = embeddings.float(), labels.long()
            indices = None if self.miner is None else self.miner(emb, labels)
            return self.pml_loss(emb, labels, indices)


@LOSSES.register("margin")
class MarginLoss(PairLoss):
    """Margin loss with distance-weighted sampling (Wu et al. 2017); class-specific learnable beta."""

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        *,
        margin: float = 0.2,
        beta: float = 1.2,
        learn_beta: bool = True,
        class_specific_beta: bool = True,
        nu: float = 0.0,
        distance_weighted: bool = True,
        cutoff: float = 0.5,
        nonzero_loss_cutoff: float = 1.4,
    ) -> None:
        from pytorch_metric_learning import losses, miners

        check_number("margin", margin, low=0.0)
        check_number("beta", beta)
        check_number("nu", nu, low=0.0)
        check_number("cutoff", cutoff, low=0.0)
        check_number("nonzero_loss_cutoff", nonzero_loss_cutoff, low=0.0, low_open=True)
        loss = losses.MarginLoss(
            margin=margin,
            nu=nu,
            beta=beta,
            learn_beta=learn_beta,
            num_classes=num_classes if class_specific_beta else None,
        )
        miner = (
            miners.DistanceWeightedMiner(cutoff=cutoff, nonzero_loss_cutoff=nonzero_loss_cutoff)
            if distance_weighted
            else None
        )
        super().__init__(num_classes, embedding_dim, loss, miner)


@LOSSES.register("triplet_semihard")
class TripletSemiHardLoss(PairLoss):
    """Triplet margin loss (margin 0.2) on semi-hard triplets (FaceNet)."""

    def __init__(self, num_classes: int, embedding_dim: int, *, margin: float = 0.2) -> None:
        from pytorch_metric_learning import losses, miners

        check_number("margin", margin, low=0.0)
        loss = losses.TripletMarginLoss(margin=margin)
        miner = miners.TripletMarginMiner(margin=margin, type_of_triplets="semihard")
        super().__init__(num_classes, embedding_dim, loss, miner)


@LOSSES.register("multi_similarity")
class MultiSimilarityLoss(PairLoss):
    """Multi-Similarity loss with MS pair mining (Wang et al. 2019)."""

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        *,
        alpha: float = 2.0,
        beta: float = 50.0,
        base: float = 0.5,
        epsilon: float = 0.1,
        mining: bool = True,
    ) -> None:
        from pytorch_metric_learning import losses, miners

        for name, value in (("alpha", alpha), ("beta", beta)):
            check_number(name, value, low=0.0, low_open=True)
        check_number("base", base)
        check_number("epsilon", epsilon, low=0.0)
        loss = losses.MultiSimilarityLoss(alpha=alpha, beta=beta, base=base)
        miner = miners.MultiSimilarityMiner(epsilon=epsilon) if mining else None
        super().__init__(num_classes, embedding_dim, loss, miner)
