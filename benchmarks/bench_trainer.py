"""Trainer overhead: training-step throughput of ``dmllab.training.Trainer`` vs a minimal hand-written loop.

Both train the same model (quick-profile ProxyNCA++: SmallCNN width 16, max pooling + LayerNorm, 128-d,
ProxyNCA++ loss, Adam eps 1 with three parameter groups, grad clip 10) from the same initial weights on the
same pre-made batches of 56x56 crops (the quick profile's batch 32 = 8 x 4), on the CPU. Data loading is
excluded from both (the batches are materialised once), so the ratio measures what the trainer adds per
step: device moves, finite checks, hooks, the progress bar machinery, the schedule. Repetitions alternate
between the two loops and the median throughput is reported (the machine may be shared).

``--gpu`` adds ResNet-50 training throughput at 256x256 (batch 64) through the Trainer with bf16 autocast +
channels_last vs fp32 (skipped without CUDA).

    .venv/bin/python benchmarks/bench_trainer.py            # CPU part -> results/benchmarks/trainer.csv
    .venv/bin/python benchmarks/bench_trainer.py --gpu      # + GPU rows
"""

from __future__ import annotations

import argparse
import copy
import csv
import os
import statistics
import time
from pathlib import Path

import torch


def _quick_cfg(overrides: list[str]):
    from dmllab.training import apply_overrides, presets

    cfg = presets.get("proxynca++", "synthetic", "quick")
    # the whole trunk trains on the images (the quick preset's cached frozen-block features would need features in)
    full = ["model.frozen_blocks=0", "data.feature_views=0"]
    return apply_overrides(cfg, ["model.pretrained=false", "run.device=cpu", *full, *overrides])


def _batches(
    n: int, batch: int, size: int, num_classes: int, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(batch, 3, size, size, generator=g)
        classes = torch.randperm(num_classes, generator=g)[: batch // 4]
        out.append((x, classes.repeat_interleave(4)))
    return out


def _hand_loop(model, loss_fn, optimizer, batches, clip: float | None) -> None:
    model.train()
    for x, y in batches:
        emb = model(x)
        loss = loss_fn(emb, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_value_(model.parameters(), clip)
        optimizer.step()


def bench_cpu(steps: int, reps: int) -> list[dict]:
    from dmllab.training import StagePlan, Trainer
    from dmllab.training.optim import build_optimizer, param_groups

    cfg = _quick_cfg([])
    trainer = Trainer(cfg, progress=False)
    plan = StagePlan("single", "train", None, 10**6, 0, "none")
    trainer.setup(plan)
    num_classes = trainer.loss.num_classes
    batches = _batches(steps, cfg.data.batch_size, 56, num_classes)  # the same every epoch, no data loading

    model = copy.deepcopy(trainer.model)
    loss_fn = copy.deepcopy(trainer.loss)
    optimizer = build_optimizer(param_groups(model, loss_fn, cfg.optim), cfg.optim)
    # warm up both paths (allocator, autograd graph caches)
    trainer.apply_schedule(plan, 1)
    trainer.train_batches(plan, 1, batches)
    _hand_loop(model, loss_fn, optimizer, batches[:3], cfg.optim.grad_clip_value)

    n_img = steps * cfg.data.batch_size
    t_trainer, t_hand = [], []
    for rep in range(reps):
        t0 = time.perf_counter()
        trainer.train_batches(plan, rep + 2, batches)
        t_trainer.append(n_img / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        _hand_loop(model, loss_fn, optimizer, batches, cfg.optim.grad_clip_value)
        t_hand.append(n_img / (time.perf_counter() - t0))
    tr, hd = statistics.median(t_trainer), statistics.median(t_hand)
    common = {
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "batch_size": cfg.data.batch_size,
        "image_size": 56,
        "steps": steps,
        "reps": reps,
        "model": f"smallcnn-w{cfg.model.backbone.get('width')} quick proxynca++",
    }
    return [
        {**common, "measure": "trainer_images_per_s", "value": round(tr, 2)},
        {**common, "measure": "hand_loop_images_per_s", "value": round(hd, 2)},
        {**common, "measure": "trainer_overhead_ratio", "value": round(hd / tr - 1.0, 4)},
    ]


def bench_gpu(steps: int, batch: int = 64) -> list[dict]:
    from dmllab.training import StagePlan, Trainer, apply_overrides, presets

    if not torch.cuda.is_available():
        print("no CUDA: GPU section skipped")
        return []
    rows = []
    for label, amp, cl in (("fp32", "off", "off"), ("bf16+channels_last", "bf16", "on")):
        cfg = presets.get("proxynca++", "synthetic", "paper")
        cfg = apply_overrides(
            cfg,
            [
                "model.pretrained=false",
                "run.device=cuda",
                f"run.amp={amp}",
                f"run.channels_last={cl}",
                f"data.batch_size={batch}",
            ],
        )
        trainer = Trainer(cfg, progress=False)
        plan = StagePlan("single", "train", None, 10**6, 0, "none")
        trainer.setup(plan)
        batches = _batches(steps, batch, 256, trainer.loss.num_classes)
        trainer.apply_schedule(plan, 1)
        trainer.train_batches(plan, 1, batches)  # warm-up (cudnn autotune, allocator)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        trainer.train_batches(plan, 2, batches)
        torch.cuda.synchronize()
        ips = steps * batch / (time.perf_counter() - t0)
        rows.append(
            {
                "device": torch.cuda.get_device_name(0),
                "threads": torch.get_num_threads(),
                "batch_size": batch,
                "image_size": 256,
                "steps": steps,
                "reps": 1,
                "model": "resnet50 proxynca++",
                "measure": f"resnet50_{label}_images_per_s",
                "value": round(ips, 1),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="batches per repetition")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--gpu", action="store_true", help="also measure ResNet-50 bf16+channels_last vs fp32"
    )
    parser.add_argument("--gpu-steps", type=int, default=30)
    parser.add_argument("--out", default=None, help="CSV path (default results/benchmarks/trainer.csv)")
    args = parser.parse_args(argv)
    from dmllab.paths import results_dir

    rows = bench_cpu(args.steps, args.reps)
    if args.gpu:
        rows += bench_gpu(args.gpu_steps)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for r in rows:
        r["timestamp"] = stamp
        r["torch_version"] = torch.__version__
        print(f"{r['measure']:<45} {r['value']}")
    out = Path(args.out) if args.out else results_dir() / "benchmarks" / "trainer.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
