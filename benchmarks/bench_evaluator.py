"""Benchmark of dmllab's exact Recall@K evaluator against scikit-learn, faiss-cpu and the bare matrix products
(docs/guide/metrics.md, "Evaluator benchmark").

1. 20,000 x 256 clustered embeddings (200 classes): exact Recall@{1,10,100,1000} by dmllab, scikit-learn's
   ``NearestNeighbors(n_neighbors=1001, algorithm="brute")`` and faiss-cpu's ``IndexFlatL2`` (k = 1001), recall
   from their neighbours; time = best of ``--repeats``. The recalls must be identical.
2. SOP size, 60,502 x 512 and 60,502 x 2048 (11,316 classes, 5-6 images each): dmllab, faiss-cpu and the
   floors, one run each, side by side in the same invocation:

   * ``bare_matmul_torch``: the chunked products X[c] @ X.T by ``torch.mm`` into a preallocated buffer
     (1,024 rows x N: the O(N^2 D) step of an evaluator built on torch's products);
   * ``bare_matmul_numpy``: the same products by numpy's BLAS (OpenBLAS in the numpy wheels);
   * ``bare_matmul_numpy_half``: only the tiles on and above the diagonal (X X^T is symmetric), the products
     a leave-one-out evaluator needs at least.

   Ratios (``dmllab_vs_faiss``, ``dmllab_vs_best_full_floor``, ``dmllab_vs_half_floor``) are written as rows.

Every method runs in a fresh child process (same seed, so the same data), which reports its wall and CPU
times, its recalls and its peak RSS (VmHWM from /proc/self/status, including the imports and the data it
generated; ``data_only`` and ``dmllab_imports_only`` children show those parts). Threads: torch, faiss and
OpenBLAS use ``--threads`` (default: torch's default, the number of cores). faiss-cpu is optional
(``pip install faiss-cpu``; it is not a dependency of dmllab): without it its rows are skipped.

Rows go to results/benchmarks/evaluator.csv (columns: benchmark, n, dim, method, metric, value, unit,
torch_version, threads, load_average, command, timestamp).

    python benchmarks/bench_evaluator.py            # full sizes (about 10 minutes on 2 cores)
    python benchmarks/bench_evaluator.py --quick    # small sizes, prints only unless --out is given
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchutil import child_result

KS = (1, 10, 100, 1000)
NOISE = 3.5
REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "results" / "benchmarks" / "evaluator.csv"
COLUMNS = [
    "benchmark",
    "n",
    "dim",
    "method",
    "metric",
    "value",
    "unit",
    "torch_version",
    "threads",
    "load_average",
    "command",
    "timestamp",
]
FLOORS = ("bare_matmul_torch", "bare_matmul_numpy", "bare_matmul_numpy_half")


def make_data(n: int, dim: int, n_classes: int, noise: float = NOISE, seed: int = 0):
    """Gaussian clusters in float32: class centres ~ N(0, I), points = centre + N(0, noise^2 I); labels
    cycle through the classes (n / n_classes points per class). noise = 3.5 gives a mid-range R@1."""
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = np.arange(n) % n_classes
    centres = rng.standard_normal((n_classes, dim), dtype=np.float32)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x *= noise
    x += centres[labels]
    return x, labels


def peak_rss_mib() -> float:
    """Peak resident set size of this process in MiB: VmHWM of /proc/self/status (Linux; per address space,
    so not inflated by the parent's RSS the way ``ru_maxrss`` is across fork + exec), else ru_maxrss."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def recall_from_neighbours(idx, labels, ks) -> dict[int, float]:
    """Recall@K from (N, kmax + 1) neighbour lists that include the query itself (dropped)."""
    import numpy as np

    kmax = max(ks)
    is_self = idx == np.arange(len(idx))[:, None]
    no_self = ~is_self.any(1)
    is_self[no_self, -1] = True  # query not returned (numerical ties at 0): drop the last neighbour
    nbrs = idx[~is_self].reshape(len(idx), kmax)
    hit = labels[nbrs] == labels[:, None]
    return {k: float(hit[:, :k].any(1).mean()) for k in ks}


def sklearn_recall(x, labels, ks) -> dict[int, float]:
    from sklearn.neighbors import NearestNeighbors

    nn = NearestNeighbors(n_neighbors=max(ks) + 1, algorithm="brute").fit(x)
    _, idx = nn.kneighbors(x)
    return recall_from_neighbours(idx, labels, ks)


def faiss_recall(x, labels, ks) -> dict[int, float]:
    import faiss

    index = faiss.IndexFlatL2(x.shape[1])
    index.add(x)
    _, idx = index.search(x, max(ks) + 1)
    return recall_from_neighbours(idx, labels, ks)


def bare_matmul_torch(x, chunk: int = 1024) -> None:
    import torch

    t = torch.from_numpy(x)
    out = torch.empty(chunk, len(x))
    with torch.no_grad():
        for start in range(0, len(t), chunk):
            q = t[start : start + chunk]
            torch.mm(q, t.T, out=out[: len(q)])


def bare_matmul_numpy(x, chunk: int = 1024) -> None:
    import numpy as np

    out = np.empty((chunk, len(x)), dtype=x.dtype)
    for start in range(0, len(x), chunk):
        q = x[start : start + chunk]
        np.matmul(q, x.T, out=out[: len(q)])


def bare_matmul_numpy_half(x, block: int = 1024) -> None:
    import numpy as np

    buf = np.empty(block * block, dtype=x.dtype)
    for j in range(0, len(x), block):
        r = x[j : j + block]
        for i in range(0, j + 1, block):
            q = x[i : i + block]
            np.matmul(q, r.T, out=buf[: len(q) * len(r)].reshape(len(q), len(r)))


def worker(args) -> None:
    """Child process: generate the data, run one method ``repeats`` times, print a JSON line."""
    x, labels = make_data(args.n, args.dim, args.classes)
    # imports happen before the clock starts
    if args.worker == "dmllab":
        from dmllab.metrics import recall_at_k
    elif args.worker in (*FLOORS, "dmllab_imports_only"):
        import dmllab.metrics  # noqa: F401
    elif args.worker == "sklearn_brute":
        import sklearn.neighbors  # noqa: F401
    elif args.worker == "faiss":
        import faiss

        faiss.omp_set_num_threads(args.threads)
    if args.worker not in ("data_only", "faiss", "sklearn_brute"):
        import torch

        torch.set_num_threads(args.threads)
    times, cpu_times, result = [], [], {}
    if args.worker not in ("data_only", "dmllab_imports_only"):
        for _ in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            if args.worker == "dmllab":
                result = recall_at_k(x, labels, KS)
            elif args.worker == "sklearn_brute":
                result = sklearn_recall(x, labels, KS)
            elif args.worker == "faiss":
                result = faiss_recall(x, labels, KS)
            elif args.worker in FLOORS:
                globals()[args.worker](x)
            else:
                raise ValueError(f"unknown worker {args.worker!r}")
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
    out = {
        "times": times,
        "cpu_times": cpu_times,
        "recall": {str(k): v for k, v in result.items()},
        "peak_rss_mib": peak_rss_mib(),
    }
    print("RESULT " + json.dumps(out))


def have_faiss() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def run_child(method: str, n: int, dim: int, classes: int, repeats: int, threads: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, "--n", str(n), "--dim", str(dim)]
    cmd += ["--classes", str(classes), "--repeats", str(repeats), "--threads", str(threads)]
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{method} failed:\n{proc.stderr}")
    return child_result(proc.stdout)


def write_csv(path: Path | None, rows: list[dict]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes (2,000 x 64 and 6,000 x 128)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs for the 20k comparison (best is kept)")
    p.add_argument("--threads", type=int, default=0, help="threads for every method (default: all cores)")
    p.add_argument(
        "--out", type=Path, default=None, help=f"CSV to write (default {DEFAULT_OUT}; --quick: none)"
    )
    p.add_argument("--skip-sop", action="store_true", help="only the 20k comparison")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--dim", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--classes", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    import torch

    threads = args.threads or torch.get_num_threads()
    if args.quick:
        cmp_size, sop_sizes, sop_classes = (2000, 64, 20), [(6000, 64), (6000, 128)], 1100
    else:
        cmp_size, sop_sizes, sop_classes = (20000, 256, 200), [(60502, 512), (60502, 2048)], 11316
    out_path = args.out if args.out is not None else (None if args.quick else DEFAULT_OUT)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = "python benchmarks/bench_evaluator.py " + " ".join(
        shlex.quote(a) for a in (argv or sys.argv[1:])
    )
    faiss_ok = have_faiss()
    if not faiss_ok:
        print("faiss-cpu is not installed: its rows are skipped (pip install faiss-cpu)", flush=True)
    rows: list[dict] = []

    def env() -> dict:
        return dict(
            torch_version=torch.__version__,
            threads=threads,
            command=command.strip(),
            load_average=f"{os.getloadavg()[0]:.2f}",
            timestamp=stamp,
        )

    def add(bench, n, dim, method, res):
        common = dict(benchmark=bench, n=n, dim=dim, method=method, **env())
        if res["times"]:
            med = sorted(res["times"])[len(res["times"]) // 2]
            rows.append(dict(common, metric="time_best", value=f"{min(res['times']):.4f}", unit="s"))
            rows.append(dict(common, metric="time_median", value=f"{med:.4f}", unit="s"))
            rows.append(dict(common, metric="cpu_time_best", value=f"{min(res['cpu_times']):.4f}", unit="s"))
        rows.append(dict(common, metric="peak_rss", value=f"{res['peak_rss_mib']:.1f}", unit="MiB"))
        for k, v in res["recall"].items():
            rows.append(dict(common, metric=f"R@{k}", value=f"{v:.6f}", unit="fraction"))

    def ratio(bench, n, dim, name, a, b, metric="time_best"):
        key = {"time_best": "times", "cpu_time_best": "cpu_times"}[metric]
        value = min(a[key]) / min(b[key])
        rows.append(
            dict(
                benchmark=bench,
                n=n,
                dim=dim,
                method=name,
                metric=f"ratio_{metric}",
                value=f"{value:.3f}",
                unit="x",
                **env(),
            )
        )
        return value

    identical = True
    n, dim, classes = cmp_size
    bench = "recall_vs_sklearn_faiss"
    print(f"[{bench}] {n} x {dim}, {classes} classes, best of {args.repeats}, {threads} threads", flush=True)
    methods = ["data_only", "dmllab_imports_only", "dmllab", "sklearn_brute", "bare_matmul_torch"]
    methods += ["faiss"] if faiss_ok else []
    results = {m: run_child(m, n, dim, classes, args.repeats, threads) for m in methods}
    for m, res in results.items():
        add(bench, n, dim, m, res)
    for other in ("sklearn_brute", "faiss"):
        if other in results:
            same = results["dmllab"]["recall"] == results[other]["recall"]
            identical &= same
            print(f"  dmllab {results['dmllab']['recall']}  {other} {results[other]['recall']}  same={same}")
            ratio(bench, n, dim, f"dmllab_vs_{other}", results["dmllab"], results[other])
            rows.append(
                dict(
                    benchmark=bench,
                    n=n,
                    dim=dim,
                    method=f"dmllab_vs_{other}",
                    metric="identical_recalls",
                    value=str(int(same)),
                    unit="bool",
                    **env(),
                )
            )
    write_csv(out_path, rows)  # after each block, so that a long run leaves its finished parts

    if not args.skip_sop:
        for n, dim in sop_sizes:
            bench = "sop_size"
            print(f"[{bench}] {n} x {dim}, {sop_classes} classes, {threads} threads", flush=True)
            methods = ["data_only", "dmllab_imports_only", "dmllab", *FLOORS] + (
                ["faiss"] if faiss_ok else []
            )
            res = {}
            for m in methods:
                t0 = time.perf_counter()
                res[m] = run_child(m, n, dim, sop_classes, 1, threads)
                add(bench, n, dim, m, res[m])
                print(f"  {m:<24} {time.perf_counter() - t0:8.1f} s wall (child)", flush=True)
            best_full = min(("bare_matmul_torch", "bare_matmul_numpy"), key=lambda m: min(res[m]["times"]))
            for metric in ("time_best", "cpu_time_best"):
                if faiss_ok:
                    ratio(bench, n, dim, "dmllab_vs_faiss", res["dmllab"], res["faiss"], metric)
                ratio(
                    bench,
                    n,
                    dim,
                    f"dmllab_vs_best_full_floor({best_full})",
                    res["dmllab"],
                    res[best_full],
                    metric,
                )
                ratio(
                    bench,
                    n,
                    dim,
                    "dmllab_vs_half_floor",
                    res["dmllab"],
                    res["bare_matmul_numpy_half"],
                    metric,
                )
            if faiss_ok:
                same = res["dmllab"]["recall"] == res["faiss"]["recall"]
                identical &= same
                rows.append(
                    dict(
                        benchmark=bench,
                        n=n,
                        dim=dim,
                        method="dmllab_vs_faiss",
                        metric="identical_recalls",
                        value=str(int(same)),
                        unit="bool",
                        **env(),
                    )
                )
            write_csv(out_path, rows)

    print()
    print(f"{'benchmark':<24} {'n':>6} {'dim':>5} {'method':<44} {'metric':<20} {'value':>12} unit")
    for r in rows:
        print(
            f"{r['benchmark']:<24} {r['n']:>6} {r['dim']:>5} {r['method']:<44} {r['metric']:<20} "
            f"{r['value']:>12} {r['unit']}"
        )
    if out_path is not None:
        print(f"wrote {len(rows)} rows to {out_path}")
    if not identical:
        print("ERROR: the recalls of dmllab and a contender differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
