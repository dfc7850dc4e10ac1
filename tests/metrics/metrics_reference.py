"""Brute-force references for the metric tests (imported by test_metrics_*.py): full distance matrix + a sort,
straight from the definitions (a tie counts against the positive: among equal distances the negatives come
first; queries without positives are Recall misses and are left out of the MLRC means; no positive at all:
NaN)."""

from __future__ import annotations

import numpy as np


def brute_force_ranking(query, ref, *, leave_one_out: bool, distance: str, rel=None) -> np.ndarray:
    """(Nq, N_candidates) reference indices in (distance, positive, index) order, self removed: with ``rel``
    (Nq, N_ref) bool (which references are positives), the negatives come first among equal distances (the
    tie rule); without it, ties by index (a stable sort)."""
    q = np.asarray(query, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if distance == "euclidean":
        dist = ((q[:, None, :] - r[None, :, :]) ** 2).sum(-1)
    else:
        qn = q / np.linalg.norm(q, axis=1, keepdims=True)
        rn = r / np.linalg.norm(r, axis=1, keepdims=True)
        dist = ((qn[:, None, :] - rn[None, :, :]) ** 2).sum(-1)  # 2 - 2 cos, the same for identical rows
    if rel is None:
        order = np.argsort(dist, axis=1, kind="stable")
    else:
        order = np.stack([np.lexsort((rel[i], dist[i])) for i in range(len(dist))])
    if leave_one_out:
        order = np.stack([row[row != i] for i, row in enumerate(order)])
    return order


def brute_force_metrics(query, qlabels, ref=None, rlabels=None, *, ks=(1, 2, 4, 8), distance="euclidean"):
    """Recall@K, P@1, RP and MAP@R from the full ranking."""
    leave_one_out = ref is None
    if leave_one_out:
        ref, rlabels = query, qlabels
    qlabels = np.asarray(qlabels)
    rlabels = np.asarray(rlabels)
    positive = rlabels[None, :] == qlabels[:, None]
    order = brute_force_ranking(query, ref, leave_one_out=leave_one_out, distance=distance, rel=positive)
    recall = {k: 0 for k in ks}
    p1, rp, mapr, n_pos = [], [], [], 0
    for i, row in enumerate(order):
        rel = rlabels[row] == qlabels[i]  # (N_candidates,) in rank order
        r = int(rel.sum())
        for k in ks:
            recall[k] += bool(rel[:k].any())
        if r == 0:
            continue
        n_pos += 1
        p1.append(float(rel[0]))
        rp.append(rel[:r].sum() / r)
        prec = np.cumsum(rel[:r]) / np.arange(1, r + 1)
        mapr.append((prec * rel[:r]).sum() / r)
    n = len(order)
    mean = (lambda v: float(np.mean(v))) if n_pos else (lambda v: float("nan"))
    return {
        "recall": {k: (v / n if n_pos else float("nan")) for k, v in recall.items()},
        "P@1": mean(p1),
        "RP": mean(rp),
        "MAP@R": mean(mapr),
    }
