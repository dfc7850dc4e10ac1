"""Choose the quick profile's recipe on the *validation* split (never the test split): wall time and signal of
candidate recipes of the quick ProxyNCA++ preset.

Every candidate is the quick ProxyNCA++ preset with config overrides (each states its trunk lr, frozen blocks and
cached views, so the candidates do not move when the preset does), trained single-stage on ``train`` with the
validation split watched every epoch and the paper's plateau rule (``run.two_stage=false data.train_split=train
schedule.scheduler=plateau``); its signal is the validation R@1 of the last
epoch minus the validation R@1 of the same network before any metric learning (the pre-trained-only model, same
seed). Runs execute in this process one after the other (2 CPU cores), with a fresh run store; shared caches
(images, pre-trained weights, feature caches) are built before the timing starts, as a study builds them once.

    .venv/bin/python benchmarks/select_quick.py --seeds 2                     # -> results/benchmarks/quick_selection.csv
    .venv/bin/python benchmarks/select_quick.py --seeds 1 --only head8,b5_lr1 --out /tmp/q.csv   # a subset

Fewer epochs with an lr drop (the ``b*_e*_d*`` candidates):

    .venv/bin/python benchmarks/select_quick.py --seeds 2 --group schedules   # -> quick_selection_schedules.csv

Smaller class-balanced batches (``bs*_e*_lr*``: batch 16 or 8, fewer epochs):

    .venv/bin/python benchmarks/select_quick.py --seeds 2 --group batch       # -> quick_selection_batch.csv

A smaller offline benchmark (``nc100_e*``: 100 classes; ``ipc25_e*``: 20-30 images per class):

    .venv/bin/python benchmarks/select_quick.py --seeds 2 --group small       # -> quick_selection_small.csv

Another optimiser for fewer epochs (``adam*_e*``: Adam with eps 1e-8 instead of the preset's eps 1):

    .venv/bin/python benchmarks/select_quick.py --seeds 2 --group optim       # -> quick_selection_optim.csv
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchutil import write_csv

_MEM = ["data.in_memory=true"]
_C4 = [*_MEM, "data.feature_views=4"]
#: The candidate adopted as the quick preset (its overrides give the preset's recipe).
ADOPTED = "b4_lr1"
CANDIDATES: dict[str, list[str]] = {
    # the full fine-tuning recipe (trunk lr 0.1, PIL transforms per image), the reference the preset replaced
    "full8": ["data.in_memory=false", "model.frozen_blocks=0", "data.feature_views=0", "optim.lr=0.1"],
    # in-memory tensor path, full fine-tuning
    "mem8": [*_MEM, "model.frozen_blocks=0", "data.feature_views=0", "optim.lr=0.1"],
    # the whole trunk frozen and cached: only LayerNorm + proxies train (no embedding layer at 128-d)
    "head8": [*_MEM, "model.frozen_blocks=6", "data.feature_views=8", "optim.lr=0.1"],
    # the first 5 blocks frozen and cached (stage 4 + head train), trunk lr 0.1 / 0.3 / 1.0
    "b5_lr0.1": [*_C4, "model.frozen_blocks=5", "optim.lr=0.1"],
    "b5_lr0.3": [*_C4, "model.frozen_blocks=5", "optim.lr=0.3"],
    "b5_lr1": [*_C4, "model.frozen_blocks=5", "optim.lr=1.0"],
    "b5_lr1_e12": [*_C4, "model.frozen_blocks=5", "optim.lr=1.0", "schedule.epochs=12"],
    # the first 3 or 4 blocks frozen (stage 3's second block + stage 4 + head train)
    "b3_lr0.1": [*_C4, "model.frozen_blocks=3", "optim.lr=0.1"],
    "b4_lr0.1": [*_C4, "model.frozen_blocks=4", "optim.lr=0.1"],
    "b4_lr0.3": [*_C4, "model.frozen_blocks=4", "optim.lr=0.3"],
    ADOPTED: [*_C4, "model.frozen_blocks=4", "optim.lr=1.0"],  # the quick preset's recipe
    "b4_lr1_e6": [*_C4, "model.frozen_blocks=4", "optim.lr=1.0", "schedule.epochs=6"],
    "b4_lr2": [*_C4, "model.frozen_blocks=4", "optim.lr=2.0"],
}
#: Fewer epochs with one lr drop (x0.1) before the last epoch(s), instead of a constant lr.
SCHEDULE_CANDIDATES: dict[str, list[str]] = {
    f"b{b}_lr1_e{e}_d{d}": [
        *_C4,
        f"model.frozen_blocks={b}",
        "optim.lr=1.0",
        f"schedule.epochs={e}",
        "schedule.scheduler=multistep",
        f"schedule.milestones={d}",
        "schedule.factor=0.1",
    ]
    for b, e, d in ((4, 4, 3), (4, 5, 4), (4, 6, 5), (4, 6, 4), (4, 8, 6), (5, 6, 5))
}
#: Smaller class-balanced batches (4 images per class, so 4 or 2 classes a batch): more updates for the same FLOPs,
#: with fewer epochs to spend fewer FLOPs; ``bs16_e8`` is the preset's schedule at batch 16.
BATCH_CANDIDATES: dict[str, list[str]] = {
    f"bs{b}_e{e}_lr{lr}": [
        *_C4,
        "model.frozen_blocks=4",
        f"optim.lr={lr}",
        f"data.batch_size={b}",
        f"schedule.epochs={e}",
    ]
    for b, e, lr in ((16, 8, 0.5), (16, 6, 0.5), (16, 4, 0.5), (16, 4, 1.0), (16, 3, 0.5), (8, 2, 0.3))
}
#: A smaller offline benchmark (the preset's recipe): half the classes (``nc100``: 100 instead of 200, so 25 train
#: and 25 validation classes) or about half the images per class (``ipc25``: 20-30 instead of 40-60), at the
#: preset's 8 epochs (half the training steps) or more epochs (the same steps). Its validation gallery is smaller,
#: so its R@1 levels are not those of the preset; the signal (trained minus pre-trained only, same gallery) is.
SMALL_CANDIDATES: dict[str, list[str]] = {
    f"{name}_e{e}": [*_C4, "model.frozen_blocks=4", "optim.lr=1.0", kw, f"schedule.epochs={e}"]
    for name, kw, e in (
        ("nc100", "data.dataset.num_classes=100", 8),
        ("nc100", "data.dataset.num_classes=100", 12),
        ("nc100", "data.dataset.num_classes=100", 16),
        ("ipc25", "data.dataset.images_per_class=20,30", 8),
        ("ipc25", "data.dataset.images_per_class=20,30", 16),
    )
}
#: Another optimiser for fewer epochs: the preset's Adam has eps 1 (the authors' ProxyNCA++ setting: near the
#: start a momentum SGD step of lr 1), ``adam*`` is Adam with eps 1e-8 (per-weight normalised steps), its trunk and
#: embedding lr as named and the proxies' lr 100x that (Proxy Anchor's ratio); ``b4_lr1_e4`` is the preset's
#: optimiser for the same 4 constant-lr epochs.
OPTIM_CANDIDATES: dict[str, list[str]] = {
    "b4_lr1_e4": [*_C4, "model.frozen_blocks=4", "optim.lr=1.0", "schedule.epochs=4"],
    **{
        f"adam{lr}_e{e}": [
            *_C4,
            "model.frozen_blocks=4",
            "optim.eps=1e-8",
            f"optim.lr={lr}",
            f"optim.lr_embedding={lr}",
            f"optim.lr_proxies={100 * float(lr):g}",
            f"schedule.epochs={e}",
        ]
        for lr, e in (("1e-3", 4), ("3e-3", 4), ("3e-3", 6), ("1e-3", 8), ("3e-3", 8))
    },
}
#: Every named candidate (what ``--only`` may name).
KNOWN: dict[str, list[str]] = {
    **CANDIDATES,
    **SCHEDULE_CANDIDATES,
    **BATCH_CANDIDATES,
    **SMALL_CANDIDATES,
    **OPTIM_CANDIDATES,
}
#: The candidate groups, each measured in one run into its own CSV (the preset's recipe in both, side by side).
GROUPS: dict[str, tuple[list[str], str]] = {
    "recipes": (list(CANDIDATES), "quick_selection.csv"),
    "schedules": ([ADOPTED, *SCHEDULE_CANDIDATES], "quick_selection_schedules.csv"),
    "batch": ([ADOPTED, *BATCH_CANDIDATES], "quick_selection_batch.csv"),
    "small": ([ADOPTED, *SMALL_CANDIDATES], "quick_selection_small.csv"),
    "optim": ([ADOPTED, *OPTIM_CANDIDATES], "quick_selection_optim.csv"),
}


def _pretrained_val_r1(cfg, seed: int) -> float:
    from dmllab.rng import seed_everything
    from dmllab.training import Trainer
    from dmllab.training.protocol import stage_plans

    trainer = Trainer(cfg, progress=False, seed=seed)
    seed_everything(seed)
    trainer.setup(stage_plans(cfg)[0])
    return trainer.evaluate(cfg.data.val_split, metrics=("recall",), ks=(1,))["R@1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--group", choices=GROUPS, default="recipes", help="the candidates (and default --out)")
    ap.add_argument(
        "--only", default=None, help=f"comma list of candidates instead of the group's: {', '.join(KNOWN)}"
    )
    ap.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="NAME:OVERRIDE;OVERRIDE",
        help="an extra candidate, e.g. 'h20:model.frozen_blocks=6;data.in_memory=true;...'",
    )
    ap.add_argument("--out", default=None, help="the CSV (default: results/benchmarks/<the group's CSV>)")
    args = ap.parse_args()
    names, csv_name = GROUPS[args.group]
    if args.only is not None:
        names = [k for k in args.only.split(",") if k]
    unknown = [k for k in names if k not in KNOWN]
    if unknown:
        ap.error(f"unknown candidate(s) {', '.join(unknown)}; known: {', '.join(KNOWN)}")
    out_csv = args.out or str(Path(__file__).resolve().parent.parent / "results" / "benchmarks" / csv_name)
    import os
    import tempfile

    os.environ.setdefault("DMLLAB_RESULTS", tempfile.mkdtemp(prefix="select-quick-"))
    import torch

    from dmllab.training import apply_overrides, presets
    from dmllab.training.protocol import run_protocol

    cands = {k: KNOWN[k] for k in names}
    for spec in args.extra:
        name, _, ov = spec.partition(":")
        cands[name] = [o for o in ov.split(";") if o]
    base = presets.get("proxynca++", "synthetic", "quick")
    rows = []
    for seed in range(args.seeds):
        for name, ov in cands.items():
            # the protocol first, so that a candidate may set its own scheduler (the schedule candidates)
            cfg = apply_overrides(
                base, ["run.two_stage=false", "data.train_split=train", "schedule.scheduler=plateau", *ov]
            )
            pre = _pretrained_val_r1(cfg, seed)
            # warm the shared caches outside the timing (a study builds them once for all runs)
            t0 = time.perf_counter()
            r = run_protocol(cfg, seed=seed, progress=False)
            wall = time.perf_counter() - t0
            vals = [h["val_R@1"] for h in r.history if "val_R@1" in h and not h.get("warmup")]
            t = r.extra["timings"]
            row = {
                "candidate": name,
                "seed": seed,
                "wall_s": wall,
                "epochs": cfg.schedule.epochs,
                "val_R@1_last": vals[-1],
                "val_R@1_best": max(vals),
                "pretrained_val_R@1": pre,
                "signal_last": vals[-1] - pre,
                "lr_drops": " ".join(map(str, r.lr_drop_epochs)) or "none",
                **{f"{k}_s": t.get(k, 0.0) for k in ("setup", "data", "step", "eval", "test", "cache_build")},
                "overrides": " ".join(ov),
                "torch_threads": torch.get_num_threads(),
            }
            rows.append(row)
            print(
                f"{name:10s} seed {seed}: {wall:6.1f} s  val R@1 last {100 * vals[-1]:.2f} best "
                f"{100 * max(vals):.2f} pre {100 * pre:.2f}  (cache build {t.get('cache_build', 0):.1f} s)",
                flush=True,
            )
    out = write_csv(out_csv, rows)
    print(f"\nwrote {out}")
    for name in cands:
        rs = [r for r in rows if r["candidate"] == name]
        sig = [100 * r["signal_last"] for r in rs]
        v = [100 * r["val_R@1_last"] for r in rs]
        print(
            f"{name:10s} median wall {statistics.median(r['wall_s'] for r in rs):6.1f} s | val R@1 {statistics.mean(v):.2f}"
            f" sd {statistics.stdev(v) if len(v) > 1 else float('nan'):.2f} | signal {statistics.mean(sig):.2f}"
        )


if __name__ == "__main__":
    main()
