"""Retrieval metrics as tensor-in, float-out functions: thin wrappers over :func:`retrieval_metrics`.

Definitions, the tie rule (a tie counts against the positive) and the treatment of queries without a positive
are in :mod:`dmllab.metrics.evaluator`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from torch import Tensor

from dmllab.metrics.evaluator import retrieval_metrics

ArrayLike = Tensor | np.ndarray


def recall_at_k(
    embeddings: ArrayLike,
    labels: ArrayLike,
    ks: Iterable[int] = (1, 2, 4, 8),
    *,
    gallery: ArrayLike | None = None,
    gallery_labels: ArrayLike | None = None,
    distance: str = "euclidean",
    chunk_size: int | None = None,
    dtype: torch.dtype = torch.float32,
    matmul: str = "auto",
    allow_collapsed: bool = False,
) -> dict[int, float]:
    """Recall@K (ProxyNCA++ Sec. 5): fraction of queries with a same-class reference among the K nearest.

    Leave-one-out over ``embeddings`` without a gallery (CUB, Cars, SOP); query vs gallery for In-Shop.
    Returns {K: value in [0, 1]}. ``chunk_size``, ``dtype``, ``matmul`` and ``allow_collapsed``: see
    :func:`retrieval_metrics`.
    """
    res = retrieval_metrics(
        embeddings,
        labels,
        ks=ks,
        gallery=gallery,
        gallery_labels=gallery_labels,
        distance=distance,
        chunk_size=chunk_size,
        dtype=dtype,
        matmul=matmul,
        allow_collapsed=allow_collapsed,
    )
    return res.recall


def _mlrc(embeddings: ArrayLike, labels: ArrayLike, **kwargs) -> tuple[float, float, float]:
    res = retrieval_metrics(embeddings, labels, ks=(), mlrc=True, **kwargs)
    return res.precision_at_1, res.r_precision, res.map_at_r


def precision_at_1(
    embeddings: ArrayLike,
    labels: ArrayLike,
    *,
    gallery: ArrayLike | None = None,
    gallery_labels: ArrayLike | None = None,
    distance: str = "euclidean",
    chunk_size: int | None = None,
    dtype: torch.dtype = torch.float32,
    allow_collapsed: bool = False,
) -> float:
    """P@1 (MLRC, Musgrave et al. 2020): is the nearest reference a positive, over queries with R >= 1."""
    kw = dict(gallery=gallery, gallery_labels=gallery_labels, distance=distance, chunk_size=chunk_size)
    return _mlrc(embeddings, labels, dtype=dtype, allow_collapsed=allow_collapsed, **kw)[0]


def r_precision(
    embeddings: ArrayLike,
    labels: ArrayLike,
    *,
    gallery: ArrayLike | None = None,
    gallery_labels: ArrayLike | None = None,
    distance: str = "euclidean",
    chunk_size: int | None = None,
    dtype: torch.dtype = torch.float32,
    allow_collapsed: bool = False,
) -> float:
    """R-precision (MLRC): positives among the first R references / R, R = number of positives."""
    kw = dict(gallery=gallery, gallery_labels=gallery_labels, distance=distance, chunk_size=chunk_size)
    return _mlrc(embeddings, labels, dtype=dtype, allow_collapsed=allow_collapsed, **kw)[1]


def map_at_r(
    embeddings: ArrayLike,
    labels: ArrayLike,
    *,
    gallery: ArrayLike | None = None,
    gallery_labels: ArrayLike | None = None,
    distance: str = "euclidean",
    chunk_size: int | None = None,
    dtype: torch.dtype = torch.float32,
    allow_collapsed: bool = False,
) -> float:
    """MAP@R (MLRC Sec. 3.2): (1/R) sum_{i<=R} P(i) rel(i), averaged over queries with R >= 1."""
    kw = dict(gallery=gallery, gallery_labels=gallery_labels, distance=distance, chunk_size=chunk_size)
    return _mlrc(embeddings, labels, dtype=dtype, allow_collapsed=allow_collapsed, **kw)[2]
