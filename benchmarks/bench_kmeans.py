"""NMI's KMeans: scikit-learn's KMeans against dmllab's torch k-means with plain and greedy k-means++ seeding,
on clustered Gaussian embeddings (class centres N(0, 1) x ``spread`` plus N(0, 1) noise), all with 10 inits.

Per case and implementation: NMI (geometric, as the ProxyNCA++ code), the within-cluster sum of squares
(inertia, computed the same way for all three from the labels) relative to scikit-learn's, and the wall time,
at 1 torch / BLAS thread.

    .venv/bin/python benchmarks/bench_kmeans.py      # -> results/benchmarks/kmeans.csv
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from benchutil import write_csv

CASES = [  # N, classes, dim, spread of the class centres
    (5000, 100, 128, 0.6),
    (5000, 100, 128, 0.3),
    (3000, 100, 32, 1.0),
    (2000, 50, 64, 0.4),
]


def _inertia(x: np.ndarray, labels: np.ndarray) -> float:
    return float(sum(((x[labels == c] - x[labels == c].mean(0)) ** 2).sum() for c in np.unique(labels)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out", default=str(Path(__file__).resolve().parent.parent / "results/benchmarks/kmeans.csv")
    )
    args = ap.parse_args()
    import torch
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score
    from threadpoolctl import threadpool_limits

    from dmllab.metrics import kmeans_torch

    torch.set_num_threads(1)
    rows = []
    with threadpool_limits(1):
        for n, k, dim, spread in CASES:
            g = torch.Generator().manual_seed(0)
            y = torch.arange(k).repeat_interleave(n // k)
            x = torch.randn(k, dim, generator=g)[y] * spread + torch.randn(len(y), dim, generator=g)
            xn, yn = x.double().numpy(), y.numpy()
            ref = None
            for name in ("sklearn", "torch plain k-means++", "torch greedy k-means++"):
                t0 = time.perf_counter()
                if name == "sklearn":
                    pred = KMeans(k, n_init=10, random_state=0).fit_predict(xn)
                else:
                    pred = kmeans_torch(x, k, seed=0, n_local_trials=1 if "plain" in name else None).numpy()
                wall = time.perf_counter() - t0
                inertia = _inertia(xn, pred)
                ref = inertia if ref is None else ref
                row = {
                    "n": n,
                    "classes": k,
                    "dim": dim,
                    "spread": spread,
                    "kmeans": name,
                    "nmi": normalized_mutual_info_score(yn, pred, average_method="geometric"),
                    "inertia_vs_sklearn": inertia / ref,
                    "wall_s": wall,
                }
                rows.append(row)
                print(
                    f"{n} x {dim}, {k} classes, spread {spread}: {name:24s} NMI {row['nmi']:.4f} "
                    f"inertia x{row['inertia_vs_sklearn']:.4f} {wall:.2f} s",
                    flush=True,
                )
    out = write_csv(args.out, rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
