"""Evaluation metrics: Recall@K, NMI and the MLRC metrics (P@1, R-precision, MAP@R).

All values are fractions in [0, 1]. One streaming evaluator (:func:`retrieval_metrics`) computes the
neighbour information once per query chunk for every requested retrieval metric; memory is
O(chunk_size x N_ref), never N x N.
"""

# ruff: noqa: F401 - the imports are the package's public names

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from torch import Tensor

from dmllab.metrics.clustering import KMEANS_N_INIT, NMI_AVERAGES, kmeans_torch, nmi
from dmllab.metrics.embed import embed_dataset
from dmllab.metrics.evaluator import (
    DISTANCES,
    CollapsedEmbeddingError,
    DegenerateEmbeddingError,
    FewReferencesWarning,
    NonFiniteEmbeddingError,
    RetrievalResult,
    ZeroEmbeddingError,
    check_ks,
    is_collapsed,
    retrieval_metrics,
)
from dmllab.metrics.retrieval import map_at_r, precision_at_1, r_precision, recall_at_k

METRICS = ("recall", "nmi", "precision_at_1", "r_precision", "map_at_r", "mlrc")
_MLRC = ("precision_at_1", "r_precision", "map_at_r")


def evaluate(
    embeddings: Tensor | np.ndarray,
    labels: Tensor | np.ndarray,
    *,
    metrics: Iterable[str] = ("recall", "nmi"),
    ks: Iterable[int] = (1, 2, 4, 8),
    gallery: Tensor | np.ndarray | None = None,
    gallery_labels: Tensor | np.ndarray | None = None,
    distance: str = "euclidean",
    chunk_size: int | None = None,
    nmi_seed: int = 0,
    dtype: torch.dtype = torch.float32,
    matmul: str = "auto",
    nmi_average: str = "geometric",
    nmi_kmeans: str = "auto",
    allow_collapsed: bool = False,
) -> dict[str, float]:
    """Compute the requested metrics with one retrieval pass.

    Args:
        metrics: any of "recall", "nmi", "precision_at_1", "r_precision", "map_at_r", or "mlrc" (all three).
        ks: K values for "recall".
        gallery, gallery_labels: query-vs-gallery protocol (In-Shop); NMI is then computed on the queries.
        distance, chunk_size, dtype, matmul: see :func:`retrieval_metrics`.
        nmi_seed, nmi_average, nmi_kmeans: KMeans seed, NMI normalisation and KMeans implementation for
            "nmi" (see :func:`dmllab.metrics.clustering.nmi`).
        allow_collapsed: compute the metrics of collapsed embeddings instead of raising
            :class:`CollapsedEmbeddingError` (:mod:`dmllab.metrics.evaluator`, "Safety rules").

    Returns:
        {"R@K": ..., "NMI": ..., "P@1": ..., "RP": ..., "MAP@R": ...} for what was requested, in [0, 1]
        (NaN, with a warning, where undefined: no query with a positive, NMI of a single class).
    """
    wanted = list(metrics) if not isinstance(metrics, str) else [metrics]
    if not all(isinstance(m, str) for m in wanted):
        raise ValueError(f"metrics must be names, any of {list(METRICS)}; got {metrics!r}")
    unknown = sorted(set(wanted) - set(METRICS))
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; valid: {list(METRICS)}")
    mlrc = "mlrc" in wanted or any(m in wanted for m in _MLRC)
    ks = check_ks(ks) if "recall" in wanted else ()
    out: dict[str, float] = {}
    if "recall" in wanted or mlrc:
        res = retrieval_metrics(
            embeddings, labels, ks=ks, mlrc=mlrc, gallery=gallery, gallery_labels=gallery_labels,
            distance=distance, chunk_size=chunk_size, dtype=dtype, matmul=matmul, allow_collapsed=allow_collapsed,
        )  # fmt: skip
        out.update({f"R@{k}": v for k, v in res.recall.items()})
        for name, column in zip(_MLRC, ("P@1", "RP", "MAP@R")):
            if "mlrc" in wanted or name in wanted:
                out[column] = getattr(res, name)
    if "nmi" in wanted:
        out["NMI"] = nmi(
            embeddings,
            labels,
            seed=nmi_seed,
            average=nmi_average,
            kmeans=nmi_kmeans,
            allow_collapsed=allow_collapsed,
        )
    return out
