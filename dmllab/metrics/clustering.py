"""Clustering quality: NMI of KMeans clusters, as evaluated in ProxyNCA++ (CUB and Cars).

NMI(Y, Omega) = I(Y; Omega) / norm(H(Y), H(Omega)), with Omega the KMeans clusters of the embeddings
(``n_clusters`` = the number of classes). ``average`` picks the normalisation: "geometric"
(sqrt(H(Y) H(Omega)), the default and what the ProxyNCA++ authors' code computes) or "arithmetic"
((H(Y) + H(Omega)) / 2, scikit-learn's default), "min" or "max".

Two KMeans implementations give the same clustering up to KMeans' own variance (local optima, seeds):

* "sklearn": scikit-learn's KMeans on the CPU in float64, ``n_init=10`` (pinned: sklearn's default changed
  across versions) and ``random_state=seed``: deterministic for a given input. The default for CPU embeddings
  below ``TORCH_KMEANS_MIN_N`` (so the CPU numbers of a run do not depend on a GPU being present).
* "torch": :func:`kmeans_torch`, greedy k-means++ seeding (as scikit-learn's) and Lloyd iterations in float32
  on the embeddings' device (a GPU when the embeddings are there), ``n_init`` runs keeping the lowest inertia.
  Plain k-means++ seeding left Lloyd about 2% above scikit-learn's within-cluster sum of squares on many
  well-separated clusters; the greedy seeding reaches it (tests/metrics/test_metrics_clustering_embed.py).
  The default for embeddings on a CUDA device (they stay there: no copy to the host, no CPU k-means per
  evaluation) and from ``TORCH_KMEANS_MIN_N`` embeddings on (SOP's 60,502 x 11,316 clusters is out of reach
  of scikit-learn's float64 KMeans with ten inits). Deterministic for a given seed and device.

:func:`kmeans_choice` is the rule "auto" follows.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from dmllab.metrics.evaluator import (
    as_tensor,
    check_embeddings_labels,
    check_not_collapsed,
    power_of_two_exponent,
    scale_by_power_of_two,
)

KMEANS_N_INIT = 10  # pinned: sklearn's default changed across versions ("auto" since 1.4)
NMI_AVERAGES = ("geometric", "arithmetic", "min", "max")
KMEANS_IMPLEMENTATIONS = ("auto", "sklearn", "torch")
TORCH_KMEANS_MIN_N = 20_000  # "auto" switches to the torch k-means from this many embeddings on


def kmeans_choice(kmeans: str, n: int, device: torch.device | str) -> str:
    """The k-means implementation ``nmi(kmeans=...)`` runs on ``n`` embeddings held on ``device``: "sklearn" or
    "torch" as given; "auto" is "torch" on a CUDA device or from :data:`TORCH_KMEANS_MIN_N` embeddings on,
    else "sklearn" (module docstring)."""
    if kmeans not in KMEANS_IMPLEMENTATIONS:
        raise ValueError(f"unknown kmeans {kmeans!r}; valid: {list(KMEANS_IMPLEMENTATIONS)}")
    if kmeans != "auto":
        return kmeans
    return "torch" if torch.device(device).type == "cuda" or n >= TORCH_KMEANS_MIN_N else "sklearn"


def kmeans_torch(
    x: Tensor,
    n_clusters: int,
    *,
    n_init: int = KMEANS_N_INIT,
    max_iter: int = 300,
    tol: float = 1e-4,
    seed: int = 0,
    chunk_size: int = 4096,
    n_local_trials: int | None = None,
) -> Tensor:
    """KMeans (greedy k-means++ init, Lloyd iterations) on ``x``'s device; returns cluster ids (N,) long.

    Args:
        x: (N, D) points (any float dtype; computed in float32).
        n_clusters: k, 1 <= k <= N.
        n_init: independent runs (seeds ``seed, seed + 1, ...``); the run with the lowest inertia wins.
        max_iter, tol: Lloyd stops when the squared centre shift is <= ``tol`` x the mean per-feature
            variance of ``x`` (scikit-learn's rule) or after ``max_iter`` iterations.
        chunk_size: points per distance block (memory O(chunk_size x k)).
        n_local_trials: candidates per k-means++ step (:func:`_kmeans_pp`); default ``2 + int(log k)`` as
            scikit-learn; 1 = plain k-means++. Memory of the seeding O(n_local_trials x N).
    """
    n = x.shape[0]
    if not 1 <= n_clusters <= n:
        raise ValueError(f"n_clusters must be in [1, {n}] (number of points), got {n_clusters}")
    if n_init < 1 or max_iter < 1:
        raise ValueError(f"n_init and max_iter must be positive, got {n_init} and {max_iter}")
    trials = 2 + int(math.log(n_clusters)) if n_local_trials is None else int(n_local_trials)
    if trials < 1:
        raise ValueError(f"n_local_trials must be >= 1, got {n_local_trials}")
    x = x.detach()
    exponent = power_of_two_exponent(float(x.abs().max())) if x.numel() else 0
    # a power-of-two rescale first (exact, changes no clustering): no float32 overflow or underflow
    x = scale_by_power_of_two(x, exponent, torch.float32) if exponent else x.float()
    x = x - x.mean(0, keepdim=True)  # centring changes no clustering and helps float32 precision
    max_abs = float(x.abs().max())
    if max_abs > 0:  # a power-of-two rescale (exact, changes no clustering): no overflow in float32
        x = x * 2.0 ** -math.frexp(max_abs)[1]
    threshold = tol * float(x.var(0, unbiased=False).mean())
    x_sq = (x * x).sum(1)  # (N,)
    best_labels, best_inertia = None, float("inf")
    for run in range(n_init):
        gen = torch.Generator(device=x.device).manual_seed(seed + run)
        centres = _kmeans_pp(x, x_sq, n_clusters, gen, trials)
        for _ in range(max_iter):
            labels, _ = _assign(x, x_sq, centres, chunk_size)
            new = torch.zeros_like(centres).index_add_(0, labels, x)
            counts = torch.bincount(labels, minlength=n_clusters).unsqueeze(1).to(x.dtype)
            new = torch.where(counts > 0, new / counts.clamp(min=1), centres)  # empty cluster: keep centre
            shift = float(((new - centres) ** 2).sum())
            centres = new
            if shift <= threshold:
                break
        labels, dist = _assign(x, x_sq, centres, chunk_size)
        inertia = float(dist.double().sum())
        if inertia < best_inertia:
            best_labels, best_inertia = labels, inertia
    return best_labels


def _assign(x: Tensor, x_sq: Tensor, centres: Tensor, chunk_size: int) -> tuple[Tensor, Tensor]:
    """Nearest centre (N,) and squared distance (N,) by blocks of ``chunk_size`` points."""
    c_sq = (centres * centres).sum(1)
    labels = torch.empty(x.shape[0], dtype=torch.long, device=x.device)
    dist = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    for i in range(0, x.shape[0], chunk_size):
        d = torch.addmm(c_sq.unsqueeze(0), x[i : i + chunk_size], centres.T, alpha=-2.0)  # (B, k)
        m, a = d.min(1)
        labels[i : i + chunk_size] = a
        dist[i : i + chunk_size] = (m + x_sq[i : i + chunk_size]).clamp(min=0)
    return labels, dist


def _kmeans_pp(x: Tensor, x_sq: Tensor, k: int, gen: torch.Generator, n_local_trials: int) -> Tensor:
    """Greedy k-means++ seeding: k-means++ (Arthur & Vassilvitskii 2007, each next centre drawn with probability
    ~ D(x)^2) where each step draws ``n_local_trials`` candidates and keeps the one that lowers the potential
    sum_x D(x)^2 most, the variant scikit-learn's KMeans uses (``2 + int(log k)`` trials). With one trial it is
    plain k-means++."""
    n = x.shape[0]
    first = int(torch.randint(n, (1,), generator=gen, device=x.device))
    idx = [first]
    d2 = (x_sq + x_sq[first] - 2.0 * (x @ x[first])).clamp_(min=0)
    for _ in range(1, k):
        total = d2.sum()
        if float(total) <= 0:  # every point coincides with a centre: take any not chosen yet
            cand = torch.randint(n, (1,), generator=gen, device=x.device)
        else:
            cand = torch.multinomial(d2 / total, n_local_trials, replacement=True, generator=gen)  # (T,)
        # D^2 of every point to each candidate, (T, N), then the potential each candidate would leave
        cand_d2 = (x_sq.unsqueeze(0) + x_sq[cand].unsqueeze(1) - 2.0 * (x[cand] @ x.T)).clamp_(min=0)
        cand_d2 = torch.minimum(cand_d2, d2.unsqueeze(0))
        best = int(cand_d2.sum(1).argmin())
        idx.append(int(cand[best]))
        d2 = cand_d2[best]
    return x[torch.tensor(idx, device=x.device)].clone()


def nmi(
    embeddings: Tensor | np.ndarray,
    labels: Tensor | np.ndarray,
    *,
    n_clusters: int | None = None,
    seed: int = 0,
    average: str = "geometric",
    kmeans: str = "auto",
    allow_collapsed: bool = False,
) -> float:
    """Normalised mutual information between the labels and KMeans clusters of the embeddings.

    Scale-invariant: embeddings outside [2^-32, 2^32] in magnitude are first multiplied by one power of two
    (exact; KMeans' clustering does not change), so any finite scale gives the NMI of scale 1. NMI is 0/0 when
    the labels hold a single class (one embedding included): NaN, with a warning. Collapsed embeddings
    (:mod:`dmllab.metrics.evaluator`, "Safety rules") raise :class:`CollapsedEmbeddingError` unless
    ``allow_collapsed``.

    Args:
        embeddings: (N, D) raw embeddings (torch or numpy).
        labels: (N,) integer class labels.
        n_clusters: k; default the number of classes.
        seed: KMeans seed (``random_state`` of scikit-learn, first seed of :func:`kmeans_torch`).
        average: "geometric" (ProxyNCA++ code, default), "arithmetic" (scikit-learn's default), "min", "max".
        kmeans: "sklearn", "torch" or "auto" (torch on CUDA embeddings and from ``TORCH_KMEANS_MIN_N``
            embeddings on: :func:`kmeans_choice`).
        allow_collapsed: cluster collapsed embeddings instead of raising.
    """
    import warnings

    from sklearn.metrics import normalized_mutual_info_score

    if average not in NMI_AVERAGES:
        raise ValueError(f"unknown NMI average {average!r}; valid: {list(NMI_AVERAGES)}")
    if kmeans not in KMEANS_IMPLEMENTATIONS:
        raise ValueError(f"unknown kmeans {kmeans!r}; valid: {list(KMEANS_IMPLEMENTATIONS)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise ValueError(f"the NMI seed must be an integer in [0, 2^32), got {seed!r}")
    emb = as_tensor(embeddings, "embeddings")
    lab = as_tensor(labels, "labels")
    check_embeddings_labels(emb, lab, "")
    if not allow_collapsed:
        check_not_collapsed(emb, "")
    y = lab.cpu().long().numpy()
    n_classes = int(np.unique(y).size)
    if n_clusters is not None and (
        isinstance(n_clusters, bool) or not isinstance(n_clusters, (int, np.integer))
    ):
        raise ValueError(f"n_clusters must be a positive integer or None, got {n_clusters!r}")
    k = n_classes if n_clusters is None else int(n_clusters)
    if k < 1 or k > emb.shape[0]:
        raise ValueError(f"n_clusters must be in [1, {emb.shape[0]}] (number of embeddings), got {k}")
    if n_classes < 2:
        warnings.warn(
            f"NMI is undefined for labels of a single class ({emb.shape[0]} embedding(s)): NaN", stacklevel=2
        )
        return float("nan")
    exponent = power_of_two_exponent(float(emb.abs().max()))
    if exponent:  # exact, changes no clustering, no squared distance overflows (module doc of evaluator)
        emb = scale_by_power_of_two(emb, exponent, torch.float64)
    if kmeans_choice(kmeans, emb.shape[0], emb.device) == "torch":
        pred = kmeans_torch(emb, k, seed=seed).cpu().numpy()
    else:
        from sklearn.cluster import KMeans

        x = emb.cpu().double().numpy()
        pred = KMeans(n_clusters=k, n_init=KMEANS_N_INIT, random_state=seed).fit_predict(x)
    return float(normalized_mutual_info_score(y, pred, average_method=average))
