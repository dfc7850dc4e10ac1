"""Whether a cheap quick setting puts the offline benchmark in the papers' regime: training R@1 and test R@1 of
ProxyNCA++ and of Proxy Synthesis over Norm-softmax (the arm the regulariser claims compare) under candidate quick
settings, with what each costs, set against the study's budget.

The papers' models fit their training classes; a regulariser (Proxy Synthesis, mixup, Virtual Softmax) is claimed to
help generalisation from there. The quick profile is in that regime when ProxyNCA++'s training R@1 reaches
``dmllab.experiments.gate.REGIME_TRAIN_R1`` with its test R@1 well below it (docs/preregistration.md). Each candidate
(:data:`CANDIDATES`) is the method's quick preset with a few scale knobs changed: schedule epochs (every scheduled
event kept at the same fraction of training, as the profiles compress the papers' schedules), frozen SmallCNN blocks
(more trainable capacity; 0 trains the whole trunk without the feature cache), the trunk's width (its own
pre-trained trunk), images per class and the number of classes of the benchmark. Every run trains the study's
protocol (one stage on ``trainval``, tested on ``test``) on draw :data:`DRAW` of the benchmark, which no claim uses
(the claims' seeds use draws 0-4), with seed 0; ``train_R1`` is the protocol's R@1 of the final model on a sample of
its training split (``RunResult.train_metrics``, the artifacts' ``train_R@1``), ``test_R1`` its test R@1.

Cost: each run in this process on 1 torch thread; ``cpu_s`` is the process's CPU time of the run
(``time.process_time``; the machine's load does not inflate it), ``wall_s`` its wall time. One-off caches (the
images, the pre-trained trunk, the frozen blocks' features) are built before the timing (``oneoff_cpu_s``), as a study
builds them once. ``relative_cost`` divides ``cpu_s`` by the same method's ``preset`` candidate's; the projected study
from empty scales the training phase of the last measured study (``study.csv``: its training phase per trained run
times all its runs) by it and keeps its other phases (plan, notebooks, plots, report), assuming every run of the study
scales like this method's preset run (all quick methods share the trunk, the data and the schedule).
``fits`` is whether ``train_R1`` reaches the regime's bar; ``in_budget`` whether the projection is within
:data:`BUDGET_MIN` minutes.

    nice -n 10 .venv/bin/python benchmarks/quick_regime.py                 # -> results/benchmarks/quick_regime.csv
    nice -n 10 .venv/bin/python benchmarks/quick_regime.py --only preset,e16 --methods proxynca++ --out /tmp/r.csv
    .venv/bin/python benchmarks/quick_regime.py --dry --out /tmp/r.csv     # toy size, seconds (the test runs it)
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchutil import machine, write_csv  # noqa: E402

BENCH = Path(__file__).resolve().parent.parent / "results" / "benchmarks"
#: The benchmark draw the candidates train on: none of the claims' (their seeds 0-4 train on draws 0-4).
DRAW = 99
SEED = 0
#: The study's budget on 2 cores (minutes) a chosen setting must fit in.
BUDGET_MIN = 180.0
#: ProxyNCA++ and the arm the Proxy Synthesis claims compare (PS over Norm-softmax, the PS tables' base).
METHODS = ("proxynca++", "proxy_synthesis:normsoftmax")
#: Candidate quick settings: the knobs :func:`candidate` changes on a method's quick preset (absent: the preset's).
#: ``epochs``: schedule epochs; ``frozen_blocks``: frozen SmallCNN blocks (0: the whole trunk trains, no feature
#: cache); ``width``: the SmallCNN's width (a wider trunk is pre-trained first; not measured: width 32 has 4x the
#: trainable blocks' FLOPs, an estimated 2.6x the preset's run, above the budget's 1.9x, its training steps being
#: about half of a run); ``num_classes`` / ``images_per_class``: the benchmark's size
#: (``num_classes`` 100: 50 training and 50 test classes instead of 100 and 100; 50: 25 and 25).
CANDIDATES: dict[str, dict[str, Any]] = {
    "preset": {},
    "e16": {"epochs": 16},
    "e32": {"epochs": 32},
    "e64": {"epochs": 64},
    "b2": {"frozen_blocks": 2},
    "b0": {"frozen_blocks": 0},
    "nc50_e16": {"num_classes": 50, "epochs": 16},
    "nc50_e24": {"num_classes": 50, "epochs": 24},
    "nc50_e32": {"num_classes": 50, "epochs": 32},
    "nc100_e48": {"num_classes": 100, "epochs": 48},
    "nc100_e32": {"num_classes": 100, "epochs": 32},
    "ipc20_e32": {"images_per_class": (20, 30), "epochs": 32},
}
#: ``--dry``: the smoke profile (SmallCNN from scratch, 24 classes) with one toy candidate per knob.
DRY_CANDIDATES: dict[str, dict[str, Any]] = {
    "preset": {},
    "e1": {"epochs": 1},
    "b2": {"frozen_blocks": 2},
    "w4": {"width": 4},
    "nc16": {"num_classes": 16, "images_per_class": (6, 8)},
}


def candidate(cfg: Any, knobs: dict[str, Any], draw: int) -> Any:
    """``cfg`` (a method's preset) with ``knobs`` (:data:`CANDIDATES`) on benchmark draw ``draw``."""
    from dmllab.experiments.kit import on_draw
    from dmllab.training.presets.profiles import compress_heating, compress_schedule

    if "epochs" in knobs:
        s = cfg.schedule
        cfg = compress_heating(cfg, epochs=knobs["epochs"])
        schedule = compress_schedule(s, epochs=knobs["epochs"], warmup=s.warmup_epochs, patience=s.patience)
        cfg = replace(cfg, schedule=schedule)
    if "frozen_blocks" in knobs:
        blocks = knobs["frozen_blocks"]
        cfg = cfg.replace("model.frozen_blocks", blocks)
        if blocks == 0:
            cfg = cfg.replace("data.feature_views", 0)
    if "width" in knobs:
        cfg = cfg.replace("model.backbone", cfg.model.backbone.with_kw(width=knobs["width"]))
    size = {k: knobs[k] for k in ("num_classes", "images_per_class") if k in knobs}
    if size:
        cfg = cfg.replace("data.dataset", cfg.data.dataset.with_kw(**size))
    return on_draw(cfg, draw)


def measure(cfg: Any, seed: int) -> dict[str, Any]:
    """One run of ``cfg`` on 1 torch thread, its one-off caches built first (untimed in ``cpu_s``)."""
    import torch

    from dmllab.rng import seed_everything
    from dmllab.training import Trainer
    from dmllab.training.config import run_threads
    from dmllab.training.pretrain import prepare
    from dmllab.training.protocol import run_protocol, stage_plans

    cfg = cfg.replace("run.threads", 1)
    with run_threads(cfg):
        c0 = time.process_time()
        prepare(cfg, progress=False)  # the pre-trained trunk of this width and draw
        warm = Trainer(cfg, progress=False, seed=seed)  # the images and the frozen blocks' feature cache
        seed_everything(seed)
        warm.setup(stage_plans(cfg)[0])
        warm.data.close()
        oneoff = time.process_time() - c0
        c0, t0 = time.process_time(), time.perf_counter()
        r = run_protocol(cfg, seed=seed, progress=False)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        threads = torch.get_num_threads()
    steps = r.extra.get("timings", {})
    return {
        "train_R1": 100 * r.train_metrics["R@1"],
        "test_R1": 100 * r.metrics["R@1"],
        "cpu_s": cpu,
        "wall_s": wall,
        "train_steps_s": sum(steps.get(k, 0.0) for k in ("data", "step")),
        "oneoff_cpu_s": oneoff,
        "torch_threads": threads,
        "torch_version": torch.__version__,
    }


def study_projection(study_csv: Path) -> tuple[float, float] | None:
    """``(other_s, train_s)`` of the last measured study with trained runs in ``study_csv``: its phases other than
    training, and its training phase for all its runs (training per trained run times the runs); None without one."""
    if not study_csv.is_file():
        return None
    with study_csv.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if int(r["trained"] or 0) > 0]
    if not rows:
        return None
    r = rows[-1]
    train_s = float(r["train_s"])
    return float(r["study_s"]) - train_s, train_s * int(r["runs"]) / int(r["trained"])


