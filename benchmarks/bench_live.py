"""What the live curves cost a run (``dmllab.training.curves``): the smoke and quick ProxyNCA++ presets trained
through the run store with the curves (A) and without them (B: ``curve_callbacks`` returning none), in turns
A B A B ... in one process, each run into a fresh run store (the cache with the quick preset's pre-trained trunk
is shared and warmed first). The ratio A/B is taken pair by pair (the machine may be shared: pairing keeps it
meaningful when its speed drifts); the median is reported with min and max. A second measure times the curves'
own work per epoch (one :class:`LiveCurves` line appended, the resume check at the stage's start) directly, which
bounds what they can add to a run: ``curves_share_pct`` = epochs x per-epoch cost / the run's time.

    nice -n 10 .venv/bin/python benchmarks/bench_live.py --pairs 5,3 --out results/benchmarks/live.csv
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dmllab  # noqa: E402,F401 - first: it pins the CPU kernels before numpy and torch load (dmllab.numerics)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchutil import machine, write_csv  # noqa: E402


def _cfg(profile: str):
    from dmllab.training import apply_overrides, presets

    return apply_overrides(presets.get("proxynca++", "synthetic", profile), ["run.device=cpu"])


def _timed_run(cfg, with_curves: bool, scratch: Path) -> float:
    import dmllab.training.store as store_mod

    original = store_mod.curve_callbacks
    if not with_curves:
        store_mod.curve_callbacks = lambda folder, identity: []
    try:
        with tempfile.TemporaryDirectory(dir=scratch) as runs:
            t0 = time.perf_counter()
            store_mod.run(cfg, seed=0, store=store_mod.RunStore(runs), progress=False)
            return time.perf_counter() - t0
    finally:
        store_mod.curve_callbacks = original


def _pairs(profile: str, pairs: int, scratch: Path) -> dict:
    cfg = _cfg(profile)
    _timed_run(cfg, True, scratch)  # warm-up: pre-trained trunk, feature caches, imports
    a, b = [], []
    for _ in range(pairs):
        a.append(_timed_run(cfg, True, scratch))
        b.append(_timed_run(cfg, False, scratch))
    ratios = [x / y for x, y in zip(a, b)]
    return {
        "profile": profile,
        "epochs": cfg.schedule.epochs,
        "pairs": pairs,
        "with_curves_s": statistics.median(a),
        "without_curves_s": statistics.median(b),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def _per_epoch_us(repeats: int = 2000) -> float:
    """Microseconds of one epoch's curve line (LiveCurves.on_epoch_start + on_epoch_end) on a history row as a
    quick run writes it."""
    from types import SimpleNamespace

    from dmllab.training.curves import LiveCurves

    with tempfile.TemporaryDirectory() as folder:
        trainer = SimpleNamespace(images=0, timings={"data": 0.0, "step": 0.0}, device="cpu",
                                  state=SimpleNamespace(plan=SimpleNamespace(total_epochs=8)))  # fmt: skip
        cb = LiveCurves(folder, {"method": "proxynca++", "dataset": "synthetic", "profile": "quick"})
        row = {"stage": "single", "epoch": 1, "sched_epoch": 1, "warmup": False, "loss": 3.21,
               "lr_backbone": 1.0, "lr_embedding": 1.0, "lr_loss": 1.0, "time_s": 2.5}  # fmt: skip
        t0 = time.perf_counter()
        for i in range(repeats):
            cb.on_epoch_start(trainer, i, i)
            trainer.images += 1000
            trainer.timings["step"] += 1.0
            cb.on_epoch_end(trainer, i, row)
        return 1e6 * (time.perf_counter() - t0) / repeats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", default="5", help="A/B pairs per profile, or one count per profile (5,2)")
    p.add_argument("--profiles", default="smoke,quick")
    p.add_argument("--cache", default=None, help="the dmllab cache to use (default: a fresh temporary one)")
    p.add_argument(
        "--out", default=str(Path(__file__).resolve().parent.parent / "results/benchmarks/live.csv")
    )
    args = p.parse_args()
    import torch

    per_epoch = _per_epoch_us()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-live-") as scratch:
        os.environ["DMLLAB_CACHE"] = args.cache or str(Path(scratch) / "cache")
        os.environ["DMLLAB_RESULTS"] = str(Path(scratch) / "results")
        profiles = args.profiles.split(",")
        counts = [int(n) for n in args.pairs.split(",")]
        for profile, pairs in zip(profiles, counts * len(profiles) if len(counts) == 1 else counts):
            r = _pairs(profile, pairs, Path(scratch))
            r["curves_us_per_epoch"] = per_epoch
            r["curves_share_pct"] = 100 * r["epochs"] * per_epoch * 1e-6 / r["without_curves_s"]
            r.update(
                threads=torch.get_num_threads(),
                cpu=machine(),
                timestamp=stamp,
                torch_version=torch.__version__,
            )
            rows.append(r)
            print(
                f"{r['profile']:>5}: {r['with_curves_s']:.2f} s with curves, {r['without_curves_s']:.2f} s without "
                f"(A/B median {r['ratio_median']:.3f}, {r['ratio_min']:.3f}..{r['ratio_max']:.3f}, {r['pairs']} "
                f"pairs); the curves' own work {per_epoch:.0f} us/epoch = {r['curves_share_pct']:.4f} % of "
                "the run",
                flush=True,
            )
            print(
                "wrote", write_csv(args.out, rows), flush=True
            )  # after each profile: a cut run keeps its rows


if __name__ == "__main__":
    main()
