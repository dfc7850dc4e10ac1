"""Clustering quality: NMI of KMeans clusters, as evaluated in ProxyNCA++ (CUB and Cars)."""

from __future__ import annotations

import numpy as np
from torch import Tensor

from dmllab.metrics.evaluator import as_tensor, check_embeddings_labels

KMEANS_N_INIT = 10  # pinned: sklearn's default changed across versions ("auto" since 1.4)


def nmi(
    embeddings: Tensor | np.ndarray,
    labels: Tensor | np.ndarray,
    *,
    n_clusters: int | None = None,
    seed: int = 0,
) -> float:
    """Normalised mutual information between the labels and KMeans clusters of the embeddings.

    NMI(Y, Omega) = I(Y; Omega) / sqrt(H(Y) H(Omega)) (geometric normalisation, as ProxyNCA++'s code).
    KMeans runs on the raw embeddings (float64) with ``n_clusters`` = the number of classes by default,
    ``n_init=10`` and ``random_state=seed``, so the value is deterministic for a given input.
    """
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    emb = as_tensor(embeddings, "embeddings")
    lab = as_tensor(labels, "labels")
    check_embeddings_labels(emb, lab, "")
    x = emb.cpu().double().numpy()
    y = lab.cpu().long().numpy()
    n_classes = int(np.unique(y).size)
    k = n_classes if n_clusters is None else int(n_clusters)
    if k < 1 or k > x.shape[0]:
        raise ValueError(f"n_clusters must be in [1, {x.shape[0]}] (number of embeddings), got {k}")
    pred = KMeans(n_clusters=k, n_init=KMEANS_N_INIT, random_state=seed).fit_predict(x)
    return float(normalized_mutual_info_score(y, pred, average_method="geometric"))
