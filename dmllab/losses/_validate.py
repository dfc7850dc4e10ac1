"""Input checks shared by every loss.

A wrong batch (labels out of range, an embedding of the wrong width, NaN from a diverged network) would
otherwise fail deep inside ``torch`` with an index error or silently produce a NaN loss. These checks turn
each case into a ``ValueError`` that names the problem and the offending value.

Reading a value on the host (``bool(isfinite(x).all())``, ``int(labels.max())``) waits for the device. Inside
:func:`sync_free` (the trainer's sync-free path on CUDA) the checks of *values* (finite embeddings, labels in
range) become flags that stay on the device (:class:`DeviceChecks`), read once by the caller, and a loss takes
its data-dependent branches on the device; the checks of shapes and dtypes raise at once on every path.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch


class DeviceChecks:
    """The value checks of the loss inputs inside :func:`sync_free`, as device flags: ``nonfinite`` (some
    embeddings were NaN or inf) and ``bad_labels`` (some label lay outside ``[0, num_classes)``), each a bool
    tensor or None (nothing checked yet). :meth:`flags` gives both as one float64 tensor, so a caller reads them
    with its own values in one transfer. A label out of range is flagged, but the loss's own indexing usually
    fails on it first (on CUDA with a device-side assert): the sync-free path is for labels that come from the
    split the loss was built for."""

    def __init__(self) -> None:
        self.nonfinite: torch.Tensor | None = None
        self.bad_labels: torch.Tensor | None = None

    @staticmethod
    def _or(flag: torch.Tensor | None, bad: torch.Tensor) -> torch.Tensor:
        return bad if flag is None else flag | bad

    def embeddings(self, embeddings: torch.Tensor) -> None:
        self.nonfinite = self._or(self.nonfinite, ~torch.isfinite(embeddings).all())

    def labels(self, labels: torch.Tensor, num_classes: int) -> None:
        lo, hi = torch.aminmax(labels)
        self.bad_labels = self._or(self.bad_labels, (lo < 0) | (hi >= num_classes))

    def flags(self, device: torch.device) -> torch.Tensor:
        """``(nonfinite, bad_labels)`` as a float64 tensor (2,) on ``device`` (0 where nothing was checked)."""
        zero = torch.zeros((), dtype=torch.bool, device=device)
        return torch.stack([f if f is not None else zero for f in (self.nonfinite, self.bad_labels)]).double()


_CHECKS: contextvars.ContextVar[DeviceChecks | None] = contextvars.ContextVar(
    "dmllab_loss_checks", default=None
)


@contextlib.contextmanager
def sync_free(checks: DeviceChecks) -> Iterator[DeviceChecks]:
    """Within the block the losses make no host sync: their value checks go to ``checks`` (read by the caller
    afterwards) instead of raising, and their data-dependent branches are taken on the device."""
    token = _CHECKS.set(checks)
    try:
        yield checks
    finally:
        _CHECKS.reset(token)


def sync_free_checks() -> DeviceChecks | None:
    """The :class:`DeviceChecks` of the enclosing :func:`sync_free` block, None outside one."""
    return _CHECKS.get()


def check_embeddings(embeddings: torch.Tensor, embedding_dim: int | None = None) -> None:
    """Check that ``embeddings`` is a non-empty, finite, floating (B, D) tensor with D == ``embedding_dim``
    (finiteness: a device flag inside :func:`sync_free`)."""
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
    deferred = _CHECKS.get()
    if deferred is not None:
        deferred.embeddings(embeddings)
        return
    finite = torch.isfinite(embeddings)
    if not bool(finite.all()):
        n_bad = int((~finite).any(dim=1).sum())
        raise ValueError(
            f"embeddings contain NaN or inf values ({n_bad} of {embeddings.shape[0]} rows affected)"
        )


def check_labels(labels: torch.Tensor, batch_size: int, num_classes: int) -> None:
    """Check that ``labels`` is an integer (B,) tensor with every value in [0, num_classes) (the range: a device
    flag inside :func:`sync_free`)."""
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
    deferred = _CHECKS.get()
    if deferred is not None:
        deferred.labels(labels, num_classes)
        return
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
