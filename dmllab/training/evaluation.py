"""Evaluating a run: its training loss and the checks that refuse untrustworthy embeddings, and the metrics of
``cfg.run``.

:class:`EpochLoss` sums an epoch's training loss and checks it and the embeddings for NaN/inf, reading them on the
host every step or, on the trainer's sync-free path, once at the end of the epoch. :func:`evaluate_split` embeds a
split (or a query and a gallery split) with a caller's ``embed`` function and computes ``cfg.run``'s metrics
(:func:`dmllab.metrics.evaluate`): the trainer's validation and test use it, and so do ``dmllab evaluate`` and
``export``.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from dmllab.losses._validate import DeviceChecks, sync_free


class NonFiniteLossError(FloatingPointError):
    """The loss (or the embeddings feeding it) became NaN or inf; the message names stage, epoch and step."""

    hint = "the training diverged: lower the learning rate (--set optim.lr=...) or keep gradient clipping on"


class EpochLoss:
    """The sum of an epoch's training losses, with the NaN/inf checks of the loss and of the embeddings.

    Eager (``lazy=False``): every step reads the loss on the host (a step hook or a progress bar shows it) and
    raises :class:`NonFiniteLossError` at the step that went wrong. Lazy: the sum and the checks stay on the
    ``device``, the losses' own input checks with them (:func:`dmllab.losses._validate.sync_free`), and
    :meth:`mean` reads them in one transfer at the end of the epoch: no host sync per step. A diverged epoch raises
    :class:`NonFiniteLossError` there (the run store records the run as diverged); a label outside the loss's
    classes raises ValueError.
    """

    def __init__(self, device: torch.device, *, lazy: bool) -> None:
        self.lazy = lazy
        self.total, self.count = 0.0, 0
        self.checks = DeviceChecks() if lazy else None
        self._bad = torch.zeros((), dtype=torch.bool, device=device)
        self._sum = torch.zeros((), dtype=torch.float64, device=device)

    def context(self) -> contextlib.AbstractContextManager:
        """Where the steps' losses are computed: the losses' sync-free mode when lazy."""
        return sync_free(self.checks) if self.lazy else contextlib.nullcontext()

    def embeddings(self, emb: torch.Tensor, where: str) -> None:
        if self.lazy:
            self._bad |= ~torch.isfinite(emb).all()
        elif not bool(torch.isfinite(emb).all()):
            raise NonFiniteLossError(f"non-finite embeddings at {where}; the last good checkpoint is kept")

    def add(self, loss: torch.Tensor, where: str) -> float:
        """Count one step's loss; its value on the host, NaN when lazy (nothing reads it)."""
        self.count += 1
        loss = loss.detach()
        if self.lazy:
            self._bad |= ~torch.isfinite(loss)
            self._sum += loss
            return math.nan
        value = float(loss)
        if not math.isfinite(value):
            raise NonFiniteLossError(
                f"non-finite loss ({value}) at {where}; the last good checkpoint is kept"
            )
        self.total += value
        return value

    def mean(self, where: str) -> float:
        """The epoch's mean loss (lazy: the one host read of the epoch, then the deferred checks)."""
        if self.lazy:
            flags = self.checks.flags(self._sum.device)
            total, bad, nonfinite, bad_labels = torch.cat(
                [torch.stack([self._sum, self._bad.double()]), flags]
            ).tolist()
            if bad or nonfinite:
                raise NonFiniteLossError(
                    f"non-finite loss or embeddings in {where}; the last good checkpoint is kept"
                )
            if bad_labels:
                raise ValueError(f"a training batch of {where} had labels outside the loss's classes")
            self.total = total
        return self.total / self.count


