"""GPU benchmark (docs/guide/gpu.md): where the time of a paper-profile run goes on one CUDA GPU.

Needs a CUDA GPU; without one it exits at once with a message (status 2). Everything it measures runs in
this process, side by side, and goes to results/benchmarks/gpu.csv (columns: benchmark, setting, metric,
value, unit, device, torch_version, command, timestamp):

1. ``model_step``: images/s of one training step (forward, ProxyNCA++ loss, backward, Adam step) of the
   paper's ResNet-50 (2048-d embedding) on synthetic 256 x 256 batches already on the GPU, batch 32 and 192,
   fp32 versus bf16 autocast + channels_last.
2. ``loader``: images/s of the paper profile's training loader alone (JPEG decode + RandomResizedCrop(256)
   + flip + normalise, class-balanced batches, the package's worker count ``data.num_workers``, pinned
   memory), on a fake CUB-200-2011 that this script writes in the real on-disk layout (images.txt,
   image_class_labels.txt, bounding_boxes.txt, classes.txt, images/<class>/<file>.jpg) at CUB's image sizes
   (about 500 x 375 JPEGs).
3. ``end_to_end``: images/s of whole training epochs of the paper profile through ``dmllab.training.Trainer``
   on that fake CUB (loader, transfers, step, the trainer's checks), same four settings.
4. ``evaluator``: dmllab's exact Recall@{1,2,4,8} on GPU embeddings at SOP size (60,502 x 512 and x 2048,
   leave-one-out) and In-Shop size (14,218 queries x 12,612 gallery, 512-d), against the bare chunked
   products of the same shapes on the same GPU (full X X^T, and the upper-triangle tiles only).
5. ``quick_run``: the quick profile's ProxyNCA++ preset trained on the GPU by ``dmllab train`` (one fresh process
   per seed, as a study worker runs it): the process's wall time and the run's stored ``wall_time_s``, the
   basis of the plan's estimate on a GPU (``dmllab.profiles.TYPICAL_GPU_RUN_S``). The first seed also builds
   the caches (the generated benchmark, the pre-trained trunk, the frozen-prefix features): ``cold``.

    python benchmarks/bench_gpu.py                       # everything (several minutes on an H100)
    python benchmarks/bench_gpu.py --only evaluator
    python benchmarks/bench_gpu.py --paper-epochs 2 --weights /path/resnet50-0676ba61.pth
        # also: `dmllab train --profile paper` for 2 epochs on the fake CUB with that weights file
"""

from __future__ import annotations

import argparse
import csv
import os
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "results" / "benchmarks" / "gpu.csv"
COLUMNS = [
    "benchmark",
    "setting",
    "metric",
    "value",
    "unit",
    "device",
    "torch_version",
    "command",
    "timestamp",
]
PARTS = ("model_step", "loader", "end_to_end", "evaluator", "quick_run")
SETTINGS = [  # (name, batch size, run.amp, run.channels_last)
    ("b32_fp32", 32, "off", "off"),
    ("b32_bf16_cl", 32, "bf16", "on"),
    ("b192_fp32", 192, "off", "off"),
    ("b192_bf16_cl", 192, "bf16", "on"),
]


