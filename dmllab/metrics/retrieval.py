"""Retrieval metrics as tensor-in, float-out functions: thin wrappers over :func:`retrieval_metrics`.

Definitions, the tie rule (a tie counts against the positive) and the treatment of queries without a positive
are in :mod:`dmllab.metrics.evaluator`. Every keyword (``gallery``, ``gallery_labels``, ``distance``,
``chunk_size``, ``dtype``, ``matmul``, ``allow_collapsed``) is :func:`retrieval_metrics`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from torch import Tensor

from dmllab.metrics.evaluator import retrieval_metrics

ArrayLike = Tensor | np.ndarray


def recall_at_k(
    embeddings: ArrayLike, labels: ArrayLike, ks: Iterable[int] = (1, 2, 4, 8), **kwargs: Any
) -> dict[int, float]:
    """Recall@K (ProxyNCA++ Sec. 5): fraction of queries with a same-class reference among the K nearest.

    Leave-one-out over ``embeddings`` without a gallery (CUB, Cars, SOP); query vs gallery for In-Shop.
    Returns {K: value in [0, 1]}.
    """
    return retrieval_metrics(embeddings, labels, ks=ks, **kwargs).recall


def _mlrc(embeddings: ArrayLike, labels: ArrayLike, **kwargs: Any) -> tuple[float, float, float]:
    res = retrieval_metrics(embeddings, labels, ks=(), mlrc=True, **kwargs)
    return res.precision_at_1, res.r_precision, res.map_at_r


def precision_at_1(embeddings: ArrayLike, labels: ArrayLike, **kwargs: Any) -> float:
    """P@1 (MLRC, Musgrave et al. 2020): is the nearest reference a positive, over queries with R >= 1."""
    return _mlrc(embeddings, labels, **kwargs)[0]


def r_precision(embeddings: ArrayLike, labels: ArrayLike, **kwargs: Any) -> float:
    """R-precision (MLRC): positives among the first R references / R, R = number of positives."""
    return _mlrc(embeddings, labels, **kwargs)[1]


def map_at_r(embeddings: ArrayLike, labels: ArrayLike, **kwargs: Any) -> float:
    """MAP@R (MLRC Sec. 3.2): (1/R) sum_{i<=R} P(i) rel(i), averaged over queries with R >= 1."""
    return _mlrc(embeddings, labels, **kwargs)[2]
