"""Smaller inputs for the quick profile, chosen on the *validation* split like
``select_quick.py``: the quick ProxyNCA++ recipe on 32-px images (the "smoke" transform: Resize 36, 32-px crops,
a 4x4 feature map instead of 7x7) with a SmallCNN pre-trained at 32 px the quick profile's way (the pre-training
pool at that size, same recipe), side by side with the 64-px preset in the same run.

Every candidate trains single-stage on ``train`` watching ``val`` (as ``select_quick.py``); its signal is the last
epoch's validation R@1 minus the same network's before any metric learning (pre-trained only, same seed). The
32-px pre-trained weights go to a temporary folder, never to the cache the quick profile reads.

    .venv/bin/python benchmarks/select_quick_size.py --seeds 2   # -> results/benchmarks/quick_selection_size.csv
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchutil import write_csv

SMALL = 32
#: The quick preset's recipe at its own size (64-px images, 56-px crops), the reference of the small candidates.
REFERENCE = "s64_b4_lr1"
CANDIDATES: dict[str, list[str]] = {
    REFERENCE: ["optim.lr=1.0"],  # the quick preset's recipe (64-px images, 56-px crops)
    "s32_b4_lr1": ["optim.lr=1.0"],
    "s32_b4_lr0.3": ["optim.lr=0.3"],
    "s32_b3_lr1": ["optim.lr=1.0", "model.frozen_blocks=3"],
}


def _pretrain_small(folder: Path) -> tuple[Path, float, float]:
    """SmallCNN width 16 pre-trained on the 32-px pre-training pool (``pretrain_config`` with the smoke
    transform); returns the weights file, the wall time and the last epoch's ``pretrain_val`` R@1."""
    from dataclasses import replace

    import torch

    from dmllab.training import Trainer
    from dmllab.training.smallcnn_weights import pretrain_config
    from dmllab.training.trainer import StagePlan

    cfg = pretrain_config(16, image_size=SMALL)
    cfg = replace(cfg, data=replace(cfg.data, transform="smoke"))
    t0 = time.perf_counter()
    trainer = Trainer(cfg, progress=False, seed=0)
    s = cfg.schedule
    trainer.setup(StagePlan("pretrain", "pretrain", "pretrain_val", s.epochs, 0, s.scheduler, s.milestones))
    rows = trainer.fit()
    path = folder / f"smallcnn-w16-{SMALL}px.pt"
    torch.save(trainer.model.backbone.state_dict(), path)
    return path, time.perf_counter() - t0, rows[-1]["val_R@1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument(
        "--out",
        default=str(Path(__file__).resolve().parent.parent / "results/benchmarks/quick_selection_size.csv"),
    )
    args = ap.parse_args()
    os.environ.setdefault("DMLLAB_RESULTS", tempfile.mkdtemp(prefix="select-quick-size-"))
    import torch

    from dmllab.rng import seed_everything
    from dmllab.training import Trainer, apply_overrides, presets
    from dmllab.training.protocol import run_protocol, stage_plans

    folder = Path(tempfile.mkdtemp(prefix="smallcnn-32px-"))
    weights, pretrain_s, pretrain_r1 = _pretrain_small(folder)
    print(
        f"pre-training at {SMALL} px: {pretrain_s:.1f} s, pretrain_val R@1 {100 * pretrain_r1:.2f}",
        flush=True,
    )
    protocol = ["run.two_stage=false", "data.train_split=train", "schedule.scheduler=plateau"]
    small = [f"data.dataset.image_size={SMALL}", "data.transform=smoke", f"model.weights_path={weights}"]
    base = presets.get("proxynca++", "synthetic", "quick")
    rows = []
    for seed in range(args.seeds):
        for name, ov in CANDIDATES.items():
            cfg = apply_overrides(base, [*protocol, *(small if name.startswith(f"s{SMALL}_") else []), *ov])
            trainer = Trainer(cfg, progress=False, seed=seed)
            seed_everything(seed)
            trainer.setup(stage_plans(cfg)[0])
            pre = trainer.evaluate(cfg.data.val_split, metrics=("recall",), ks=(1,))["R@1"]
            d = cfg.data
            for split, train in ((d.train_split, True), (d.val_split, False), (d.test_split, False)):
                # builds the feature caches before the timing
                trainer.data.source(split, train=train, prefix=trainer.prefix())
            t0 = time.perf_counter()
            r = run_protocol(cfg, seed=seed, progress=False)
            wall = time.perf_counter() - t0
            vals = [h["val_R@1"] for h in r.history if "val_R@1" in h and not h.get("warmup")]
            t = r.extra["timings"]
            rows.append(
                {
                    "candidate": name,
                    "seed": seed,
                    "wall_s": wall,
                    "val_R@1_last": vals[-1],
                    "pretrained_val_R@1": pre,
                    "signal_last": vals[-1] - pre,
                    **{f"{k}_s": t.get(k, 0.0) for k in ("setup", "data", "step", "eval", "test")},
                    "pretrain_s": pretrain_s if name.startswith(f"s{SMALL}_") else "",
                    "overrides": " ".join([*(small[:2] if name.startswith(f"s{SMALL}_") else []), *ov]),
                    "torch_threads": torch.get_num_threads(),
                }
            )
            print(
                f"{name:13s} seed {seed}: {wall:5.1f} s  val R@1 {100 * vals[-1]:.2f}  pre {100 * pre:.2f}",
                flush=True,
            )
    out = write_csv(args.out, rows)
    print(f"\nwrote {out}")
    for name in CANDIDATES:
        rs = [r for r in rows if r["candidate"] == name]
        print(
            f"{name:13s} median wall {statistics.median(r['wall_s'] for r in rs):5.1f} s | median step "
            f"{statistics.median(r['step_s'] for r in rs):5.1f} s | val R@1 "
            f"{100 * statistics.mean(r['val_R@1_last'] for r in rs):.2f} | signal "
            f"{100 * statistics.mean(r['signal_last'] for r in rs):.2f}"
        )


if __name__ == "__main__":
    main()