def make_fake_cub(root: Path, n_classes: int = 200, per_class: int = 12, seed: int = 0) -> Path:
    """CUB_200_2011 in its real layout, with smooth random JPEGs at CUB's typical sizes (500 x 3xx)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    images, labels, boxes = [], [], []
    image_id = 0
    yy, xx = np.mgrid[0:1, 0:1]  # placeholders, rebuilt per size
    for c in range(1, n_classes + 1):
        folder = f"{c:03d}.Species_{c}"
        colour = rng.integers(0, 256, 3)
        for k in range(per_class):
            image_id += 1
            w, h = 500, int(rng.integers(300, 460))
            yy, xx = np.mgrid[0:h, 0:w]
            base = (np.sin(xx / rng.uniform(8, 40)) + np.cos(yy / rng.uniform(8, 40))) * 60
            img = np.clip(base[..., None] + colour + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
            rel = f"{folder}/Species_{c}_{k:04d}_{image_id}.jpg"
            (root / "images" / folder).mkdir(parents=True, exist_ok=True)
            Image.fromarray(img).save(root / "images" / rel, quality=90)
            images.append(f"{image_id} {rel}")
            labels.append(f"{image_id} {c}")
            boxes.append(f"{image_id} {w * 0.1:.1f} {h * 0.1:.1f} {w * 0.8:.1f} {h * 0.8:.1f}")
    (root / "images.txt").write_text("\n".join(images) + "\n")
    (root / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (root / "bounding_boxes.txt").write_text("\n".join(boxes) + "\n")
    (root / "classes.txt").write_text("".join(f"{c} {c:03d}.Species_{c}\n" for c in range(1, n_classes + 1)))
    (root / "train_test_split.txt").write_text("".join(f"{i} 1\n" for i in range(1, image_id + 1)))
    return root


def paper_cfg(root: Path, batch: int, amp: str, channels_last: str, weights: str | None):
    from dmllab.training import apply_overrides, presets

    overrides = [
        f"data.root={root}",
        "data.dataset.check_counts=false",
        f"data.batch_size={batch}",
        f"run.amp={amp}",
        f"run.channels_last={channels_last}",
        "run.device=cuda",
    ]
    overrides += [f"model.weights_path={weights}"] if weights else ["model.pretrained=false"]
    return apply_overrides(presets.get("proxynca++", "cub", "paper"), overrides)


def sync_time(fn, repeats: int) -> float:
    """Seconds per call of ``fn`` (CUDA synchronised), after one warm-up call."""
    import torch

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / repeats


def bench_model_step(add, root: Path, weights: str | None, steps: int) -> None:
    import torch

    from dmllab.training import Trainer
    from dmllab.training.protocol import stage_plans

    for name, batch, amp, cl in SETTINGS:
        cfg = paper_cfg(root, batch, amp, cl, weights)
        tr = Trainer(cfg, progress=False)
        tr.setup(stage_plans(cfg)[0])
        tr._apply_schedule(tr.state.plan, tr.state.plan.warmup_epochs + 1)  # backbone trainable
        x = torch.randn(batch, 3, 256, 256, device="cuda")
        if tr.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        y = torch.arange(batch, device="cuda") % 50

        def step(tr=tr, x=x, y=y):
            with torch.autocast(
                "cuda", dtype=tr.amp_dtype or torch.float32, enabled=tr.amp_dtype is not None
            ):
                emb = tr.model(x)
            loss = tr.loss(emb, y)
            tr.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            tr.optimizer.step()

        sec = sync_time(step, steps)
        add("model_step", name, "images_per_s", batch / sec, "img/s")
        print(f"  model_step {name}: {batch / sec:8.1f} img/s", flush=True)
        del tr
        torch.cuda.empty_cache()


def bench_loader(add, root: Path, batches: int) -> None:
    from dmllab.data.loaders import resolve_num_workers
    from dmllab.training import Trainer
    from dmllab.training.protocol import stage_plans

    for batch in (32, 192):
        cfg = paper_cfg(root, batch, "off", "off", None)
        tr = Trainer(cfg, progress=False)
        plan = stage_plans(cfg)[0]
        workers = resolve_num_workers(cfg.data.num_workers)
        loader = tr.data.train_batches(plan.name, plan.train_split, 1, tr.batch_shape(plan.train_split))
        it = iter(loader)
        next(it)  # workers started, first batch decoded
        t0, n = time.perf_counter(), 0
        for _ in range(batches):
            try:
                images, _ = next(it)
            except StopIteration:
                break
            n += images.shape[0]
        sec = time.perf_counter() - t0
        add("loader", f"b{batch}_workers{workers}", "images_per_s", n / sec, "img/s")
        print(f"  loader b{batch} ({workers} workers): {n / sec:8.1f} img/s", flush=True)


def bench_end_to_end(add, root: Path, weights: str | None, epochs: int) -> None:
    import torch

    from dmllab.training import Trainer
    from dmllab.training.protocol import stage_plans

    for name, batch, amp, cl in SETTINGS:
        cfg = paper_cfg(root, batch, amp, cl, weights)
        tr = Trainer(cfg, progress=False)
        plan = stage_plans(cfg)[0]
        tr.setup(plan)
        first = plan.warmup_epochs + 1  # a schedule epoch: the backbone trains
        tr._apply_schedule(plan, first)
        tr.train_epoch(plan, first)  # warm-up: cuDNN autotuning, workers
        torch.cuda.synchronize()
        t0, n = time.perf_counter(), 0
        for e in range(epochs):
            tr.train_epoch(plan, first + 1 + e)
            n += (len(tr.data.dataset(plan.train_split, train=True)) // batch) * batch
        torch.cuda.synchronize()
        sec = time.perf_counter() - t0
        add("end_to_end", name, "images_per_s", n / sec, "img/s")
        print(f"  end_to_end {name}: {n / sec:8.1f} img/s", flush=True)
        del tr
        torch.cuda.empty_cache()


def bench_evaluator(add, repeats: int) -> None:
    import torch

    from dmllab.metrics import recall_at_k, retrieval_metrics

    gen = torch.Generator(device="cuda").manual_seed(0)

    def data(n, dim, classes):
        labels = torch.arange(n, device="cuda") % classes
        centres = torch.randn(classes, dim, device="cuda", generator=gen)
        return centres[labels] + 3.5 * torch.randn(n, dim, device="cuda", generator=gen), labels

    def full_products(q, r, chunk=8192):
        out = torch.empty(chunk, len(r), device="cuda")
        for i in range(0, len(q), chunk):
            torch.mm(q[i : i + chunk], r.T, out=out[: len(q[i : i + chunk])])

    def half_products(x, block=8192):
        buf = torch.empty(block * block, device="cuda")
        for j in range(0, len(x), block):
            for i in range(0, j + 1, block):
                a, b = x[i : i + block], x[j : j + block]
                torch.mm(a, b.T, out=buf[: len(a) * len(b)].view(len(a), len(b)))

    for n, dim in ((60502, 512), (60502, 2048)):
        x, y = data(n, dim, 11316)
        t_dml = sync_time(lambda x=x, y=y: recall_at_k(x, y, (1, 2, 4, 8)), repeats)
        t_full = sync_time(lambda x=x: full_products(x, x), repeats)
        t_half = sync_time(lambda x=x: half_products(x), repeats)
        setting = f"sop_{n}x{dim}"
        for metric, v in (
            ("dmllab_s", t_dml),
            ("bare_full_products_s", t_full),
            ("bare_half_products_s", t_half),
        ):
            add("evaluator", setting, metric, v, "s")
        add("evaluator", setting, "dmllab_vs_half_products", t_dml / t_half, "x")
        print(
            f"  evaluator {setting}: dmllab {t_dml:.3f} s, full {t_full:.3f} s, half {t_half:.3f} s",
            flush=True,
        )
        del x, y
    q, qy = data(14218, 512, 3985)
    g, gy = data(12612, 512, 3985)
    t_dml = sync_time(
        lambda: retrieval_metrics(q, qy, gallery=g, gallery_labels=gy, ks=(1, 10, 20, 30)), repeats
    )
    t_full = sync_time(lambda: full_products(q, g), repeats)
    add("evaluator", "inshop_14218x12612x512", "dmllab_s", t_dml, "s")
    add("evaluator", "inshop_14218x12612x512", "bare_full_products_s", t_full, "s")
    add("evaluator", "inshop_14218x12612x512", "dmllab_vs_full_products", t_dml / t_full, "x")
    print(f"  evaluator inshop: dmllab {t_dml:.3f} s, products {t_full:.3f} s", flush=True)


def train_command(dataset: str, profile: str, *settings: str, extra: tuple[str, ...] = ()) -> list[str]:
    """``dmllab train`` of the ProxyNCA++ preset in a fresh interpreter, quiet, with ``--set`` ``settings``."""
    cmd = [sys.executable, "-m", "dmllab.cli", "train", "--method", "proxynca++", "--dataset", dataset]
    cmd += ["--profile", profile, "--quiet", *extra]
    for setting in settings:
        cmd += ["--set", setting]
    return cmd


def bench_quick_run(add, seeds: int) -> None:
    import json

    from dmllab import paths

    for seed in range(seeds):
        cmd = train_command("synthetic", "quick", "run.device=cuda", extra=("--seed", str(seed)))
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False)
        wall = time.perf_counter() - t0
        setting = "cold" if seed == 0 else "warm"
        add("quick_run", f"proxynca++_seed{seed}_{setting}", "process_wall_s", wall, "s")
        stored = sorted(paths.runs_dir().glob(f"*/seed{seed}/metrics.json"), key=lambda f: f.stat().st_mtime)
        if proc.returncode != 0 or not stored:
            add("quick_run", f"proxynca++_seed{seed}_{setting}", "exit_status", proc.returncode, "")
            continue
        run_s = float(json.loads(stored[-1].read_text())["wall_time_s"])
        add("quick_run", f"proxynca++_seed{seed}_{setting}", "wall_time_s", run_s, "s")
        print(f"  quick_run seed {seed} ({setting}): process {wall:.1f} s, run {run_s:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=PARTS, action="append", help="run only these parts (repeatable)")
    p.add_argument("--cub-per-class", type=int, default=12, help="fake CUB images per class (200 classes)")
    p.add_argument("--steps", type=int, default=20, help="timed model steps per setting")
    p.add_argument("--loader-batches", type=int, default=20, help="timed loader batches")
    p.add_argument("--epochs", type=int, default=1, help="timed end-to-end epochs per setting")
    p.add_argument("--repeats", type=int, default=3, help="timed evaluator runs (mean)")
    p.add_argument("--quick-seeds", type=int, default=3, help="quick_run: seeds (the first one cold)")
    p.add_argument("--weights", default=None, help="ResNet-50 ImageNet state-dict file (model.weights_path)")
    p.add_argument(
        "--paper-epochs", type=int, default=0, help="also `dmllab train --profile paper` this long"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--workdir", type=Path, default=None, help="where the fake CUB goes (default: a temp dir)")
    args = p.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print(
            "bench_gpu.py: no CUDA GPU is available here (torch.cuda.is_available() is False); this benchmark "
            "measures the GPU path only. Run it on a machine with an NVIDIA GPU.",
            file=sys.stderr,
        )
        return 2
    parts = args.only or list(PARTS)
    device = torch.cuda.get_device_name(0)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = "python benchmarks/bench_gpu.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    rows: list[dict] = []

    def add(bench, setting, metric, value, unit):
        rows.append(
            dict(
                benchmark=bench,
                setting=setting,
                metric=metric,
                value=f"{value:.4f}",
                unit=unit,
                device=device,
                torch_version=torch.__version__,
                command=command.strip(),
                timestamp=stamp,
            )
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", newline="") as fh:  # after every row: an interrupted run keeps its numbers
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rows)

    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        os.environ.setdefault("DMLLAB_RESULTS", str(work / "results"))
        os.environ.setdefault("DMLLAB_CACHE", str(work / "cache"))
        root = work / "CUB_200_2011"
        if any(part in parts for part in ("model_step", "loader", "end_to_end")) or args.paper_epochs:
            if not (root / "images.txt").is_file():
                t0 = time.perf_counter()
                make_fake_cub(root, per_class=args.cub_per_class)
                print(
                    f"fake CUB ({200 * args.cub_per_class} images) in {time.perf_counter() - t0:.1f} s",
                    flush=True,
                )
        print(f"device: {device}", flush=True)
        if "model_step" in parts:
            bench_model_step(add, root, args.weights, args.steps)
        if "loader" in parts:
            bench_loader(add, root, args.loader_batches)
        if "end_to_end" in parts:
            bench_end_to_end(add, root, args.weights, args.epochs)
        if "evaluator" in parts:
            bench_evaluator(add, args.repeats)
        if "quick_run" in parts:
            bench_quick_run(add, args.quick_seeds)
        if args.paper_epochs:
            cmd = train_command(
                "cub",
                "paper",
                "data.dataset.check_counts=false",
                f"schedule.epochs={args.paper_epochs}",
                "schedule.warmup_epochs=0",
                f"model.weights_path={args.weights}" if args.weights else "model.pretrained=false",
                extra=("--data-root", str(root)),
            )
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, check=False)
            add("paper_run", f"{args.paper_epochs}_epochs", "wall_s", time.perf_counter() - t0, "s")
            add("paper_run", f"{args.paper_epochs}_epochs", "exit_status", proc.returncode, "")
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
