"""Input checks shared by every loss.

A wrong batch (labels out of range, an embedding of the wrong width, NaN from a diverged network) would
otherwise fail deep inside ``torch`` with an index error or silently produce a NaN loss. These checks turn
each case into a ``ValueError`` that names the problem and the offending value.
"""

from __future__ import annotations

import torch

from dmllab.validation import check_int

__all__ = ["check_batch", "check_embeddings", "check_labels", "check_positive_int"]


def check_positive_int(name: str, value: int) -> int:
    """Return ``value`` if it is a positive ``int``; otherwise raise a ValueError naming ``name``
    (:func:`dmllab.validation.check_int`)."""
    return check_int(name, value)


def check_embeddings(embeddings: torch.Tensor, embedding_dim: int | None = None) -> None:
    """Check that ``embeddings`` is a non-empty, finite, floating (B, D) tensor with D == ``embedding_dim``."""
    if not isinstance(embeddings, torch.Tensor):
        raise ValueError(f"embeddings must be a torch.Tensor; got {type(embeddings).__name__}")
    if embeddings.ndim != 2:
        raise ValueError(
            f"embeddings must have shape (batch, dim); got ndim={embeddings.ndim}, shape {tuple(embeddings.shape)}"
        )
    if embeddings.shape[0] == 0:
        raise ValueError("empty batch: embeddings has 0 rows")
    if not embeddings.is_floating_point():
        raise ValueError(f"embeddings must be a floating-point tensor; got dtype {embeddings.dtype}")
    if embedding_dim is not None and embeddings.shape[1] != embedding_dim:
        raise ValueError(
            f"embedding dimension mismatch: embeddings have dim {embeddings.shape[1]} but the loss expects "
            f"embedding_dim={embedding_dim}"
        )
    finite = torch.isfinite(embeddings)
    if not bool(finite.all()):
        n_bad = int((~finite).any(dim=1).sum())
        raise ValueError(
            f"embeddings contain NaN or inf values ({n_bad} of {embeddings.shape[0]} rows affected)"
        )


def check_labels(labels: torch.Tensor, batch_size: int, num_classes: int) -> None:
    """Check that ``labels`` is an integer (B,) tensor with every value in [0, num_classes)."""
    if not isinstance(labels, torch.Tensor):
        raise ValueError(f"labels must be a torch.Tensor; got {type(labels).__name__}")
    if labels.ndim != 1:
        raise ValueError(f"labels must have shape (batch,); got shape {tuple(labels.shape)}")
    if labels.dtype == torch.bool or labels.is_floating_point() or labels.is_complex():
        raise ValueError(f"labels must be an integer tensor (torch.long); got dtype {labels.dtype}")
    if labels.shape[0] != batch_size:
        raise ValueError(f"labels has {labels.shape[0]} entries but embeddings has {batch_size} rows")
    if batch_size == 0:
        raise ValueError("empty batch: labels has 0 entries")
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= num_classes:
        bad = f"min {lo}" if lo < 0 else f"max {hi}"
        raise ValueError(f"labels must be in [0, {num_classes}); got {bad}")


def check_batch(
    embeddings: torch.Tensor, labels: torch.Tensor, *, num_classes: int, embedding_dim: int | None
) -> None:
    """Validate one training batch: ``embeddings`` (B, D) and ``labels`` (B,) in [0, num_classes)."""
    check_embeddings(embeddings, embedding_dim)
    check_labels(labels, embeddings.shape[0], num_classes)
