"""What the reliability checks cost, side by side with the code before them, on the same data in one process.

1. The evaluator: ``retrieval_metrics`` of this checkout against the evaluator of ``--before`` (a git commit, loaded
   from ``git show``), interleaved, best of ``--repeats``: the quick profile's test split size (5,000 x 128, R@1-8,
   leave-one-out), the same with the MLRC metrics, and 20,000 x 256. The metrics must be identical.
2. Cache fingerprints: :func:`dmllab.fileio.content_fingerprint` of a 123 MB ``images.npy`` (the quick profile's
   generated benchmark: 10,000 images of 64 x 64 x 3), first open and memoised; and reading the array into memory,
   which opening the dataset does anyway.
3. Checkpoints: ``save_atomic`` (torch.save through a hashing writer plus the sidecar) against a plain
   ``torch.save`` of the same state, and ``load_checkpoint`` with and without the sidecar check.
4. The run store: ``RunStore.load`` of a stored run (verified) against reading its metrics.json and history.csv.

Rows go to results/reliability/bench_reliability.csv (benchmark, case, variant, seconds, note, threads, load_average).

    python benchmarks/bench_reliability.py --before 1ff9148
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "results" / "reliability" / "bench_reliability.csv"


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _old_evaluator(commit: str):
    text = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:dmllab/metrics/evaluator.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "evaluator_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("evaluator_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluator_before"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="1ff9148", help="the commit whose evaluator is the baseline")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()

    import numpy as np
    import torch

    import dmllab  # noqa: F401  (pins the CPU kernels first)
    from dmllab.metrics import evaluator as new

    old = _old_evaluator(args.before)
    rows = []

    def row(benchmark, case, variant, seconds, note=""):
        rows.append(
            dict(
                benchmark=benchmark,
                case=case,
                variant=variant,
                seconds=f"{seconds:.4f}",
                note=note,
                threads=torch.get_num_threads(),
                load_average=f"{os.getloadavg()[0]:.2f}",
            )
        )
        print(f"{benchmark:<12} {case:<34} {variant:<28} {seconds:8.4f} s  {note}", flush=True)

    # 1. evaluator
    from dataclasses import asdict

    for n, dim, classes, mlrc in ((5000, 128, 100, False), (5000, 128, 100, True), (20000, 256, 200, False)):
        rng = np.random.default_rng(0)
        y = np.arange(n) % classes
        x = (rng.standard_normal((classes, dim), dtype=np.float32)[y] * 0.5).astype(np.float32)
        x += rng.standard_normal((n, dim), dtype=np.float32)
        kw = dict(ks=(1, 2, 4, 8), mlrc=mlrc)
        a, b = asdict(old.retrieval_metrics(x, y, **kw)), asdict(new.retrieval_metrics(x, y, **kw))
        same = "identical metrics" if a == b else f"DIFFERENT: {a} vs {b}"
        t_old, t_new = float("inf"), float("inf")
        for _ in range(args.repeats):  # interleaved: the same machine load for both
            t0 = time.perf_counter()
            old.retrieval_metrics(x, y, **kw)
            t1 = time.perf_counter()
            new.retrieval_metrics(x, y, **kw)
            t2 = time.perf_counter()
            t_old, t_new = min(t_old, t1 - t0), min(t_new, t2 - t1)
        case = f"{n}x{dim}{' +MLRC' if mlrc else ''}"
        row("evaluator", case, f"before ({args.before})", t_old)
        row("evaluator", case, "after", t_new, f"{same}; after/before {t_new / t_old:.3f}")

    # 2. cache fingerprints
    from dmllab.fileio import _FINGERPRINTS, content_fingerprint

    folder = Path(tempfile.mkdtemp())
    images = np.random.default_rng(0).integers(0, 255, size=(10000, 64, 64, 3), dtype=np.uint8)
    np.save(folder / "images.npy", images)
    del images

    def first_open():
        _FINGERPRINTS.clear()
        content_fingerprint(folder / "images.npy")

    row("fingerprint", "images.npy 123 MB", "first open in a process", _best(first_open, args.repeats))
    row(
        "fingerprint",
        "images.npy 123 MB",
        "memoised",
        _best(lambda: content_fingerprint(folder / "images.npy"), 3),
    )
    row(
        "fingerprint",
        "images.npy 123 MB",
        "reading the array (for scale)",
        _best(lambda: np.array(np.load(folder / "images.npy", mmap_mode="r")), args.repeats),
    )

    # 3. checkpoints
    from dmllab.training.protocol import load_checkpoint, save_atomic

    state = {
        "trainer": {f"w{i}": torch.randn(256, 256) for i in range(20)}
    }  # about 5 MB, a quick-run checkpoint
    path = folder / "last.pt"
    row(
        "checkpoint",
        "5 MB state",
        "torch.save",
        _best(lambda: torch.save(state, folder / "plain.pt"), args.repeats),
    )
    row(
        "checkpoint",
        "5 MB state",
        "_save_atomic (+ sha256 sidecar)",
        _best(lambda: save_atomic(state, path), args.repeats),
    )
    row(
        "checkpoint",
        "5 MB state",
        "load_checkpoint (checked)",
        _best(lambda: load_checkpoint(path), args.repeats),
    )
    row(
        "checkpoint",
        "5 MB state",
        "torch.load",
        _best(lambda: torch.load(path, map_location="cpu", weights_only=True), args.repeats),
    )

    # 4. run store
    from dmllab.training import RunStore, presets
    from dmllab.training.config import config_hash
    from dmllab.training.protocol import RunResult

    cfg = presets.get("proxynca++", "synthetic", "quick")
    store = RunStore(folder / "runs")
    history = [{"epoch": i, "loss": 1.0, "val_R@1": 0.5} for i in range(9)]
    store.save(cfg, 0, RunResult({"R@1": 0.5}, history, 8, [], 15.0, config_hash(cfg), 0, "cpu"))
    d = store.run_dir(cfg, 0)

    def plain_read():
        json.loads((d / "metrics.json").read_text())
        (d / "history.csv").read_text()

    row("run store", "one stored run", "read metrics + history", _best(plain_read, args.repeats))
    row(
        "run store",
        "one stored run",
        "RunStore.load (verified)",
        _best(lambda: store.load(cfg, 0), args.repeats),
    )

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"rows in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
