"""Classification accuracy of an embedding model: from a trained classifier's logits, or, without one, from the
nearest class mean of reference embeddings (cosine)."""

from __future__ import annotations

import torch
from torch import Tensor


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Share of rows of ``logits`` (N, C) whose arg-max is ``labels`` (N,), a fraction in [0, 1]."""
    if logits.ndim != 2 or logits.shape[0] != labels.shape[0]:
        raise ValueError(
            f"logits (N, C) and labels (N,) expected, got {tuple(logits.shape)}, {tuple(labels.shape)}"
        )
    return float((logits.argmax(dim=1) == labels).float().mean()) if len(labels) else float("nan")


def class_means(embeddings: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """L2-normalised mean of the L2-normalised embeddings of every class, (C, D)."""
    e = torch.nn.functional.normalize(embeddings.float(), dim=1)
    sums = torch.zeros(num_classes, e.shape[1], dtype=e.dtype).index_add_(0, labels.long(), e)
    return torch.nn.functional.normalize(sums, dim=1)


def nearest_mean_logits(
    reference: Tensor, reference_labels: Tensor, embeddings: Tensor, num_classes: int
) -> Tensor:
    """Cosine similarity (N, C) of every embedding to each class mean of ``reference``."""
    means = class_means(reference, reference_labels, num_classes)
    return torch.nn.functional.normalize(embeddings.float(), dim=1) @ means.t()