def resolve_amp(amp: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype: None on CPU/MPS and for "off"; "auto" = bf16 on CUDA when supported."""
    if device.type != "cuda" or amp == "off":
        return None
    if amp == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        return torch.float16
    raise ValueError(f"unknown amp {amp!r}; valid: auto, off, bf16, fp16")


def precision_name(amp_dtype: torch.dtype | None) -> str:
    """The arithmetic of a run's training and evaluation: "fp32", "bf16 autocast" or "fp16 autocast + loss
    scaling" (the losses compute in float32 in every case)."""
    if amp_dtype is None:
        return "fp32"
    return "fp16 autocast + loss scaling" if amp_dtype == torch.float16 else "bf16 autocast"


def embed_batches(
    model: nn.Module,
    batches: Any,
    split: str,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    channels_last: bool,
    *,
    allow_collapsed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings and labels of ``batches`` (one split, named ``split`` in errors) in the given precision and memory
    format, refused when no metric can be trusted on them (:func:`check_embeddings`); on CUDA they stay there for
    the metrics."""
    from dmllab.metrics import embed_dataset

    emb, labels = embed_dataset(
        model,
        batches,
        device,
        amp=amp_dtype is not None,
        amp_dtype=amp_dtype,
        channels_last=channels_last,
        keep_on_device=device.type == "cuda",
    )
    check_embeddings(emb, split, allow_collapsed=allow_collapsed)
    return emb, labels


def check_embeddings(emb: torch.Tensor, split: str | None, allow_collapsed: bool = False) -> None:
    """Refuse embeddings no metric can be trusted on: NaN/inf, or so large that their float32 squared
    distances overflow (|x|^2 > 3.4e38), the state of a diverged model (NonFiniteEmbeddingError); or collapsed
    onto one point (:mod:`dmllab.metrics.evaluator`, "Safety rules"; CollapsedEmbeddingError), a failed model
    whose metrics would only measure the tie rule. The run store records either like a diverged run.
    ``allow_collapsed``: a fast dev run, whose few steps from a random trunk may well leave the embeddings
    collapsed; it checks the code path, not the model."""
    from dmllab.metrics import CollapsedEmbeddingError, NonFiniteEmbeddingError, is_collapsed

    where = f"split {split!r}" if split else "the evaluated split"
    if not bool(torch.isfinite(emb).all()):
        raise NonFiniteEmbeddingError(
            f"the embeddings of {where} contain NaN or inf: the model diverged, the run is not stored"
        )
    sq = float(emb.double().square().sum(1).max()) if emb.numel() else 0.0
    if sq > torch.finfo(torch.float32).max:
        raise NonFiniteEmbeddingError(
            f"the embeddings of {where} reach |x| = {sq**0.5:.3g}: their squared distances overflow float32, "
            "the model diverged and the run is not stored; lower the learning rate or keep gradient clipping on"
        )
    if not allow_collapsed and is_collapsed(emb):
        raise CollapsedEmbeddingError(
            f"the {emb.shape[0]} embeddings of {where} are collapsed onto one point (every coordinate varies by "
            "less than about 1e-5 of its magnitude): the model failed and the run is not stored; lower the "
            "learning rate or check the loss settings"
        )


def metric_kwargs(
    run: Any, metrics: Sequence[str] | None = None, ks: Sequence[int] | None = None
) -> dict[str, Any]:
    """Keyword arguments of :func:`dmllab.metrics.evaluate` from a run section (``cfg.run``; metrics and ks
    default to it)."""
    return dict(
        metrics=tuple(metrics or run.metrics),
        ks=tuple(ks or run.ks),
        distance=run.distance,
        nmi_average=run.nmi_average,
        allow_collapsed=run.fast_dev_run > 0,  # check_embeddings
    )


def compute_metrics(
    run: Any, emb: torch.Tensor, labels: torch.Tensor, kw: dict[str, Any], **gallery: Any
) -> dict[str, float]:
    """:func:`dmllab.metrics.evaluate`; with ``run.nmi_l2`` NMI clusters the L2-normalised embeddings (of the
    queries, with a gallery), as Heated-up Softmax Sec. 5.2 states; retrieval uses ``run.distance``, NMI
    ``run.nmi_average``."""
    from dmllab.metrics import evaluate

    if not (run.nmi_l2 and "nmi" in kw["metrics"]):
        return evaluate(emb, labels, **gallery, **kw)
    retrieval = tuple(m for m in kw["metrics"] if m != "nmi")
    out = evaluate(emb, labels, **gallery, **{**kw, "metrics": retrieval})
    out.update(
        evaluate(
            nn.functional.normalize(emb.float(), dim=1),
            labels,
            metrics=("nmi",),
            nmi_average=kw.get("nmi_average", run.nmi_average),
            allow_collapsed=kw.get("allow_collapsed", False),
        )
    )
    return out


def evaluate_split(
    run: Any,
    embed: Callable[[str], tuple[torch.Tensor, torch.Tensor]],
    split: str | None = None,
    *,
    query_split: str | None = None,
    gallery_split: str | None = None,
    metrics: Sequence[str] | None = None,
    ks: Sequence[int] | None = None,
) -> dict[str, float]:
    """The metrics of ``split`` (or of ``query_split`` against ``gallery_split``), ``embed(name)`` giving each
    split's ``(embeddings, labels)``; fractions in [0, 1]. A fast dev run's N batches per split are small on
    purpose: it does not show :class:`dmllab.metrics.FewReferencesWarning` (its summary says what it shrank)."""
    from dmllab.metrics import FewReferencesWarning

    kw = metric_kwargs(run, metrics, ks)
    with warnings.catch_warnings():
        if run.fast_dev_run:
            warnings.simplefilter("ignore", FewReferencesWarning)
        if query_split is not None:
            q, ql = embed(query_split)
            g, gl = embed(gallery_split)
            return compute_metrics(run, q, ql, kw, gallery=g, gallery_labels=gl)
        emb, lab = embed(split)
        return compute_metrics(run, emb, lab, kw)