def with_projection(rows: list[dict[str, Any]], study: tuple[float, float] | None) -> list[dict[str, Any]]:
    """``rows`` with each one's cost relative to its method's ``preset`` row and the study projected from it."""
    from dmllab.experiments.gate import REGIME_TRAIN_R1

    preset = {r["method"]: r["cpu_s"] for r in rows if r["candidate"] == "preset"}
    out = []
    for r in rows:
        rel = r["cpu_s"] / preset[r["method"]] if r["method"] in preset else float("nan")
        projected = float("nan") if study is None else (study[0] + study[1] * rel) / 60
        out.append(
            {
                **r,
                "relative_cost": rel,
                "projected_study_min": projected,
                "fits": r["train_R1"] >= REGIME_TRAIN_R1,
                "in_budget": projected <= BUDGET_MIN,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help=f"comma list of candidates: {', '.join(CANDIDATES)}")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma list of preset methods")
    ap.add_argument("--out", type=Path, default=BENCH / "quick_regime.csv")
    ap.add_argument(
        "--append",
        action="store_true",
        help="keep the rows already in --out (other candidates measured before)",
    )
    ap.add_argument(
        "--merge",
        type=Path,
        action="append",
        default=[],
        help="add the rows of another CSV of this script (e.g. a second process measured side by side)",
    )
    ap.add_argument(
        "--study", type=Path, default=BENCH / "study.csv", help="the study cost the projection scales"
    )
    ap.add_argument(
        "--dry", action="store_true", help="the smoke profile with toy candidates, in a temporary cache"
    )
    args = ap.parse_args(argv)
    pool = DRY_CANDIDATES if args.dry else CANDIDATES
    names = [n for n in (args.only or ",".join(pool)).split(",") if n]
    unknown = [n for n in names if n not in pool]
    if unknown:
        ap.error(f"unknown candidate(s) {', '.join(unknown)}; known: {', '.join(pool)}")
    if args.dry:
        os.environ["DMLLAB_CACHE"] = tempfile.mkdtemp(prefix="quick-regime-cache-")
    os.environ.setdefault("DMLLAB_RESULTS", tempfile.mkdtemp(prefix="quick-regime-"))
    import torch

    from dmllab.training import presets

    torch.set_num_threads(1)
    profile = "smoke" if args.dry else "quick"
    rows: list[dict[str, Any]] = []
    if args.append and args.out.is_file():
        with args.out.open(newline="") as fh:
            rows = [_typed(r) for r in csv.DictReader(fh)]
    for other in args.merge:
        with other.open(newline="") as fh:
            merged = [_typed(r) for r in csv.DictReader(fh)]
        again = {(r["method"], r["candidate"]) for r in merged}
        rows = [r for r in rows if (r["method"], r["candidate"]) not in again] + merged
    stamp = {"cpu": machine(), "date": datetime.date.today().isoformat(), "profile": profile, "draw": DRAW}
    for method in [m for m in args.methods.split(",") if m]:
        for name in names:
            cfg = candidate(presets.get(method, "synthetic", profile), pool[name], DRAW)
            m = measure(cfg, SEED)
            rows = [r for r in rows if (r["method"], r["candidate"]) != (method, name)]
            knobs = " ".join(f"{k}={v}" for k, v in pool[name].items()) or "the preset"
            rows.append({"method": method, "candidate": name, "knobs": knobs, "seed": SEED, "epochs":
                         cfg.schedule.epochs, **m, **stamp})  # fmt: skip
            print(
                f"{method:28s} {name:10s} train R@1 {m['train_R1']:5.1f}  test R@1 {m['test_R1']:5.1f}  "
                f"cpu {m['cpu_s']:7.1f} s  wall {m['wall_s']:7.1f} s  (one-off {m['oneoff_cpu_s']:.1f} s)",
                flush=True,
            )
            write_csv(args.out, _ordered(with_projection(rows, study_projection(args.study))))
    write_csv(args.out, _ordered(with_projection(rows, study_projection(args.study))))
    print(f"wrote {args.out}")
    return 0


def _ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` by method (:data:`METHODS` first, in order) and cost."""
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(rows, key=lambda r: (order.get(r["method"], len(order)), r["method"], r["cpu_s"]))


_FLOATS = ("train_R1", "test_R1", "cpu_s", "wall_s", "train_steps_s", "oneoff_cpu_s")


def _typed(row: dict[str, str]) -> dict[str, Any]:
    """A row read back from the CSV, its measured columns as numbers and without the derived ones."""
    derived = ("relative_cost", "projected_study_min", "fits", "in_budget")
    out: dict[str, Any] = {k: v for k, v in row.items() if k not in derived}
    out.update({k: float(row[k]) for k in _FLOATS})
    return out


if __name__ == "__main__":
    raise SystemExit(main())
