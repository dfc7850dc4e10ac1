"""Input Mixup (Zhang et al., ICLR 2018) and Manifold Mixup (Verma et al., ICML 2019) for any loss.

The regularisers of Proxy Synthesis Table 5 / Table E. Per batch one lambda ~ Beta(alpha, alpha) and one
random permutation pi of the batch are drawn; the network sees the mixed batch

* ``input_mixup``: images ``lam * x_i + (1 - lam) * x_pi(i)``;
* ``manifold_mixup``: the backbone's output feature map mixed the same way before the embedding head
  (``model.head(lam * h_i + (1 - lam) * h_pi(i))`` with ``h = model.backbone(x)``).

and the loss is the mixed-target loss ``lam * L(e, y) + (1 - lam) * L(e, y_pi)``
(:func:`dmllab.losses.functional.mixup_loss`; for a softmax cross-entropy exactly the cross-entropy with the
mixed one-hot target of Zhang et al. Eq. 1). Partners may share the class, as in both papers.

Manifold Mixup's layer: Verma et al. draw the mixing layer among several (the input and the outputs of the
first residual blocks of a PreActResNet). dmllab mixes one layer, the backbone's final feature map, so that
the option works with any backbone without per-architecture hooks; PS does not say which layers it used.

A run uses this through its loss spec: ``Spec("input_mixup", {"alpha": 0.5}, wraps=<the loss>)`` (or
``manifold_mixup``). Randomness comes from ``generator`` or, when None, torch's global generator (which the
trainer reseeds every epoch, so runs stay reproducible and resumable).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dmllab.validation import check_number

from ._registry import LOSSES
from .functional import mixup_loss
from .synthesis import sample_beta

MIXUP_MODES = ("input_mixup", "manifold_mixup")


def mix(x: torch.Tensor, lam: float, perm: torch.Tensor) -> torch.Tensor:
    """``lam * x + (1 - lam) * x[perm]`` along the batch dimension (any trailing shape)."""
    return lam * x + (1.0 - lam) * x[perm]


@dataclass(frozen=True)
class MixupDraw:
    """One batch's mixing: lambda and the partner permutation (B,)."""

    lam: float
    perm: torch.Tensor


class Mixup(nn.Module):
    """Wraps a loss: mixes each training batch inside the step and scores the mixed-target loss of ``base``.
    Holds no parameters of its own.

    The trainer calls :meth:`embed` instead of the embedding network (it mixes the images, or the backbone's
    feature map) and then the module with the draw: ``loss(embeddings, labels, draw)``.

    Args:
        base: the wrapped loss (any loss of :data:`dmllab.losses.LOSSES`).
        mode: "input_mixup" or "manifold_mixup".
        alpha: Beta(alpha, alpha) shape (> 0); PS Table E searches 0.3-2.0 (best 0.4-0.5).
        generator: torch.Generator for lambda and the permutation (None: torch's global generator).
    """

    def __init__(
        self,
        base: nn.Module | None,
        mode: str,
        *,
        alpha: float = 0.5,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if mode not in MIXUP_MODES:
            raise ValueError(f"unknown mixup mode {mode!r}; valid: {', '.join(MIXUP_MODES)}")
        check_number("alpha", alpha, low=0.0, low_open=True)
        self.base = base
        self.mode = mode
        self.alpha = float(alpha)
        self.generator = generator

    @property
    def has_proxies(self) -> bool:
        """Whether the wrapped loss has proxies."""
        return bool(getattr(self.base, "has_proxies", False))

    def draw(self, batch_size: int, device: torch.device) -> MixupDraw:
        """lambda ~ Beta(alpha, alpha) and a uniform random permutation of the batch."""
        lam = sample_beta(self.alpha, self.generator)
        perm = torch.randperm(batch_size, generator=self.generator).to(device, non_blocking=True)
        return MixupDraw(lam, perm)

    def embed(self, model: nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, MixupDraw]:
        """Embeddings (B, D) of the mixed batch and the draw that mixed it."""
        d = self.draw(images.shape[0], images.device)
        if self.mode == "input_mixup":
            return model(mix(images, d.lam, d.perm)), d
        if not (hasattr(model, "backbone") and hasattr(model, "head")):
            raise ValueError("manifold_mixup needs a model with .backbone and .head (dmllab EmbeddingNet)")
        features = model.backbone(images)  # (B, C, h, w)
        return model.head(mix(features, d.lam, d.perm)), d

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, draw: MixupDraw) -> torch.Tensor:
        """The mixed-target loss ``lam L(e, y) + (1 - lam) L(e, y[perm])`` of the wrapped loss."""
        if self.base is None:
            raise ValueError("this Mixup wraps no loss; build it around one (dmllab.losses.build_loss)")
        return mixup_loss(self.base, embeddings, labels, labels[draw.perm], draw.lam)

    def extra_repr(self) -> str:
        return f"mode={self.mode}, alpha={self.alpha:g}"


@LOSSES.register("input_mixup")
def input_mixup(base: nn.Module, *, alpha: float = 0.5, generator: torch.Generator | None = None) -> Mixup:
    """Input Mixup around ``base`` (:class:`Mixup`)."""
    return Mixup(base, "input_mixup", alpha=alpha, generator=generator)


@LOSSES.register("manifold_mixup")
def manifold_mixup(base: nn.Module, *, alpha: float = 0.5, generator: torch.Generator | None = None) -> Mixup:
    """Manifold Mixup around ``base`` (:class:`Mixup`)."""
    return Mixup(base, "manifold_mixup", alpha=alpha, generator=generator)


input_mixup.wraps = True  # dmllab.losses.LOSSES: built around the loss its spec wraps
manifold_mixup.wraps = True
