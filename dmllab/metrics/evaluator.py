"""One streaming retrieval evaluator for Recall@K and the MLRC metrics (P@1, R-precision, MAP@R).

Definitions
-----------
For a query q with label y, the *references* are the gallery (query-vs-gallery protocol, In-Shop) or all
other embeddings (leave-one-out protocol, CUB / Cars / SOP: the query itself is never a reference). The
*positives* are the references with label y, the *negatives* the others, and R = the number of positives.
Distances are squared euclidean distances, or for ``distance="cosine"`` the squared euclidean distances of
the L2-normalised vectors (``2 - 2 cos``: the same order as the cosine distance ``1 - cos``).

References are ranked by distance to q, and **a tie counts against the positive**: a negative at exactly the
same distance as a positive is ranked before it (the order among tied positives, or among tied negatives,
changes no metric). The rule is a function of the distances and the labels alone, so no metric depends on the
order of the samples; among the values that breaking ties in some order can give, it is the lowest (a model
gets no credit for a positive it does not separate from a negative). Published evaluation code leaves ties to
its sort: ProxyNCA++'s ``np.argsort`` (quicksort) of the distance matrix, Proxy Anchor's ``torch.topk``,
pytorch-metric-learning's k-NN (faiss or ``torch.topk``); all of them also drop the first column of the
ranking as "the query itself", which with duplicate embeddings may be another sample. On data without exact
ties (any continuous embedding) every rule gives the same values.

* Recall@K (ProxyNCA++ Sec. 5, the usual DML protocol): the fraction of queries with at least one positive
  among the first K references. Because only the first positive matters, a query is a hit iff the number
  of references ranked before its nearest positive (all of them negatives) is < K; no top-K sort is needed.
  With the tie rule: a query whose nearest positive ties with negatives across the K-th position is a miss.
  A query without any positive is a miss, as in the papers' brute-force code (the denominator is every
  query; a warning says how many had none); when no query has a positive, every metric is NaN, with a
  warning. K may exceed the number of references (a warning is issued): R@K is then the fraction of
  queries with at least one positive.
* P@1, R-precision and MAP@R ("A Metric Learning Reality Check", Musgrave et al. 2020, Sec. 3.2):
  RP = |positives among the first R| / R; MAP@R = (1/R) sum_{i=1..R} P(i) rel(i) with P(i) the precision of
  the first i references and rel(i) = 1 iff the i-th reference is a positive; P@1 = rel(1). Queries with
  R = 0 are excluded from these three means (as in MLRC / pytorch-metric-learning's AccuracyCalculator);
  a metric over no query at all is NaN.

Safety rules
------------
* Embeddings with NaN or inf raise :class:`NonFiniteEmbeddingError`; an all-zero embedding with
  ``distance="cosine"`` (whose direction is undefined) raises :class:`ZeroEmbeddingError`.
* Collapsed embeddings raise :class:`CollapsedEmbeddingError` unless ``allow_collapsed=True``: a set of at
  least two rows is collapsed when every coordinate varies over the rows by at most ``rtol`` times the
  largest coordinate magnitude (of the unit rows, for the cosine distance), with ``rtol`` = 2^-16 (about
  1.5e-5) for float32 and narrower inputs and 2^-44 (about 5.7e-14) for float64: the rows then agree to
  about 2^7 units of rounding of their own precision, and their distances are rounding noise. All-equal
  (or all-zero) rows are the extreme case. Queries and gallery are checked separately.
* Finite but huge (or tiny) embeddings are first multiplied by one power of two (exact, and it changes no
  ranking), so that no squared distance can overflow or underflow: any finite scale gives the metrics of
  scale 1 (float32 from 1e-45 to 3e38, float64 from 5e-324 to 1.8e308, subnormal numbers included, as
  far as the scaled input itself holds the same values). Every distance the evaluator compares is finite,
  so a non-finite distance can never count as a hit.

Recall@K: exact, in one blocked pass
------------------------------------
1. The nearest positive of every query, its squared distance ``key0`` and index ``idx0`` (smallest index
   among equal distances), is computed in float64 from the positives alone (sum over classes of n_c^2 D).
2. One pass over tiles of the distance matrix (``chunk_size`` x ``chunk_size``; leave-one-out visits each
   unordered pair once, the matrix being symmetric) computes the tile by one matrix product
   (``|q|^2 + |r|^2 - 2 q.r``, float32 by default) and counts per query the references strictly below
   ``key0 - tol`` (``c_lo``: certainly before the nearest positive) and at or below ``key0 + tol``
   (``c_hi``: the nearest positive and everything that might tie with it). ``tol`` bounds the rounding
   error of a float32 distance: ``u min(2n + 4, 8 sqrt(n)) (|q|^2 + max |r|^2)``, n = D + 2, u = 2^-24 (the
   worst case for small n; the statistical bound for long dot products, about 14 times the largest error
   measured on 4e7 random SOP-size pairs).
3. The rank of the nearest positive lies in [c_lo, c_hi - 1]. Whenever a K of ``ks`` falls inside that
   interval (a near tie at a K boundary: about 0.05 % of SOP queries, and every exact tie) the query's
   distances are recomputed in float64 and its rank counted exactly with the tie rule (the negatives at or
   below the nearest positive's distance, plus the references strictly below it).

So R@K is the value of exact arithmetic (up to float64 rounding), whatever ``dtype`` or ``chunk_size``.
Memory: the inputs, one tile and one comparison buffer (``chunk_size^2`` x 8 bytes), O(N) counters.

On the CPU the tile products go to numpy's BLAS (``matmul="torch"`` forces ``torch.mm``); on an accelerator
everything runs on the embeddings' device with ``torch.mm`` into preallocated buffers, without host syncs.

MLRC metrics: float keys over full rows
---------------------------------------
P@1, RP and MAP@R need the ranks of up to R positives, so query chunks of ``chunk_size`` rows are compared
with all references (memory O(chunk_size x N_ref)) by the ranking key ``|r|^2 - 2 q.r`` (the squared
distance minus the row constant ``|q|^2``) in ``dtype``. From one chunk of keys the evaluator takes the R
smallest keys of the row (``torch.topk`` with k = the largest R in the chunk) and, by ``searchsorted``,
the rank of every positive under the tie rule: the negatives with a key at or below its own plus the positives
ranked before it (only rows where that count reaches k fall back to an exact count over the full row).
These three metrics follow the float keys: float32 rounding can break or create exact ties between nearly
equidistant references; pass ``dtype=torch.float64`` for exactness checks (with small integer coordinates
every product and sum is exact in float32, which the tests use to test tie handling).
When MLRC is requested, Recall@K is counted from the same full-row keys with the same band rule as above,
so it is identical to the blocked pass.
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
MATMULS = ("auto", "torch", "numpy")
# Elements per temporary block (float64): bounds the memory of the positive distances and of the float64
# recount of near-tie queries (~64 MiB).
_BLOCK_ELEMENTS = 1 << 23
# Embeddings are rescaled by a power of two when their largest magnitude leaves [2^-32, 2^32]: inside it no
# squared distance of float32 coordinates (D < 2^50) can overflow or lose precision to underflow.
_SAFE_EXPONENT = 32
# Coordinates hashed by duplicate_groups.
_HASH_COLUMNS = 16


class DegenerateEmbeddingError(ValueError):
    """Embeddings no metric can be trusted on (a failed model): non-finite or collapsed. The run store records a
    run that ends with one like a diverged run (:mod:`dmllab.training.store`)."""


class NonFiniteEmbeddingError(DegenerateEmbeddingError):
    """Embeddings contain NaN or inf (a diverged model); no metric computed from them is meaningful."""


class CollapsedEmbeddingError(DegenerateEmbeddingError):
    """Every embedding is (nearly) the same point (module docstring, "Safety rules"): the distances between them
    are rounding noise, and a metric would only measure the tie rule. ``allow_collapsed=True`` computes the
    metrics anyway."""


class ZeroEmbeddingError(ValueError):
    """The cosine distance was asked for an all-zero embedding, whose direction is undefined."""


class FewReferencesWarning(UserWarning):
    """A split too small for what is asked: K above the references per query, or queries without a positive.
    The metrics stay defined (Recall@K counts such a query as a miss); a fast dev run's splits are that small on
    purpose and do not show it."""


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
    """Accept a torch tensor, a numpy array or a nested sequence of numbers; return a tensor (no copy when
    possible). Anything else (strings, objects, ragged lists) raises a ValueError naming ``name``."""
    if isinstance(x, Tensor):
        return x.detach()
    if isinstance(x, (str, bytes)) or x is None or np.isscalar(x):
        raise ValueError(f"{name} must be a torch tensor or numpy array, got {type(x).__name__} {x!r:.40}")
    try:
        arr = x if isinstance(x, np.ndarray) else np.asarray(x)
    except (TypeError, ValueError) as err:  # ragged nested lists
        raise ValueError(f"{name} must be a torch tensor or numpy array, got {type(x).__name__}") from err
    if arr.dtype.kind not in "biuf":
        raise ValueError(
            f"{name} must hold numbers, got a numpy array of dtype {arr.dtype} (e.g. strings: map class names "
            "to integer labels first)"
        )
    return torch.from_numpy(np.ascontiguousarray(arr))


def check_embeddings_labels(embeddings: Tensor, labels: Tensor, what: str) -> None:
    """Shape, dtype and finiteness checks with errors that name the problem (``what``: "query", "gallery" or
    "" for leave-one-out).

    Raises:
        NonFiniteEmbeddingError: NaN or inf in ``embeddings`` (a ValueError).
        ValueError: anything else.
    """
    emb, lab = f"{what} embeddings".strip(), f"{what} labels".strip()
    if embeddings.ndim != 2:
        raise ValueError(f"{emb} must be 2-D (N, D), got shape {tuple(embeddings.shape)}")
    if embeddings.shape[0] == 0:
        raise ValueError(f"{emb} are empty")
    if embeddings.shape[1] == 0:
        raise ValueError(f"{emb} have 0 dimensions (shape {tuple(embeddings.shape)})")
    if not embeddings.is_floating_point():
        raise ValueError(f"{emb} must be floating point, got {embeddings.dtype}")
    if labels.ndim != 1:
        raise ValueError(f"{lab} must be 1-D (N,), got shape {tuple(labels.shape)}")
    if labels.shape[0] != embeddings.shape[0]:
        raise ValueError(
            f"{emb} and labels have different lengths: {embeddings.shape[0]} != {labels.shape[0]}"
        )
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"{lab} must be integers, got {labels.dtype}")
    if not bool(torch.isfinite(embeddings).all()):
        bad = (~torch.isfinite(embeddings)).any(1).nonzero().squeeze(1)
        raise NonFiniteEmbeddingError(
            f"{emb} contain NaN or inf in {len(bad)} of {embeddings.shape[0]} rows (first: "
            f"{bad[:5].tolist()}); the model diverged, no metric can be computed from them"
        )


def check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    if isinstance(ks, (int, np.integer)) or not isinstance(ks, Iterable) or isinstance(ks, (str, bytes)):
        raise ValueError(
            f"ks must be a sequence of positive integers such as (1, 2, 4, 8), got {ks!r}"
            + (f"; for one K write ks=({ks},)" if isinstance(ks, (int, np.integer)) else "")
        )
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

    def count(self, labels: Tensor) -> Tensor:
        """Number of references with each label, shape (B,) long (0 for a label no reference has)."""
        pos = torch.searchsorted(self.classes, labels).clamp(max=len(self.classes) - 1)
        present = self.classes[pos] == labels
        return torch.where(present, self.counts[pos], torch.zeros_like(pos))

    def positives(self, labels: Tensor, self_index: Tensor | None) -> tuple[Tensor, Tensor]:
        """Padded positive reference indices for a chunk of query labels.

        Returns ``idx`` (B, P) long, ascending along each row among the valid entries, and ``valid`` (B, P)
        bool; the query itself (``self_index``, leave-one-out) is marked invalid.
        """
        pos = torch.searchsorted(self.classes, labels).clamp(max=len(self.classes) - 1)
        count = self.count(labels)
        width = int(count.max()) if count.numel() else 0
        slots = torch.arange(width, device=labels.device)
        valid = slots.unsqueeze(0) < count.unsqueeze(1)  # (B, P)
        where = (self.starts[pos].unsqueeze(1) + slots).clamp(max=len(self.order) - 1)
        idx = self.order[where]  # (B, P)
        if self_index is not None:
            valid &= idx != self_index.unsqueeze(1)
        return idx, valid


# ------------------------------------------------------------------------------------------- preparation
def power_of_two_exponent(max_abs: float) -> int:
    """0, or the exponent e such that ``max_abs * 2**e`` lies in [0.5, 1), when ``max_abs`` lies outside the safe
    range [2^-32, 2^32]. 2**e itself may not be a float (e = 1029 for float64 subnormals): apply it with
    :func:`scale_by_power_of_two`."""
    if max_abs == 0.0 or 2.0**-_SAFE_EXPONENT <= max_abs <= 2.0**_SAFE_EXPONENT:
        return 0
    return -math.frexp(max_abs)[1]


def scale_by_power_of_two(x: Tensor, exponent: int, dtype: torch.dtype) -> Tensor:
    """``x * 2**exponent`` in ``dtype``, computed in float64 by two factors that are floats themselves: exact
    (a power of two changes no significand) unless the result under- or overflows ``dtype``."""
    half = exponent // 2
    return (x.double() * math.ldexp(1.0, half) * math.ldexp(1.0, exponent - half)).to(dtype)


# Collapse tolerance by the input's precision (module docstring, "Safety rules").
_COLLAPSE_RTOL = {torch.float64: 2.0**-44}
_COLLAPSE_RTOL_DEFAULT = 2.0**-16


def collapse_tolerance(dtype: torch.dtype) -> float:
    """``rtol`` of the collapse rule for embeddings of ``dtype``."""
    return _COLLAPSE_RTOL.get(dtype, _COLLAPSE_RTOL_DEFAULT)


def coordinate_spread(x: Tensor) -> tuple[float, float]:
    """(largest range over the rows of any coordinate, largest coordinate magnitude) of ``x`` (N, D), in float64.

    One pass of ``aminmax`` in ``x``'s own dtype (exact); only the (D,) extremes are converted.
    """
    lo, hi = torch.aminmax(x, dim=0)
    lo, hi = lo.double(), hi.double()
    return float((hi - lo).max()), float(torch.maximum(hi.abs(), lo.abs()).max())


def is_collapsed(x: Tensor, rtol: float | None = None) -> bool:
    """Whether the rows of ``x`` (N, D), N >= 2, are collapsed (module docstring, "Safety rules"); ``rtol``
    defaults to :func:`collapse_tolerance` of ``x.dtype``."""
    if x.shape[0] < 2:
        return False
    spread, magnitude = coordinate_spread(x)
    return spread <= (collapse_tolerance(x.dtype) if rtol is None else rtol) * magnitude


def _collapsed_message(what: str, n: int, spread: float, magnitude: float, rtol: float) -> str:
    rel = spread / magnitude if magnitude > 0 else 0.0
    name = f"{what} embeddings" if what else "embeddings"
    return (
        f"the {n} {name} are collapsed: every coordinate varies by at most {rel:.3g} of the largest magnitude "
        f"{magnitude:.3g} (tolerance {rtol:.3g}), so their distances are rounding noise and any metric would "
        "only measure how ties are broken; the model has failed (pass allow_collapsed=True to compute the "
        "metrics anyway)"
    )


def check_not_collapsed(x: Tensor, what: str, *, input_dtype: torch.dtype | None = None) -> None:
    """Raise :class:`CollapsedEmbeddingError` when the rows of ``x`` are collapsed (sets of one row never are);
    ``input_dtype``: the precision the rule is judged at (default ``x.dtype``)."""
    rtol = collapse_tolerance(input_dtype or x.dtype)
    if is_collapsed(x, rtol):  # the spread is measured again only to word the error
        raise CollapsedEmbeddingError(_collapsed_message(what, x.shape[0], *coordinate_spread(x), rtol))


def _sqnorms64(x: Tensor) -> Tensor:
    """Squared row norms in float64, (N,), computed in row blocks (no float64 copy of ``x``)."""
    rows = max(1, _BLOCK_ELEMENTS // max(1, x.shape[1]))
    return torch.cat([x[i : i + rows].double().square().sum(1) for i in range(0, x.shape[0], rows)])


def _unit_rows(x: Tensor, dtype: torch.dtype, what: str) -> Tensor:
    """L2-normalised rows in ``dtype``, computed in float64 after dividing each row by its largest magnitude
    (so that no finite input overflows). All-zero rows raise ZeroEmbeddingError."""
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    rows = max(1, _BLOCK_ELEMENTS // max(1, x.shape[1]))
    for i in range(0, x.shape[0], rows):
        xc = x[i : i + rows].to(torch.float64, copy=True)  # never modify the caller's tensor
        m = xc.abs().amax(1, keepdim=True)
        zero = (m == 0).squeeze(1)
        if bool(zero.any()):
            bad = (zero.nonzero().squeeze(1) + i).tolist()
            raise ZeroEmbeddingError(
                f"cosine distance is undefined for all-zero {what}embeddings (rows {bad[:5]}"
                f"{', ...' if len(bad) > 5 else ''}); use distance='euclidean' or fix the model"
            )
        xc /= m
        xc /= xc.norm(dim=1, keepdim=True)
        out[i : i + rows] = xc
    return out


def _prepare(
    query: Tensor, ref: Tensor | None, distance: str, dtype: torch.dtype, allow_collapsed: bool
) -> tuple[Tensor, Tensor]:
    """Working copies of query and reference in ``dtype``: unit rows (cosine) or one common power-of-two
    rescale (euclidean, only when needed). ``ref is None`` means leave-one-out (returns the same tensor).
    Collapsed inputs raise CollapsedEmbeddingError unless ``allow_collapsed`` (module docstring)."""
    q_name, r_name = ("", "") if ref is None else ("query", "gallery")
    if distance == "cosine":
        q = _unit_rows(query, dtype, f"{q_name} " if q_name else "")
        r = q if ref is None else _unit_rows(ref, dtype, "gallery ")
        if not allow_collapsed:  # on the unit rows, at the precision of the input
            check_not_collapsed(q, q_name, input_dtype=query.dtype)
            if ref is not None:
                check_not_collapsed(r, r_name, input_dtype=ref.dtype)
        return q, r
    if not allow_collapsed:
        check_not_collapsed(query, q_name)
        if ref is not None:
            check_not_collapsed(ref, r_name)
    max_abs = float(query.abs().amax())
    if ref is not None:
        max_abs = max(max_abs, float(ref.abs().amax()))
    exponent = power_of_two_exponent(max_abs)

    def convert(x: Tensor) -> Tensor:
        if exponent == 0:
            return x.to(dtype).contiguous()
        return scale_by_power_of_two(x, exponent, dtype)

    q = convert(query)
    return q, (q if ref is None else convert(ref))


# --------------------------------------------------------------------------------------- nearest positive
def _nearest_positive(
    query: Tensor,
    ref: Tensor,
    q_sq: Tensor,
    r_sq: Tensor,
    query_labels: Tensor,
    classes: _ClassIndex,
    leave_one_out: bool,
) -> tuple[Tensor, Tensor]:
    """float64 squared distance ``key0`` (inf without positive) and index ``idx0`` (-1) of every query's
    nearest positive, the smallest index among equal distances.

    Classes are processed in groups of similar size: the members of each class are gathered once into a
    padded (C_g, P, D) block and compared by one batched product with the queries of the same class, so the
    cost is sum over classes of n_query_c x n_ref_c x D, reading each embedding about once.
    """
    n, dim = query.shape
    device = query.device
    key0 = torch.full((n,), math.inf, dtype=torch.float64, device=device)
    idx0 = torch.full((n,), -1, dtype=torch.long, device=device)
    qcls = classes if leave_one_out else _ClassIndex.build(query_labels)
    # classes present among both the queries and the references, with their slot in each index
    r_pos = torch.searchsorted(classes.classes, qcls.classes).clamp(max=len(classes.classes) - 1)
    shared = classes.classes[r_pos] == qcls.classes
    q_slot = shared.nonzero().squeeze(1)
    r_slot = r_pos[q_slot]
    q_counts, r_counts = qcls.counts[q_slot], classes.counts[r_slot]
    order = torch.argsort(torch.maximum(q_counts, r_counts), stable=True)  # similar sizes share a group
    q_slot, r_slot, q_counts, r_counts = q_slot[order], r_slot[order], q_counts[order], r_counts[order]
    width_q, width_r = q_counts.tolist(), r_counts.tolist()
    n_cls, start = len(width_q), 0
    while start < n_cls:
        stop = start + 1  # grow the group while (classes x padded members x D) stays within budget
        while (
            stop < n_cls and (stop + 1 - start) * max(width_q[stop], width_r[stop]) * dim <= _BLOCK_ELEMENTS
        ):
            stop += 1
        pq, pr = max(width_q[start:stop]), max(width_r[start:stop])
        qi, qv = _padded_members(qcls, q_slot[start:stop], pq)  # (C_g, Pq)
        ri, rv = _padded_members(classes, r_slot[start:stop], pr)  # (C_g, Pr)
        dot = torch.bmm(query[qi].double(), ref[ri].double().transpose(1, 2))  # (C_g, Pq, Pr)
        d2 = (q_sq[qi].unsqueeze(2) + r_sq[ri].unsqueeze(1) - 2.0 * dot).clamp_(min=0.0)
        invalid = ~(qv.unsqueeze(2) & rv.unsqueeze(1))
        if leave_one_out:
            invalid |= qi.unsqueeze(2) == ri.unsqueeze(1)  # the query itself
        d2.masked_fill_(invalid, math.inf)
        best, arg = d2.min(2)  # first occurrence: the smallest index among ties (members ascending)
        best_idx = torch.where(torch.isfinite(best), ri.gather(1, arg), torch.full_like(arg, -1))
        key0[qi[qv]] = best[qv]
        idx0[qi[qv]] = best_idx[qv]
        start = stop
    return key0, idx0


def _padded_members(index: _ClassIndex, slots: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """Member indices (C_g, width) of the classes ``slots`` of ``index``, ascending, and their validity."""
    ar = torch.arange(width, device=slots.device)
    valid = ar.unsqueeze(0) < index.counts[slots].unsqueeze(1)
    where = (index.starts[slots].unsqueeze(1) + ar).clamp(max=len(index.order) - 1)
    return index.order[where], valid


def _tolerance(q_sq: Tensor, r_sq_max: float, dim: int, dtype: torch.dtype) -> Tensor:
    """Per-query bound on the rounding error of a squared distance computed in ``dtype`` (module doc),
    plus the float64 error of ``key0`` and the rounding of the thresholds themselves."""
    u = 2.0**-24 if dtype == torch.float32 else 2.0**-53
    n = dim + 2
    coef = u * (min(2 * n + 4, 8 * math.sqrt(n)) + 4) + 2.0**-53 * (2 * n + 8)
    return coef * (q_sq + r_sq_max)  # (N,) float64


# ------------------------------------------------------------------------------------------- tile pass
def _use_numpy(x: Tensor, matmul: str) -> bool:
    if matmul == "numpy":
        if x.device.type != "cpu":
            raise ValueError("matmul='numpy' needs CPU embeddings")
        return True
    return matmul == "auto" and x.device.type == "cpu"


def _product(a: Tensor, b: Tensor, out: Tensor, use_numpy: bool) -> None:
    """out = a @ b.T (float32 sgemm or float64 dgemm), written into the preallocated ``out``."""
    if use_numpy:
        np.matmul(a.numpy(), b.numpy().T, out=out.numpy())
    else:
        torch.mm(a, b.T, out=out)


def _band_counts(
    query: Tensor,
    ref: Tensor,
    q_sq: Tensor,
    r_sq: Tensor,
    lo: Tensor,
    hi: Tensor,
    *,
    leave_one_out: bool,
    block: int,
    use_numpy: bool,
) -> tuple[Tensor, Tensor]:
    """Per query, the number of references with squared distance < ``lo`` and <= ``hi`` (float64 counts).

    Tiles of ``block`` x ``block``. Each tile of squared distances is one matrix product of augmented rows,
    ``[q, 1, |q|^2] . [-2 r, |r|^2, 1]`` (the norms ride in the product: no pass over the tile to add them);
    the queries' augmented copy is made once, a reference block's once per column of tiles. With
    ``leave_one_out`` only tiles on or above the diagonal are computed and each serves the rows (queries of
    block i) and the columns (queries of block j); the query itself is excluded (diagonal set to +inf).

    On the CPU the products go to numpy's BLAS (its own threads) and the comparisons run on one torch
    thread: two thread pools busy-waiting for the same two cores made the comparisons 10-50 times slower.
    """
    n_q, n_r, dim = query.shape[0], ref.shape[0], query.shape[1]
    device, dtype = query.device, query.dtype
    b = min(block, max(n_q, n_r))
    width = -(-(dim + 2) // 16) * 16  # zero padding to a multiple of 16: aligned rows, products unchanged
    left = torch.zeros(n_q, width, dtype=dtype, device=device)  # [q, 1, |q|^2, 0...]
    left[:, :dim] = query
    left[:, dim] = 1.0
    left[:, dim + 1] = q_sq
    right_buf = torch.zeros(b, width, dtype=dtype, device=device)
    tile_buf = torch.empty(b * b, dtype=dtype, device=device)
    cmp_buf = torch.empty(b * b, dtype=dtype, device=device)
    ones = torch.ones(b, dtype=dtype, device=device)
    c_lo = torch.zeros(n_q, dtype=torch.float64, device=device)
    c_hi = torch.zeros(n_q, dtype=torch.float64, device=device)
    lo_w, hi_w = lo.to(dtype), hi.to(dtype)
    threads = torch.get_num_threads()
    if use_numpy:
        torch.set_num_threads(1)
    try:
        with torch.no_grad():
            for j0 in range(0, n_r, b):
                j1 = min(j0 + b, n_r)
                bj = j1 - j0
                right = right_buf[:bj]  # [-2 r, |r|^2, 1, 0...] of the reference block
                torch.mul(ref[j0:j1], -2.0, out=right[:, :dim])
                right[:, dim] = r_sq[j0:j1]
                right[:, dim + 1] = 1.0
                for i0 in range(0, j0 + 1 if leave_one_out else n_q, b):
                    i1 = min(i0 + b, n_q)
                    bi = i1 - i0
                    tile = tile_buf[: bi * bj].view(bi, bj)
                    cmp = cmp_buf[: bi * bj].view(bi, bj)
                    _product(left[i0:i1], right, tile, use_numpy)  # squared distances (bi, bj)
                    if leave_one_out and i0 == j0:
                        tile.diagonal().fill_(math.inf)  # the query is not its own reference
                    # rows: queries i0:i1 against references j0:j1 (0/1 floats summed by a BLAS mv)
                    torch.lt(tile, lo_w[i0:i1].unsqueeze(1), out=cmp)
                    c_lo[i0:i1] += torch.mv(cmp, ones[:bj])
                    torch.le(tile, hi_w[i0:i1].unsqueeze(1), out=cmp)
                    c_hi[i0:i1] += torch.mv(cmp, ones[:bj])
                    if leave_one_out and j0 != i0:  # columns: queries j0:j1 against references i0:i1
                        torch.lt(tile, lo_w[j0:j1].unsqueeze(0), out=cmp)
                        c_lo[j0:j1] += torch.mv(cmp.T, ones[:bi])
                        torch.le(tile, hi_w[j0:j1].unsqueeze(0), out=cmp)
                        c_hi[j0:j1] += torch.mv(cmp.T, ones[:bi])
    finally:
        torch.set_num_threads(threads)
    return c_lo, c_hi


def _exact_ranks(
    rows: Tensor,
    query: Tensor,
    ref: Tensor,
    r_sq: Tensor,
    query_labels: Tensor,
    ref_labels: Tensor,
    leave_one_out: bool,
    canon: Tensor | None,
) -> Tensor:
    """Exact 0-based rank of the nearest positive of the queries ``rows`` under the tie rule (float64
    distances; the references before it: all those strictly closer and the negatives at its distance); -1 for a
    query without positive. Used for the rare queries with a near tie at a K boundary. ``canon``: see
    :func:`duplicate_groups` (identical references get identical distances)."""
    n_r, dim = ref.shape
    device = query.device
    out = torch.empty(len(rows), dtype=torch.long, device=device)
    per = max(1, _BLOCK_ELEMENTS // n_r)
    ref_step = max(1, _BLOCK_ELEMENTS // dim)
    for s0 in range(0, len(rows), per):
        sub = rows[s0 : s0 + per]
        q = query[sub].double()
        d2 = torch.empty(len(sub), n_r, dtype=torch.float64, device=device)
        for j0 in range(0, n_r, ref_step):
            d2[:, j0 : j0 + ref_step] = torch.mm(q, ref[j0 : j0 + ref_step].double().T)
        d2.mul_(-2.0).add_(r_sq.unsqueeze(0)).add_((q * q).sum(1, keepdim=True)).clamp_(min=0.0)
        if canon is not None:
            d2 = d2[:, canon]
        if leave_one_out:
            d2[torch.arange(len(sub), device=device), sub] = math.inf
        pos = ref_labels.unsqueeze(0) == query_labels[sub].unsqueeze(1)
        if leave_one_out:
            pos[torch.arange(len(sub), device=device), sub] = False
        key0 = d2.masked_fill(~pos, math.inf).min(1).values.unsqueeze(1)
        rank = ((d2 < key0) | ((d2 == key0) & ~pos)).sum(1)
        out[s0 : s0 + per] = torch.where(pos.any(1), rank, torch.full_like(rank, -1))
    return out


def duplicate_groups(x: Tensor) -> Tensor | None:
    """For every row of ``x`` (N, D), the index of the first row identical to it (itself for a unique row), or
    None when all rows differ. The evaluator gives identical references identical keys through it: BLAS
    products round the same dot product differently at different positions of a matrix, which would turn an
    exact tie between duplicates into an order that depends on where they sit.

    Rows are grouped by a hash of the bits of up to 16 of their coordinates (integer arithmetic: the same for a
    row wherever it sits) and confirmed on every coordinate; -0.0 counts as 0.0. O(N) work when all rows
    differ, O(N D) for the rows that share a hash.
    """
    n = x.shape[0]
    if n < 2:
        return None
    step = max(1, x.shape[1] // _HASH_COLUMNS)
    sample = x[:, ::step][:, :_HASH_COLUMNS] + 0.0  # -0.0 -> 0.0: equal values, equal bits
    view = {8: torch.int32, 4: torch.int32, 2: torch.int16, 1: torch.int8}[sample.element_size()]
    bits = sample.contiguous().view(view).reshape(n, -1).long()  # |bits| < 2^31
    gen = torch.Generator(device="cpu").manual_seed(0x5EED)
    weights = torch.randint(1, 2**20, (bits.shape[1],), generator=gen, dtype=torch.int64).to(x.device)
    hashes = (bits * weights).sum(1)  # exact: at most 32 terms below 2^51
    order = torch.argsort(hashes, stable=True)  # ascending index within equal hashes
    sorted_h = hashes[order]
    same = sorted_h[1:] == sorted_h[:-1]
    if not bool(same.any()):
        return None
    # the first row of each run of equal hashes, for every position in sorted order
    starts = torch.ones(n, dtype=torch.bool, device=x.device)
    starts[1:] = ~same
    run_id = torch.cumsum(starts.long(), 0) - 1
    first = order[starts][run_id]  # (N,) in sorted order: the smallest index of the run
    canon = torch.arange(n, device=x.device)
    cand = (~starts).nonzero().squeeze(1)  # positions whose hash equals the previous one's
    step = max(1, _BLOCK_ELEMENTS // max(1, x.shape[1]))
    for i in range(0, len(cand), step):
        c = cand[i : i + step]
        a, b = order[c], first[c]
        confirmed = (x[a] == x[b]).all(1)  # a hash collision keeps its own row
        canon[a[confirmed]] = b[confirmed]
    return canon if bool((canon != torch.arange(n, device=x.device)).any()) else None


def _recall_hits(c_lo: Tensor, c_hi: Tensor, has_pos: Tensor, ks: tuple[int, ...], resolve) -> Tensor:
    """Hits per K (len(ks),) long from the band counts: the nearest positive's rank is in [c_lo, c_hi - 1];
    queries where a K falls inside that interval get their exact rank from ``resolve(rows)``."""
    device = c_lo.device
    kt = torch.tensor(ks, dtype=torch.float64, device=device).unsqueeze(0)  # (1, len(ks))
    lo, hi = c_lo.unsqueeze(1), (c_hi - 1.0).unsqueeze(1)
    hit = has_pos.unsqueeze(1) & (hi < kt)  # certainly within the first K
    unsure = has_pos.unsqueeze(1) & (lo < kt) & (hi >= kt)
    rows = unsure.any(1).nonzero().squeeze(1)
    if len(rows):
        rank = resolve(rows).to(torch.float64).unsqueeze(1)  # (m, 1), -1 never happens here (has_pos)
        hit[rows] = (rank >= 0) & (rank < kt)
    return hit.sum(0)


# ----------------------------------------------------------------------------------- full-row MLRC path
def distance_keys(query: Tensor, reference: Tensor, ref_sqnorm: Tensor | None) -> Tensor:
    """Ranking keys (B, N_ref): ``|r|^2 - 2 q.r`` (euclidean) or ``-q.r`` (``ref_sqnorm`` None).

    The squared distance minus the row constant ``|q|^2``. This is the only O(B x N_ref x D) step of the
    full-row path.
    """
    if ref_sqnorm is None:
        return torch.mm(query, reference.T).neg_()
    return torch.addmm(ref_sqnorm.unsqueeze(0), query, reference.T, alpha=-2.0)


def _count_below(keys: Tensor, thr: Tensor, *, strict: bool, buf: Tensor) -> Tensor:
    """Per row, the number of keys < thr (``strict``) or <= thr, shape (B,) float64.

    The comparison is written as 0/1 into the float buffer ``buf`` (B, N_ref) and summed by a matrix-vector
    product: several times faster than reducing a boolean tensor in eager PyTorch. Sums of 0/1 are exact in
    float32 below 2**24 references (the buffer is float64 beyond that).
    """
    cmp = torch.lt if strict else torch.le
    cmp(keys, thr.unsqueeze(1), out=buf)
    ones = torch.ones(keys.shape[1], dtype=buf.dtype, device=buf.device)
    return torch.mv(buf, ones).double()


def _positive_ranks(keys: Tensor, pos_key: Tensor, pos_valid: Tensor, r: Tensor) -> Tensor:
    """0-based rank of every positive under the tie rule, exact where it is < R (others get a value >= R),
    shape (B, P).

    ``pos_key`` is sorted per row (invalid entries +inf, at the end). The j-th positive (0-based) ranks after
    every negative with a key at or below its own and after the j positives before it:
    ``#(keys <= key) - #(positive keys <= key) + j``. With k = max R of the chunk, the k smallest keys of the
    row (``topk`` values are exact whatever order it picks among ties) give ``#(keys <= key)`` by
    ``searchsorted``, exact while < k. The rank is at least ``#(keys < key)``, so only a positive with fewer
    than R smaller keys whose count reaches k (a tie across the k-th key) is recounted over the full row.
    """
    k = int(r.max())
    if k == 0:
        return torch.zeros_like(pos_valid, dtype=torch.long)
    smallest = torch.topk(keys, k, dim=1, largest=False, sorted=True).values  # (B, k)
    width = int(pos_valid.sum(1).max())
    key = pos_key[:, :width].contiguous()
    valid = pos_valid[:, :width]
    lt = torch.searchsorted(smallest, key, right=False)  # (B, W) #(keys < key), exact while < k
    le = torch.searchsorted(smallest, key, right=True)  # #(keys <= key), exact while < k
    pos_le = torch.searchsorted(pos_key.contiguous(), key, right=True)  # #(positive keys <= key), exact
    before = torch.arange(width, device=keys.device).unsqueeze(0)  # j
    rank = torch.where(le >= k, torch.full_like(le, k), le - pos_le + before)
    unsure = valid & (le >= k) & (lt < r.unsqueeze(1))
    if bool(unsure.any()):
        rows, cols = unsure.nonzero(as_tuple=True)
        step = keys.shape[0]  # at most B rows of keys compared at a time: memory stays O(B x N_ref)
        for i in range(0, len(rows), step):
            r_i, c_i = rows[i : i + step], cols[i : i + step]
            count = (keys[r_i] <= key[r_i, c_i].unsqueeze(1)).sum(1)
            rank[r_i, c_i] = count - pos_le[r_i, c_i] + c_i
    out = torch.full(pos_valid.shape, k, dtype=torch.long, device=keys.device)
    out[:, :width] = rank
    return out


def _default_chunk(device: torch.device) -> int:
    # CPU: a 1024 x 1024 float32 tile (4 MiB) stays in the L3 cache for the comparisons; accelerators:
    # larger tiles keep the device busy.
    return 1024 if device.type == "cpu" else 8192


def retrieval_metrics(
    embeddings: Tensor | np.ndarray,
    labels: Tensor | np.ndarray,
    *,
    ks: Iterable[int] = (1, 2, 4, 8),
    mlrc: bool = False,
    gallery: Tensor | np.ndarray | None = None,
    gallery_labels: Tensor | np.ndarray | None = None,
    distance: str = "euclidean",
    chunk_size: int | None = None,
    dtype: torch.dtype = torch.float32,
    matmul: str = "auto",
    allow_collapsed: bool = False,
) -> RetrievalResult:
    """Recall@K for every K in ``ks`` and, if ``mlrc``, P@1 / R-precision / MAP@R.

    Args:
        embeddings: (N, D) query embeddings (torch or numpy); computation runs on their device.
        labels: (N,) integer labels.
        ks: the K values of Recall@K (may be empty).
        mlrc: also compute P@1, RP and MAP@R (Musgrave et al. 2020).
        gallery, gallery_labels: (M, D) / (M,) references for the query-vs-gallery protocol; when None the
            protocol is leave-one-out over ``embeddings``.
        distance: "euclidean" (ProxyNCA++) or "cosine" (Proxy Anchor, Proxy Synthesis).
        chunk_size: tile edge of the Recall@K pass (memory O(chunk_size^2)) and queries per chunk of the
            MLRC pass (memory O(chunk_size x N_ref)); None: 1024 on the CPU, 8192 on accelerators.
        dtype: float32 (default) or float64 for the distance products.
        matmul: "auto" (numpy's BLAS on the CPU, ``torch.mm`` elsewhere), "torch" or "numpy".
        allow_collapsed: compute the metrics of collapsed embeddings instead of raising (module docstring).

    Returns:
        RetrievalResult with fractions in [0, 1] (see the module docstring for the definitions and the tie rule);
        NaN everywhere, with a warning, when no query has a positive.

    Raises:
        NonFiniteEmbeddingError: NaN or inf embeddings. CollapsedEmbeddingError: collapsed embeddings (unless
        ``allow_collapsed``). ZeroEmbeddingError: an all-zero embedding with the cosine distance. ValueError:
        other invalid arguments.
    """
    _check_options(distance, chunk_size, dtype, matmul, mlrc=mlrc, allow_collapsed=allow_collapsed)
    ks = check_ks(ks)
    query, query_labels, ref_in, ref_labels = _inputs(embeddings, labels, gallery, gallery_labels)
    leave_one_out = ref_in is None
    n_query = query.shape[0]
    n_candidates = n_query - 1 if leave_one_out else ref_in.shape[0]
    if n_candidates < 1:
        raise ValueError("leave-one-out retrieval needs at least 2 embeddings")
    if ks and ks[-1] > n_candidates:
        warnings.warn(
            f"Recall@{ks[-1]} asked with only {n_candidates} references per query: for K >= {n_candidates} "
            "it is the fraction of queries with at least one positive",
            FewReferencesWarning,
            stacklevel=2,
        )
    chunk = chunk_size if chunk_size is not None else _default_chunk(query.device)
    with torch.no_grad():
        query, ref = _prepare(query, ref_in, distance, dtype, allow_collapsed)
        hits, n_with_pos, mlrc_values = _passes(
            query,
            ref,
            query_labels,
            ref_labels,
            ks,
            leave_one_out=leave_one_out,
            mlrc=mlrc,
            chunk=chunk,
            matmul=matmul,
            dtype=dtype,
        )
    p1, rp, mapr = mlrc_values
    return RetrievalResult(
        recall=_recall(hits, ks, n_query, n_with_pos, leave_one_out),
        precision_at_1=p1,
        r_precision=rp,
        map_at_r=mapr,
        num_queries=n_query,
        num_queries_with_positive=n_with_pos,
    )


def _check_options(
    distance: str,
    chunk_size: int | None,
    dtype: torch.dtype,
    matmul: str,
    *,
    mlrc: bool,
    allow_collapsed: bool,
) -> None:
    """Raise ValueError for an option of :func:`retrieval_metrics` it does not take."""
    if distance not in DISTANCES:
        raise ValueError(f"unknown distance {distance!r}; valid: {list(DISTANCES)}")
    if chunk_size is not None and (
        isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
    ):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    if matmul not in MATMULS:
        raise ValueError(f"unknown matmul {matmul!r}; valid: {list(MATMULS)}")
    for name, flag in (("mlrc", mlrc), ("allow_collapsed", allow_collapsed)):
        if not isinstance(flag, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {flag!r}")


def _inputs(
    embeddings: Tensor | np.ndarray,
    labels: Tensor | np.ndarray,
    gallery: Tensor | np.ndarray | None,
    gallery_labels: Tensor | np.ndarray | None,
) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
    """``(query, query labels, gallery or None, reference labels)`` checked, on the queries' device, labels as
    int64 (the reference labels are the queries' own for leave-one-out)."""
    query = as_tensor(embeddings, "embeddings")
    query_labels = as_tensor(labels, "labels")
    check_embeddings_labels(query, query_labels, "query" if gallery is not None else "")
    device = query.device
    if gallery is None:
        if gallery_labels is not None:
            raise ValueError("gallery_labels given without gallery")
        ref_in, ref_labels = None, query_labels
    else:
        if gallery_labels is None:
            raise ValueError("gallery given without gallery_labels")
        ref_in = as_tensor(gallery, "gallery").to(device)
        ref_labels = as_tensor(gallery_labels, "gallery_labels").to(device)
        check_embeddings_labels(ref_in, ref_labels, "gallery")
        if ref_in.shape[1] != query.shape[1]:
            raise ValueError(f"query dim {query.shape[1]} != gallery dim {ref_in.shape[1]}")
    return query, query_labels.to(device=device, dtype=torch.long), ref_in, ref_labels.to(dtype=torch.long)


def _passes(
    query: Tensor,
    ref: Tensor,
    query_labels: Tensor,
    ref_labels: Tensor,
    ks: Sequence[int],
    *,
    leave_one_out: bool,
    mlrc: bool,
    chunk: int,
    matmul: str,
    dtype: torch.dtype,
) -> tuple[list[int], int, tuple[float | None, float | None, float | None]]:
    """The evaluator's passes over the prepared embeddings (:func:`_prepare`; ``ref`` is ``query`` itself for
    leave-one-out): the nearest positive of every query and its band of near ties, then the Recall@K counts (a
    tiled band count, or the MLRC pass's full rows), near ties resolved exactly. Returns ``(hits per K, queries
    with a positive, (P@1, RP, MAP@R))``."""
    groups: list[Tensor | None] = []  # duplicate_groups(ref), computed on first use

    def canon() -> Tensor | None:  # identical references get identical keys (exact ties)
        if not groups:
            groups.append(duplicate_groups(ref))
        return groups[0]

    q_sq64 = _sqnorms64(query)
    r_sq64 = q_sq64 if leave_one_out else _sqnorms64(ref)
    classes = _ClassIndex.build(ref_labels)
    key0, idx0 = _nearest_positive(query, ref, q_sq64, r_sq64, query_labels, classes, leave_one_out)
    has_pos = idx0 >= 0
    n_with_pos = int(has_pos.sum())
    tol = _tolerance(q_sq64, float(r_sq64.max()), query.shape[1], dtype)
    lo = torch.where(has_pos, key0 - tol, -math.inf)  # (N,) float64 thresholds of the band rule
    hi = torch.where(has_pos, key0 + tol, -math.inf)

    def resolve(rows: Tensor) -> Tensor:
        return _exact_ranks(rows, query, ref, r_sq64, query_labels, ref_labels, leave_one_out, canon())

    mlrc_values: tuple[float | None, float | None, float | None] = (None, None, None)
    if mlrc:
        c_lo, c_hi, mlrc_values = _full_rows(
            query,
            ref,
            q_sq64,
            r_sq64,
            lo,
            hi,
            query_labels,
            classes,
            n_with_pos,
            leave_one_out=leave_one_out,
            chunk=chunk,
            want_recall=bool(ks),
            canon=canon(),
        )
    elif ks:
        c_lo, c_hi = _band_counts(
            query,
            ref,
            q_sq64.to(query.dtype),
            r_sq64.to(ref.dtype),
            lo,
            hi,
            leave_one_out=leave_one_out,
            block=chunk,
            use_numpy=_use_numpy(query, matmul),
        )
    hits = _recall_hits(c_lo, c_hi, has_pos, ks, resolve).tolist() if ks else []
    return hits, n_with_pos, mlrc_values


def _recall(
    hits: Sequence[int], ks: Sequence[int], n_query: int, n_with_pos: int, leave_one_out: bool
) -> dict[int, float]:
    """Recall@K from the hit counts, with a warning where queries have no positive (NaN when none has one)."""
    if n_with_pos == 0:
        warnings.warn(
            f"no query has a positive reference (none of the {n_query} queries has a reference with its label): "
            "every metric is NaN; "
            + (
                "do the queries and the gallery share one label map?"
                if not leave_one_out
                else "every class has a single sample"
            ),
            stacklevel=3,
        )
        return {k: math.nan for k in ks}
    if n_with_pos < n_query:
        warnings.warn(
            f"{n_query - n_with_pos} of {n_query} queries have no positive reference: they count as misses "
            "in Recall@K and are left out of P@1, RP and MAP@R",
            FewReferencesWarning,
            stacklevel=3,
        )
    return {k: float(h) / n_query for k, h in zip(ks, hits)}


def _full_rows(
    query: Tensor,
    ref: Tensor,
    q_sq64: Tensor,
    r_sq64: Tensor,
    lo: Tensor,
    hi: Tensor,
    query_labels: Tensor,
    classes: _ClassIndex,
    n_with_pos: int,
    *,
    leave_one_out: bool,
    chunk: int,
    want_recall: bool,
    canon: Tensor | None,
) -> tuple[Tensor | None, Tensor | None, tuple[float, float, float]]:
    """The MLRC pass over query chunks x all references; also the band counts of Recall@K when wanted."""
    device = query.device
    n_query, n_ref = query.shape[0], ref.shape[0]
    ref_sqnorm = r_sq64.to(ref.dtype)
    c_lo = torch.zeros(n_query, dtype=torch.float64, device=device) if want_recall else None
    c_hi = torch.zeros(n_query, dtype=torch.float64, device=device) if want_recall else None
    count_dtype = query.dtype if n_ref < 2**24 else torch.float64
    buf: Tensor | None = None  # (B, N_ref) comparison buffer, reused across chunks
    # per-query values, summed once at the end with math.fsum: the result does not depend on chunk_size
    p1_parts: list[Tensor] = []
    rp_parts: list[Tensor] = []
    map_parts: list[Tensor] = []
    for start in range(0, n_query, chunk):
        stop = min(start + chunk, n_query)
        rows = torch.arange(start, stop, device=device)
        keys = distance_keys(query[start:stop], ref, ref_sqnorm)  # (B, N_ref) = squared distance - |q|^2
        if canon is not None:
            keys = keys[:, canon]  # identical references, identical keys
        if leave_one_out:
            keys[rows - start, rows] = math.inf  # the query is not its own reference
        if want_recall:
            buf = (
                buf
                if buf is not None and buf.shape == keys.shape
                else torch.empty_like(keys, dtype=count_dtype)
            )
            shift = q_sq64[start:stop]  # band thresholds in key space (float64, then the key dtype)
            c_lo[start:stop] = _count_below(
                keys, (lo[start:stop] - shift).to(keys.dtype), strict=True, buf=buf
            )
            c_hi[start:stop] = _count_below(
                keys, (hi[start:stop] - shift).to(keys.dtype), strict=False, buf=buf
            )
        pos_idx, pos_valid = classes.positives(query_labels[start:stop], rows if leave_one_out else None)
        r = pos_valid.sum(1)  # (B,) number of positives R
        has_pos = r > 0
        if pos_idx.shape[1] == 0 or not bool(has_pos.any()):
            continue
        pos_key = keys.gather(1, pos_idx).masked_fill_(~pos_valid, math.inf)  # (B, P)
        pos_key, perm = torch.sort(pos_key, dim=1)  # invalid entries (+inf) last
        pos_valid = pos_valid.gather(1, perm)
        rank = _positive_ranks(keys, pos_key, pos_valid, r)  # (B, P)
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

    return c_lo, c_hi, (mean(p1_parts), mean(rp_parts), mean(map_parts))
