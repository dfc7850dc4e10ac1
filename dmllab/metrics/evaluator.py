"""One streaming retrieval evaluator for Recall@K and the MLRC metrics (P@1, R-precision, MAP@R).

Definitions
-----------
For a query q with label y, the *references* are the gallery (query-vs-gallery protocol, In-Shop) or all
other embeddings (leave-one-out protocol, CUB / Cars / SOP: the query itself is never a reference). The
*positives* are the references with label y, the *negatives* the others, and R = the number of positives.

References are ranked by distance to q, **ties broken by reference index** (the order a stable sort of the
distance row gives: ``np.argsort(d, kind="stable")``). This is the only tie rule in dmllab; brute-force
libraries differ here (scikit-learn's ``argpartition``/``argsort`` and ``torch.topk`` leave the order of
equal distances unspecified), so with ties they can only agree with dmllab up to that choice.

* Recall@K (ProxyNCA++ Sec. 5, the usual DML protocol): the fraction of queries with at least one positive
  among the first K references. Because only the first positive matters, a query is a hit iff the number
  of references ranked before its nearest positive (all of them negatives) is < K; no top-K sort is needed.
  A query without any positive is a miss, as in the papers' brute-force code. K may exceed the number of
  references (a warning is issued): R@K is then the fraction of queries with at least one positive.
* P@1, R-precision and MAP@R ("A Metric Learning Reality Check", Musgrave et al. 2020, Sec. 3.2):
  RP = |positives among the first R| / R; MAP@R = (1/R) sum_{i=1..R} P(i) rel(i) with P(i) the precision of
  the first i references and rel(i) = 1 iff the i-th reference is a positive; P@1 = rel(1). Queries with
  R = 0 are excluded from these three means (as in MLRC / pytorch-metric-learning's AccuracyCalculator);
  a metric over no query at all is NaN.

Computation
-----------
Query chunks of ``chunk_size`` rows are compared with all references by one matrix product, so memory is
O(chunk_size x N_ref), never N x N. The ranking key is

* euclidean: ``|r|^2 - 2 q.r`` (the squared distance minus the row constant ``|q|^2``, which changes no
  order within a row and avoids one cancellation);
* cosine: ``-q_hat.r_hat`` on L2-normalised vectors.

Float32 is the default (the input's device, BLAS/cuBLAS speed). Float32 rounding can break or create exact
ties between nearly equidistant references; pass ``dtype=torch.float64`` for exactness checks. With small
integer coordinates every product and sum is exact in float32, which the tests use to test tie handling.

The rank of the m-th positive (positives ordered by (distance, index)) is m + (number of negatives before
it). From one chunk of keys the evaluator derives

* for Recall@K: the number of references before the first positive, by counting keys below its key
  (plus, only for rows with an exact tie at that key, keys equal to it with a smaller index);
* for MLRC: the R smallest keys of the row (``torch.topk`` with k = the largest R in the chunk) and, by
  ``searchsorted``, each positive's rank among the first R; rows with ties at a positive's key fall back to
  an exact count over the full row.

Peak extra memory per chunk is about chunk_size x N_ref x 8 bytes (float32 keys and a float32 buffer for
the counts; 12 with float64 keys) plus chunk_size x R_max x 24 bytes for the positives and the top-R keys;
rows with exact ties temporarily add a boolean row each.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

DISTANCES = ("euclidean", "cosine")


@dataclass(frozen=True)
class RetrievalResult:
    """Output of :func:`retrieval_metrics`; MLRC fields are None when not requested.

    Attributes:
        recall: {K: fraction of queries whose nearest positive is within the first K references}.
        precision_at_1, r_precision, map_at_r: MLRC means over queries with at least one positive.
        num_queries: all queries; num_queries_with_positive: those with R >= 1.
    """

    recall: dict[int, float] = field(default_factory=dict)
    precision_at_1: float | None = None
    r_precision: float | None = None
    map_at_r: float | None = None
    num_queries: int = 0
    num_queries_with_positive: int = 0


def as_tensor(x: Tensor | np.ndarray | Sequence, name: str) -> Tensor:
    """Accept a torch tensor, a numpy array or a nested sequence; return a tensor (no copy when possible)."""
    if isinstance(x, Tensor):
        return x.detach()
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    try:
        return torch.as_tensor(np.asarray(x))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a torch tensor or numpy array, got {type(x).__name__}") from err


def check_embeddings_labels(embeddings: Tensor, labels: Tensor, what: str) -> None:
    """Shape, dtype and finiteness checks with errors that name the problem."""
    if embeddings.ndim != 2:
        raise ValueError(f"{what} embeddings must be 2-D (N, D), got shape {tuple(embeddings.shape)}")
    if embeddings.shape[0] == 0:
        raise ValueError(f"{what} embeddings are empty")
    if not embeddings.is_floating_point():
        raise ValueError(f"{what} embeddings must be floating point, got {embeddings.dtype}")
    if labels.ndim != 1:
        raise ValueError(f"{what} labels must be 1-D (N,), got shape {tuple(labels.shape)}")
    if labels.shape[0] != embeddings.shape[0]:
        raise ValueError(
            f"{what} embeddings and labels have different lengths: {embeddings.shape[0]} != {labels.shape[0]}"
        )
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"{what} labels must be integers, got {labels.dtype}")
    if not bool(torch.isfinite(embeddings).all()):
        raise ValueError(f"{what} embeddings contain NaN or inf")


def _check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    ks = tuple(ks)
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"every K of Recall@K must be a positive integer, got {ks!r}")
    return tuple(sorted({int(k) for k in ks}))


@dataclass(frozen=True)
class _ClassIndex:
    """References grouped by label: ``order`` lists reference indices sorted by (label, index)."""

    order: Tensor  # (N_ref,) long
    classes: Tensor  # (C,) sorted unique labels
    starts: Tensor  # (C,) first position of each class in ``order``
    counts: Tensor  # (C,)

    @staticmethod
    def build(ref_labels: Tensor) -> _ClassIndex:
        order = torch.argsort(ref_labels, stable=True)  # ascending indices within each class
        classes, counts = torch.unique_consecutive(ref_labels[order], return_counts=True)
        starts = torch.cumsum(counts, 0) - counts
        return _ClassIndex(order, classes, starts, counts)

    def positives(self, labels: Tensor, self_index: Tensor | None) -> tuple[Tensor, Tensor]:
        """Padded positive reference indices for a chunk of query labels.

        Returns ``idx`` (B, P) long, ascending along each row among the valid entries, and ``valid`` (B, P)
        bool; the query itself (``self_index``, leave-one-out) is marked invalid.
        """
        pos = torch.searchsorted(self.classes, labels).clamp(max=len(self.classes) - 1)
        present = self.classes[pos] == labels
        count = torch.where(present, self.counts[pos], torch.zeros_like(pos))
        width = int(count.max()) if count.numel() else 0
        slots = torch.arange(width, device=labels.device)
        valid = slots.unsqueeze(0) < count.unsqueeze(1)  # (B, P)
        where = (self.starts[pos].unsqueeze(1) + slots).clamp(max=len(self.order) - 1)
        idx = self.order[where]  # (B, P)
        if self_index is not None:
            valid &= idx != self_index.unsqueeze(1)
        return idx, valid


def distance_keys(query: Tensor, reference: Tensor, ref_sqnorm: Tensor | None) -> Tensor:
    """Ranking keys (B, N_ref): ``|r|^2 - 2 q.r`` (euclidean) or ``-q.r`` (cosine, vectors pre-normalised).

    ``ref_sqnorm`` is ``|r|^2`` for euclidean and None for cosine. This is the only O(B x N_ref x D) step.
    """
    if ref_sqnorm is None:
        return torch.mm(query, reference.T).neg_()
    return torch.addmm(ref_sqnorm.unsqueeze(0), query, reference.T, alpha=-2.0)


def _count_before(keys: Tensor, key: Tensor, index: Tensor) -> Tensor:
    """Exact number of references before (key, index) in (key, index) lexicographic order, per row."""
    ar = torch.arange(keys.shape[1], device=keys.device)
    before = (keys < key.unsqueeze(1)) | ((keys == key.unsqueeze(1)) & (ar < index.unsqueeze(1)))
    return before.sum(1)


def _count_below(keys: Tensor, thr: Tensor, *, strict: bool, buf: Tensor) -> Tensor:
    """Per row, the number of keys < thr (``strict``) or <= thr, shape (B,) long.

    The comparison is written as 0/1 into the float buffer ``buf`` (B, N_ref) and summed by a matrix-vector
    product: several times faster than reducing a boolean tensor in eager PyTorch. Sums of 0/1 are exact in
    float32 below 2**24 references (the buffer is float64 beyond that).
    """
    cmp = torch.lt if strict else torch.le
    cmp(keys, thr.unsqueeze(1), out=buf)
    ones = torch.ones(keys.shape[1], dtype=buf.dtype, device=buf.device)
    return torch.mv(buf, ones).round_().long()


def _rank_of_first_positive(keys: Tensor, key0: Tensor, idx0: Tensor, buf: Tensor) -> Tensor:
    """Rank (0-based) of the first positive: keys strictly below it, plus equal keys with smaller index.

    Counting ``<`` and ``<=`` tells which rows have another reference at exactly the same key; only those
    rows pay for the index comparison. Every key below key0 belongs to a negative (key0 is the smallest
    positive key), and no positive at key0 has a smaller index than idx0.
    """
    below = _count_below(keys, key0, strict=True, buf=buf)
    at_or_below = _count_below(keys, key0, strict=False, buf=buf)
    tied = ((at_or_below - below) > 1) & torch.isfinite(key0)  # key0 = inf: the query has no positive
    if bool(tied.any()):
        rows = tied.nonzero().squeeze(1)
        below[rows] = _count_before(keys[rows], key0[rows], idx0[rows])
    return below


def _positive_ranks(keys: Tensor, pos_key: Tensor, pos_idx: Tensor, pos_valid: Tensor, r: Tensor) -> Tensor:
    """0-based rank of every positive whose rank is < R (others get a value >= R), shape (B, P).

    ``pos_key``/``pos_idx`` are sorted by (key, index) per row. With k = max R of the chunk, the k smallest
    keys of the row (``topk`` values are exact whatever order it picks among ties) give each positive's
    number of strictly smaller keys by ``searchsorted`` (exact while < k). Rows where another reference
    has exactly the positive's key, or where the count reaches k, are recounted over the full row.
    """
    k = int(r.max())
    if k == 0:
        return torch.full_like(pos_idx, 0)
    smallest = torch.topk(keys, k, dim=1, largest=False, sorted=True).values  # (B, k)
    width = int(pos_valid.sum(1).max())
    key = pos_key[:, :width].contiguous()
    lt = torch.searchsorted(smallest, key, right=False)  # (B, P)
    le = torch.searchsorted(smallest, key, right=True)
    rank = lt.clone()
    # the positive itself is one of the equal keys when it is among the k smallest
    unsure = pos_valid[:, :width] & (lt < r.unsqueeze(1)) & (((le - lt) > 1) | (le >= k))
    if bool(unsure.any()):
        rows, cols = unsure.nonzero(as_tuple=True)
        step = keys.shape[0]  # at most B rows of keys copied at a time: memory stays O(B x N_ref)
        for i in range(0, len(rows), step):
            r_i, c_i = rows[i : i + step], cols[i : i + step]
            rank[r_i, c_i] = _count_before(keys[r_i], key[r_i, c_i], pos_idx[r_i, c_i])
    out = torch.full_like(pos_idx, k)
    out[:, :width] = rank
    return out


def retrieval_metrics(
    embeddings: Tensor | np.ndarray,
    labels: Tensor | np.ndarray,
    *,
    ks: Iterable[int] = (1, 2, 4, 8),
    mlrc: bool = False,
    gallery: Tensor | np.ndarray | None = None,
    gallery_labels: Tensor | np.ndarray | None = None,
    distance: str = "euclidean",
    chunk_size: int = 1024,
    dtype: torch.dtype = torch.float32,
) -> RetrievalResult:
    """Recall@K for every K in ``ks`` and, if ``mlrc``, P@1 / R-precision / MAP@R, in one streaming pass.

    Args:
        embeddings: (N, D) query embeddings (torch or numpy); computation runs on their device.
        labels: (N,) integer labels.
        ks: the K values of Recall@K (may be empty).
        mlrc: also compute P@1, RP and MAP@R (Musgrave et al. 2020).
        gallery, gallery_labels: (M, D) / (M,) references for the query-vs-gallery protocol; when None the
            protocol is leave-one-out over ``embeddings``.
        distance: "euclidean" (ProxyNCA++) or "cosine" (Proxy Anchor, Proxy Synthesis).
        chunk_size: queries per chunk; memory is O(chunk_size x N_ref).
        dtype: float32 (default) or float64 for the distance computation.

    Returns:
        RetrievalResult with fractions in [0, 1] (see the module docstring for the definitions and the tie rule).
    """
    if distance not in DISTANCES:
        raise ValueError(f"unknown distance {distance!r}; valid: {list(DISTANCES)}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    ks = _check_ks(ks)

    query = as_tensor(embeddings, "embeddings")
    query_labels = as_tensor(labels, "labels")
    check_embeddings_labels(query, query_labels, "query" if gallery is not None else "")
    device = query.device
    leave_one_out = gallery is None
    if leave_one_out:
        if gallery_labels is not None:
            raise ValueError("gallery_labels given without gallery")
        ref, ref_labels = query, query_labels
    else:
        if gallery_labels is None:
            raise ValueError("gallery given without gallery_labels")
        ref = as_tensor(gallery, "gallery").to(device)
        ref_labels = as_tensor(gallery_labels, "gallery_labels").to(device)
        check_embeddings_labels(ref, ref_labels, "gallery")
        if ref.shape[1] != query.shape[1]:
            raise ValueError(f"query dim {query.shape[1]} != gallery dim {ref.shape[1]}")
    query_labels = query_labels.to(device=device, dtype=torch.long)
    ref_labels = ref_labels.to(dtype=torch.long)
    n_query, n_ref = query.shape[0], ref.shape[0]
    n_candidates = n_ref - 1 if leave_one_out else n_ref
    if n_candidates < 1:
        raise ValueError("leave-one-out retrieval needs at least 2 embeddings")
    if ks and ks[-1] > n_candidates:
        warnings.warn(
            f"Recall@{ks[-1]} asked with only {n_candidates} references per query: for K >= {n_candidates} "
            "it is the fraction of queries with at least one positive",
            stacklevel=2,
        )

    query = query.to(dtype)
    ref = ref.to(dtype)
    if distance == "cosine":
        query = torch.nn.functional.normalize(query, dim=1)
        ref = query if leave_one_out else torch.nn.functional.normalize(ref, dim=1)
        ref_sqnorm = None
    else:
        ref_sqnorm = (ref * ref).sum(1)  # (N_ref,)
    classes = _ClassIndex.build(ref_labels)

    hits = torch.zeros(len(ks), dtype=torch.long, device=device)
    kt = torch.tensor(ks, dtype=torch.long, device=device)
    n_with_pos = 0
    buf: Tensor | None = None  # (B, N_ref) comparison buffer, reused across chunks
    count_dtype = torch.float32 if n_ref < 2**24 else torch.float64
    # per-query values, summed once at the end with math.fsum: the result does not depend on chunk_size
    p1_parts: list[Tensor] = []
    rp_parts: list[Tensor] = []
    map_parts: list[Tensor] = []
    with torch.no_grad():
        for start in range(0, n_query, chunk_size):
            stop = min(start + chunk_size, n_query)
            rows = torch.arange(start, stop, device=device)
            keys = distance_keys(query[start:stop], ref, ref_sqnorm)  # (B, N_ref)
            if leave_one_out:
                keys[rows - start, rows] = math.inf  # the query is not its own reference
            pos_idx, pos_valid = classes.positives(query_labels[start:stop], rows if leave_one_out else None)
            r = pos_valid.sum(1)  # (B,) number of positives R
            has_pos = r > 0
            pos_key = keys.gather(1, pos_idx).masked_fill_(~pos_valid, math.inf)  # (B, P)
            # stable sort: equal keys keep ascending reference index (pos_idx is ascending per row)
            pos_key, perm = torch.sort(pos_key, dim=1, stable=True)
            pos_idx = pos_idx.gather(1, perm)
            pos_valid = pos_valid.gather(1, perm)
            n_with_pos += int(has_pos.sum())
            if pos_idx.shape[1] == 0:
                continue  # no query of the chunk has a positive: all misses

            if ks:
                buf = (
                    buf
                    if buf is not None and buf.shape == keys.shape
                    else torch.empty_like(keys, dtype=count_dtype)
                )
                first_rank = _rank_of_first_positive(keys, pos_key[:, 0], pos_idx[:, 0], buf)  # (B,)
                hit = has_pos.unsqueeze(1) & (first_rank.unsqueeze(1) < kt.unsqueeze(0))  # (B, len(ks))
                hits += hit.sum(0)
            if mlrc and bool(has_pos.any()):
                rank = _positive_ranks(keys, pos_key, pos_idx, pos_valid, r)  # (B, P)
                in_top_r = pos_valid & (rank < r.unsqueeze(1))
                m = torch.arange(1, rank.shape[1] + 1, device=device, dtype=torch.float64)
                prec = torch.where(in_top_r, m / (rank.to(torch.float64) + 1.0), 0.0)  # P(i) at rel(i) = 1
                rf = r.clamp(min=1).to(torch.float64)
                map_parts.append((prec.sum(1) / rf)[has_pos].cpu())
                rp_parts.append((in_top_r.sum(1) / rf)[has_pos].cpu())
                p1_parts.append((rank[:, 0] == 0)[has_pos].cpu())

    def mean(parts: list[Tensor]) -> float:
        if not n_with_pos:
            return float("nan")
        return math.fsum(torch.cat(parts).double().tolist()) / n_with_pos

    recall = {k: float(h) / n_query for k, h in zip(ks, hits.tolist())}
    if mlrc and n_with_pos == 0:
        warnings.warn("no query has a positive reference: P@1, RP and MAP@R are NaN", stacklevel=2)
    return RetrievalResult(
        recall=recall,
        precision_at_1=mean(p1_parts) if mlrc else None,
        r_precision=mean(rp_parts) if mlrc else None,
        map_at_r=mean(map_parts) if mlrc else None,
        num_queries=n_query,
        num_queries_with_positive=n_with_pos,
    )
