"""Benchmark of dmllab's streaming evaluator (issue 2, "Performance").

1. 20,000 x 256 clustered embeddings (200 classes): exact Recall@{1,10,100,1000} by dmllab versus
   scikit-learn's ``NearestNeighbors(n_neighbors=1001, algorithm="brute")`` + recall from its neighbours,
   on the same data in the same run. The recalls must be identical; time = best of ``--repeats``.
2. SOP size, 60,502 x 512 and 60,502 x 2048 (11,316 classes, 5-6 images each): dmllab Recall@{1,10,100,1000}
   time and peak RSS, and the floor: the bare chunked matrix products of the same shapes (nothing else).

Every method runs in a fresh child process (same seed, so the same data), which reports its times, its
results and its peak RSS (VmHWM from /proc/self/status, including the imports and the data it generated;
the RSS of children that only generate the data, or generate it and import torch + dmllab.metrics, is
reported as ``data_only`` and ``dmllab_imports_only``). Rows go to
results/benchmarks/evaluator.csv (columns: benchmark, n, dim, method, metric, value, unit, torch_version,
threads, timestamp).

    python benchmarks/bench_evaluator.py            # full sizes (minutes)
    python benchmarks/bench_evaluator.py --quick    # small sizes, prints only unless --out is given
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

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
    "timestamp",
]


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


def sklearn_recall(x, labels, ks) -> dict[int, float]:
    import numpy as np
    from sklearn.neighbors import NearestNeighbors

    kmax = max(ks)
    nn = NearestNeighbors(n_neighbors=kmax + 1, algorithm="brute").fit(x)
    _, idx = nn.kneighbors(x)  # (N, kmax + 1), includes the query itself
    is_self = idx == np.arange(len(x))[:, None]
    no_self = ~is_self.any(1)
    is_self[no_self, -1] = True  # query not returned (numerical ties at 0): drop the last neighbour
    nbrs = idx[~is_self].reshape(len(x), kmax)
    hit = labels[nbrs] == labels[:, None]
    return {k: float(hit[:, :k].any(1).mean()) for k in ks}


def bare_matmuls(x, chunk_size: int) -> None:
    """The floor: the evaluator's chunked products |r|^2 - 2 q.r, nothing else."""
    import torch

    from dmllab.metrics.evaluator import distance_keys

    t = torch.from_numpy(x)
    sq = (t * t).sum(1)
    with torch.no_grad():
        for start in range(0, len(t), chunk_size):
            distance_keys(t[start : start + chunk_size], t, sq)


def worker(args) -> None:
    """Child process: generate the data, run one method ``repeats`` times, print a JSON line."""
    x, labels = make_data(args.n, args.dim, args.classes)
    # imports happen before the clock starts; the sklearn child never imports torch
    if args.worker == "dmllab":
        from dmllab.metrics import recall_at_k
    elif args.worker in ("bare_matmul", "dmllab_imports_only"):
        import dmllab.metrics  # noqa: F401
    elif args.worker == "sklearn_brute":
        import sklearn.neighbors  # noqa: F401
    times, cpu_times, result = [], [], {}
    if args.worker not in ("data_only", "dmllab_imports_only"):
        for _ in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            if args.worker == "dmllab":
                result = recall_at_k(x, labels, KS, chunk_size=args.chunk_size)
            elif args.worker == "sklearn_brute":
                result = sklearn_recall(x, labels, KS)
            elif args.worker == "bare_matmul":
                bare_matmuls(x, args.chunk_size)
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


def run_child(method: str, n: int, dim: int, classes: int, repeats: int, chunk_size: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", method, "--n", str(n), "--dim", str(dim)]
    cmd += ["--classes", str(classes), "--repeats", str(repeats), "--chunk-size", str(chunk_size)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{method} failed:\n{proc.stderr}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


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
    p.add_argument("--chunk-size", type=int, default=1024)
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

    if args.quick:
        cmp_size, sop_sizes, sop_classes = (2000, 64, 20), [(6000, 64), (6000, 128)], 1100
    else:
        cmp_size, sop_sizes, sop_classes = (20000, 256, 200), [(60502, 512), (60502, 2048)], 11316
    out_path = args.out if args.out is not None else (None if args.quick else DEFAULT_OUT)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    import torch

    env = dict(torch_version=torch.__version__, threads=torch.get_num_threads(), timestamp=stamp)
    rows: list[dict] = []

    def add(bench, n, dim, method, res):
        best = min(res["times"]) if res["times"] else None
        common = dict(benchmark=bench, n=n, dim=dim, method=method, **env)
        if best is not None:
            med = sorted(res["times"])[len(res["times"]) // 2]
            rows.append(dict(common, metric="time_best", value=f"{best:.4f}", unit="s"))
            rows.append(dict(common, metric="time_median", value=f"{med:.4f}", unit="s"))
            rows.append(dict(common, metric="cpu_time_best", value=f"{min(res['cpu_times']):.4f}", unit="s"))
        rows.append(dict(common, metric="peak_rss", value=f"{res['peak_rss_mib']:.1f}", unit="MiB"))
        for k, v in res["recall"].items():
            rows.append(dict(common, metric=f"R@{k}", value=f"{v:.6f}", unit="fraction"))

    n, dim, classes = cmp_size
    bench = "recall_vs_sklearn"
    print(f"[{bench}] {n} x {dim}, {classes} classes, best of {args.repeats}", flush=True)
    results = {
        m: run_child(m, n, dim, classes, args.repeats, args.chunk_size)
        for m in ("data_only", "dmllab_imports_only", "dmllab", "sklearn_brute", "bare_matmul")
    }
    for m, res in results.items():
        add(bench, n, dim, m, res)
    rd, rs = results["dmllab"]["recall"], results["sklearn_brute"]["recall"]
    print(f"  dmllab  recalls: {rd}")
    print(f"  sklearn recalls: {rs}")
    identical = rd == rs
    speedup = min(results["sklearn_brute"]["times"]) / min(results["dmllab"]["times"])
    common = dict(benchmark=bench, n=n, dim=dim, method="dmllab_vs_sklearn_brute", **env)
    rows.append(dict(common, metric="speedup", value=f"{speedup:.3f}", unit="x"))
    cpu_speedup = min(results["sklearn_brute"]["cpu_times"]) / min(results["dmllab"]["cpu_times"])
    rows.append(dict(common, metric="cpu_time_speedup", value=f"{cpu_speedup:.3f}", unit="x"))
    rows.append(dict(common, metric="identical_recalls", value=str(int(identical)), unit="bool"))

    write_csv(out_path, rows)  # after each block, so that a long run leaves its finished parts
    if not args.skip_sop:
        for n, dim in sop_sizes:
            bench = "sop_size"
            print(f"[{bench}] {n} x {dim}, {sop_classes} classes", flush=True)
            for m in ("data_only", "dmllab_imports_only", "dmllab", "bare_matmul"):
                add(bench, n, dim, m, run_child(m, n, dim, sop_classes, 1, args.chunk_size))
            write_csv(out_path, rows)

    print()
    print(f"{'benchmark':<18} {'n':>6} {'dim':>5} {'method':<24} {'metric':<18} {'value':>12} unit")
    for r in rows:
        print(
            f"{r['benchmark']:<18} {r['n']:>6} {r['dim']:>5} {r['method']:<24} {r['metric']:<18} "
            f"{r['value']:>12} {r['unit']}"
        )
    if out_path is not None:
        print(f"wrote {len(rows)} rows to {out_path}")
    if not identical:
        print("ERROR: dmllab and scikit-learn recalls differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
