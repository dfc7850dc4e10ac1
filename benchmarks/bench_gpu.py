"""GPU benchmark (docs/guide/gpu.md): where the time of a study's runs goes on one GPU, in steady state; its rows
calibrate the study's cost model and its choice of device (``dmllab.pipeline.cost``, ``dmllab.pipeline.placement``).

Everything it measures runs side by side and goes to ``--out`` (default ``results/benchmarks/gpu.csv``; columns:
benchmark, setting, metric, value, unit, device, torch_version, command, timestamp). A model ``setting`` reads
``<backbone>_<crop>px_b<batch>_<fp32|bf16|fp16>`` (``dmllab.pipeline.cost.model_setting``).

1. ``model_step``: images/s of the training step as the trainer runs it (``Trainer.train_batches`` over batches
   already on the device: autocast, channels_last, the loss, gradient clipping, the scaler and the finiteness
   flags of its sync-free path), over ``--steps`` batches (default 50) after a warm-up epoch.
2. ``embed``: images/s of the forward pass the evaluation runs (eval mode, no grad, autocast) at the eval batch.
3. ``loader``: images/s of the paper profile's training data path alone as the trainer reads it (workers: JPEG
   decode + crop + flip to uint8, class-balanced batches, pinned memory; then the copy to the device and the
   normalisation there, ``dmllab.data.feed.DevicePrefetcher``) with 1 worker and with the package's
   ``data.num_workers=auto``, in total and per worker, over ``--steps`` batches after the first, on a fake
   CUB-200-2011 written in the real layout at CUB's image sizes with enough images per training class for epochs of
   ``--steps`` batches of the largest batch.
4. ``end_to_end``: images/s of whole training epochs through the Trainer (loader, transfers, step, checks) on that
   fake CUB: epochs of at least ``--steps`` batches, after a warm-up epoch.
5. ``evaluator``: dmllab's exact Recall@K at SOP size (60,502 x 512 and x 2048, leave-one-out) and In-Shop size
   against the bare chunked products of the same shapes on the same device.
6. ``quick_run``: the quick profile's ProxyNCA++ preset (the smoke profile's with ``--smoke``) trained on the device in a fresh process per seed (the
   first seed builds the caches: ``cold``): the process's wall time, the run's ``wall_time_s`` and its phases
   (setup, data, step, eval, test, checkpoint, cache_build: ``phase_<name>_s``).
7. ``quick_workers``: W quick runs at once, each in its own process on the one device (``--gpu-workers``), warm
   caches: ``s_per_run`` = wall time / W, the throughput a study with W GPU workers gets.
8. ``syncs`` (CUDA only): host syncs per training step on the trainer's sync-free path, counted with
   ``torch.cuda.set_sync_debug_mode("warn")`` (the end-of-epoch read excluded): the model step of each setting
   over device-resident batches, a paper-preset epoch through the data path (workers, prefetcher) and a quick
   run's epoch (cached features on the device); then each setting's steps once more under
   ``set_sync_debug_mode("error")`` (``error_mode_passed`` 1 or 0, the first sync's stack printed).

The model settings are the four ResNet-50 ones below, or with ``--settings plan`` every (backbone, crop, batch,
precision) the paper study's plan trains (what ``dmllab study --profile paper --plan`` lists as not priced).

    python benchmarks/bench_gpu.py                                   # everything (minutes on an H100)
    python benchmarks/bench_gpu.py --only model_step --only embed --settings plan --precisions both
    python benchmarks/bench_gpu.py --only syncs --out /tmp/syncs.csv              # zero host syncs per step?
    python benchmarks/bench_gpu.py --device cpu --smoke --out /tmp/gpu_smoke.csv   # checks the script on a CPU
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
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
PARTS = ("model_step", "embed", "loader", "end_to_end", "evaluator", "quick_run", "quick_workers", "syncs")
FAKE_CUB_PARTS = {"model_step", "embed", "loader", "end_to_end", "syncs"}
# (backbone, transform, batch size, run.amp): the paper's ResNet-50 at ProxyNCA++'s 256 px crops
DEFAULT_SETTINGS = [("resnet50", "proxynca++", b, amp) for b in (32, 192) for amp in ("off", "bf16")]
SMOKE_SETTINGS = [
    ("smallcnn", "smoke", 4, "off")
]  # the smoke profile's network and 32 px crops: seconds on a CPU
TRAIN_CLASSES = 50  # CUB's train split: classes 1-50 (dmllab.data.real.CUB200.class_ranges)


def make_fake_cub(
    root: Path, per_train_class: int, size: tuple[int, int] = (500, 375), seed: int = 0
) -> Path:
    """CUB_200_2011 in its real layout with smooth random JPEGs of about ``size``: ``per_train_class`` images in
    each training class (1-50), 2 in each other class."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    images, labels, boxes = [], [], []
    image_id = 0
    for c in range(1, 201):
        folder = f"{c:03d}.Species_{c}"
        colour = rng.integers(0, 256, 3)
        (root / "images" / folder).mkdir(parents=True, exist_ok=True)
        for k in range(per_train_class if c <= TRAIN_CLASSES else 2):
            image_id += 1
            w, h = size[0], int(size[1] * rng.uniform(0.8, 1.2))
            yy, xx = np.mgrid[0:h, 0:w]
            base = (np.sin(xx / rng.uniform(8, 40)) + np.cos(yy / rng.uniform(8, 40))) * 60
            img = np.clip(base[..., None] + colour + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
            rel = f"{folder}/Species_{c}_{k:04d}_{image_id}.jpg"
            Image.fromarray(img).save(root / "images" / rel, quality=90)
            images.append(f"{image_id} {rel}")
            labels.append(f"{image_id} {c}")
            boxes.append(f"{image_id} {w * 0.1:.1f} {h * 0.1:.1f} {w * 0.8:.1f} {h * 0.8:.1f}")
    (root / "images.txt").write_text("\n".join(images) + "\n")
    (root / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (root / "bounding_boxes.txt").write_text("\n".join(boxes) + "\n")
    (root / "classes.txt").write_text("".join(f"{c} {c:03d}.Species_{c}\n" for c in range(1, 201)))
    (root / "train_test_split.txt").write_text("".join(f"{i} 1\n" for i in range(1, image_id + 1)))
    return root


def plan_settings() -> list[tuple[str, str, int, str]]:
    """Every (backbone, transform, batch, run.amp) the paper study's plan trains on a real dataset."""
    from dmllab.data.real import is_real_dataset
    from dmllab.experiments import registry
    from dmllab.experiments.execution import Execution
    from dmllab.pipeline.plan import make_plan

    plan = make_plan(registry.select(None), "paper", Execution(device="cpu"))
    found = {
        (c.model.backbone.name, c.data.transform, c.data.batch_size, c.run.amp)
        for c in (r.run.config for r in plan.runs)
        if is_real_dataset(c.dataset)
    }
    return sorted(found)


def config(root: Path, device: str, setting: tuple[str, str, int, str], weights: str | None, **data):
    """The ProxyNCA++ CUB paper preset on the fake CUB at ``setting`` (backbone, transform, batch, amp)."""
    from dmllab.training import apply_overrides, presets

    backbone, transform, batch, amp = setting
    overrides = [
        f"data.root={root}",
        "data.dataset.check_counts=false",
        f"model.backbone={backbone}",
        f"data.transform={transform}",
        f"data.batch_size={batch}",
        *(["data.sampler.per_class=4"] if batch % 4 == 0 else ["data.sampler=random"]),
        f"run.amp={amp}",
        f"run.device={device}",
        *(f"data.{k}={v}" for k, v in data.items()),
    ]
    overrides += [f"model.weights_path={weights}"] if weights else ["model.pretrained=false"]
    return apply_overrides(presets.get("proxynca++", "cub", "paper"), overrides)


def paper_config(root: Path, device: str, method: str, weights: str | None):
    """``method``'s CUB paper preset as it is (backbone, batch, crops, precision) on the fake CUB."""
    from dmllab.training import apply_overrides, presets

    overrides = [f"data.root={root}", "data.dataset.check_counts=false", f"run.device={device}"]
    overrides += [f"model.weights_path={weights}"] if weights else ["model.pretrained=false"]
    return apply_overrides(presets.get(method, "cub", "paper"), overrides)


def name(cfg) -> str:
    from dmllab.pipeline.cost import AMP_PRECISION, crop_size, model_setting

    precision = AMP_PRECISION[cfg.run.amp] if cfg.run.device.startswith("cuda") else "fp32"
    return model_setting(
        cfg.model.backbone.name, crop_size(cfg.data.transform), cfg.data.batch_size, precision
    )


class Clock:
    """Wall seconds of a block, the device synchronised before and after."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def __enter__(self) -> Clock:
        self.sync()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.sync()
        self.s = time.perf_counter() - self.t0


def trainer(cfg):
    """A trainer set up for ``cfg``'s first stage at its first schedule epoch (the backbone trains): (trainer, plan,
    epoch)."""
    from dmllab.training import Trainer
    from dmllab.training.protocol import stage_plans

    tr = Trainer(cfg, progress=False)
    plan = stage_plans(cfg)[0]
    tr.setup(plan)
    epoch = plan.warmup_epochs + 1
    tr.apply_schedule(plan, epoch)
    return tr, plan, epoch


def device_batch(tr, crop: int, batch: int):
    """A random training batch ``(images, labels)`` on the trainer's device."""
    import torch

    x = torch.randn(batch, 3, crop, crop, device=tr.device)
    return x, torch.arange(batch, device=tr.device) % TRAIN_CLASSES


def step_rate(tr, plan, epoch: int, x, y, steps: int) -> float:
    """Images/s of ``tr.train_batches`` over ``steps`` copies of the device-resident batch ``(x, y)``: the
    trainer's step without its loader."""
    tr.train_batches(plan, epoch, [(x, y)] * steps)  # warm-up: cuDNN autotuning, allocator
    with Clock(str(tr.device)) as clock:
        tr.train_batches(plan, epoch + 1, [(x, y)] * steps)
    return steps * x.shape[0] / clock.s


def embed_rate(tr, x, steps: int) -> float:
    """Images/s of the evaluation's forward pass (eval mode, no grad, the trainer's autocast) on the batch ``x``."""
    import torch

    if tr.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    model = tr.embedder().eval()
    autocast = dict(dtype=tr.amp_dtype or torch.float32, enabled=tr.amp_dtype is not None)

    def forward(n: int) -> None:
        with torch.no_grad(), torch.autocast(tr.device.type, **autocast):
            for _ in range(n):
                model(x)

    forward(2)
    with Clock(str(tr.device)) as clock:
        forward(steps)
    return steps * x.shape[0] / clock.s


def bench_model(add, cfgs, parts: set[str], steps: int) -> None:
    """``model_step`` and ``embed`` per config."""
    import torch

    for cfg in cfgs:
        tr, plan, epoch = trainer(cfg)
        setting = name(cfg)
        crop, batch, eval_batch = (
            int(setting.split("px")[0].rsplit("_", 1)[1]),
            cfg.data.batch_size,
            cfg.data.eval_batch_size,
        )
        if "model_step" in parts:
            x, y = device_batch(tr, crop, batch)
            add("model_step", setting, "images_per_s", step_rate(tr, plan, epoch, x, y, steps), "img/s")
        if "embed" in parts:
            x = torch.randn(eval_batch, 3, crop, crop, device=tr.device)
            at_eval = setting.replace(f"_b{batch}_", f"_b{eval_batch}_")
            add("embed", at_eval, "images_per_s", embed_rate(tr, x, steps), "img/s")
        del tr
        if cfg.run.device.startswith("cuda"):
            torch.cuda.empty_cache()


def bench_loader(
    add, root: Path, device: str, transform: str, batches: list[int], steps: int, workers_auto: int
) -> None:
    from dmllab.data.loaders import RunData
    from dmllab.training.protocol import stage_plans

    for batch in batches:
        for workers in sorted({1, workers_auto}):
            cfg = config(root, device, ("resnet50", transform, batch, "off"), None, num_workers=workers)
            plan = stage_plans(cfg)[0]
            data = RunData(
                cfg.data, seed=0, device=torch_device(device), channels_last=device.startswith("cuda")
            )
            shape = (cfg.data.batch_size, None)  # the sampler's own per_class
            it = iter(data.train_batches(plan.name, plan.train_split, 1, shape))
            next(it)  # workers started, first batch decoded and on the device
            clock = Clock(device)
            n = 0
            with clock:
                for _ in range(steps):
                    try:
                        images, _ = next(it)
                    except StopIteration:
                        break
                    n += images.shape[0]
            rate = n / clock.s
            add("loader", f"b{batch}_workers{workers}", "images_per_s", rate, "img/s")
            add("loader", f"b{batch}_workers{workers}", "images_per_s_per_worker", rate / workers, "img/s")
            del it
            data.close()


def torch_device(device: str):
    import torch

    return torch.device(device)


def bench_end_to_end(add, cfgs, limit: int = 0) -> None:
    """``end_to_end`` per config: a whole epoch (``limit`` > 0: its first ``limit`` batches, the trainer's
    ``run.fast_dev_run``)."""
    for cfg in cfgs:
        cfg = cfg.replace("run.fast_dev_run", limit) if limit else cfg
        tr, plan, epoch = trainer(cfg)
        tr.train_epoch(plan, epoch)  # warm-up: cuDNN autotuning, workers
        batches = len(tr.data.dataset(plan.train_split, train=True)) // cfg.data.batch_size
        batches = min(batches, limit) if limit else batches
        with Clock(cfg.run.device) as clock:
            tr.train_epoch(plan, epoch + 1)  # the epoch that follows: the loader's iterator goes on
        add("end_to_end", name(cfg), "images_per_s", batches * cfg.data.batch_size / clock.s, "img/s")
        add("end_to_end", name(cfg), "batches_per_epoch", batches, "")
        tr.data.close()
        del tr


def count_syncs(tr, plan, epoch: int, batches, mode: str = "warn") -> tuple[int, list[str]]:
    """Host syncs while ``tr.train_batches(plan, epoch, batches)`` fetches and trains its batches, under
    ``torch.cuda.set_sync_debug_mode(mode)`` (its end-of-epoch read excluded): the count and where the first
    ones happened ("error": the first raises RuntimeError). Off CUDA (``--smoke`` on a CPU) nothing is counted."""
    import torch

    cuda = tr.device.type == "cuda"

    def watched(it):
        if cuda:
            torch.cuda.set_sync_debug_mode(mode)
        try:
            yield from it
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tr.train_batches(plan, epoch, watched(batches))
    syncs = [w for w in seen if "synchroniz" in str(w.message)]
    return len(syncs), [f"{Path(w.filename).name}:{w.lineno}" for w in syncs[:5]]


def report_syncs(add, setting: str, n: int, steps: int, where: list[str]) -> None:
    add("syncs", setting, "host_syncs_per_step", n / max(1, steps), "")
    if where:
        print(f"    first syncs of {setting}: {', '.join(where)}", flush=True)


#: The paper presets whose model step ``syncs`` checks besides the settings: ProxyNCA++ (fp16 with loss scaling),
#: Proxy Synthesis (most of the paper study's runs), Proxy Anchor.
SYNC_METHODS = ("proxynca++", "proxy_synthesis", "proxy_anchor")


def bench_syncs(add, cfgs, root: Path, device: str, profile: str, steps: int, weights: str | None) -> None:
    """``syncs``: the sync-free path's host syncs per step (module docstring; CUDA, else a check of the code)."""
    from dmllab.pipeline.cost import crop_size
    from dmllab.training import apply_overrides, presets
    from dmllab.training.pretrain import prepare

    if profile == "quick":
        cfgs = [*cfgs, *(paper_config(root, device, m, weights) for m in SYNC_METHODS)]
    for cfg in cfgs:  # the model step of each setting, batches already on the device
        tr, plan, epoch = trainer(cfg)
        x, y = device_batch(tr, crop_size(cfg.data.transform), cfg.data.batch_size)
        tr.train_batches(plan, epoch, [(x, y)] * 3)  # warm-up: cuDNN autotuning, optimiser and scaler state
        n, where = count_syncs(tr, plan, epoch + 1, [(x, y)] * steps)
        report_syncs(add, f"{cfg.method}_{name(cfg)}", n, steps, where)
        try:
            count_syncs(tr, plan, epoch + 2, [(x, y)] * steps, mode="error")
            passed = 1
        except RuntimeError:
            traceback.print_exc()
            passed = 0
        add("syncs", f"{cfg.method}_{name(cfg)}", "error_mode_passed", passed, "")
        del tr
    data_cfg = config(root, device, DEFAULT_SETTINGS[-1] if profile == "quick" else SMOKE_SETTINGS[0], weights,
                      num_workers="auto")  # fmt: skip
    quick = apply_overrides(presets.get("proxynca++", "synthetic", profile), [f"run.device={device}"])
    prepare(quick, progress=False)
    for cfg, setting in ((data_cfg, f"{name(data_cfg)}_data_path"), (quick, f"{profile}_run_epoch")):
        tr, plan, epoch = trainer(cfg)  # whole epochs through the data path
        tr.train_epoch(plan, epoch)  # warm-up: workers, caches, cuDNN
        split = plan.train_split
        batches = tr.data.train_batches(plan.name, split, epoch + 1, tr.batch_shape(split), tr.prefix())
        n, where = count_syncs(tr, plan, epoch + 1, batches)
        report_syncs(add, setting, n, batches.total or 1, where)
        tr.data.close()
        del tr


def bench_evaluator(add, device: str, repeats: int, scale: float) -> None:
    import torch

    from dmllab.metrics import recall_at_k, retrieval_metrics

    gen = torch.Generator(device=device).manual_seed(0)

    def data(n, dim, classes):
        n, classes = max(64, int(n * scale)), max(8, int(classes * scale))
        labels = torch.arange(n, device=device) % classes
        centres = torch.randn(classes, dim, device=device, generator=gen)
        return centres[labels] + 3.5 * torch.randn(n, dim, device=device, generator=gen), labels

    def products(q, r, chunk=8192):
        out = torch.empty(min(chunk, len(q)), len(r), device=device)
        for i in range(0, len(q), chunk):
            torch.mm(q[i : i + chunk], r.T, out=out[: len(q[i : i + chunk])])

    def timed(fn) -> float:
        fn()
        with Clock(device) as clock:
            for _ in range(repeats):
                fn()
        return clock.s / repeats

    for n, dim in ((60502, 512), (60502, 2048)):
        x, y = data(n, dim, 11316)
        setting = f"sop_{len(x)}x{dim}"
        t_dml = timed(lambda x=x, y=y: recall_at_k(x, y, (1, 2, 4, 8)))
        t_full = timed(lambda x=x: products(x, x))
        add("evaluator", setting, "dmllab_s", t_dml, "s")
        add("evaluator", setting, "bare_full_products_s", t_full, "s")
        add("evaluator", setting, "dmllab_vs_full_products", t_dml / t_full, "x")
    q, qy = data(14218, 512, 3985)
    g, gy = data(12612, 512, 3985)
    t_dml = timed(lambda: retrieval_metrics(q, qy, gallery=g, gallery_labels=gy, ks=(1, 10, 20, 30)))
    t_full = timed(lambda: products(q, g))
    setting = f"inshop_{len(q)}x{len(g)}x512"
    add("evaluator", setting, "dmllab_s", t_dml, "s")
    add("evaluator", setting, "dmllab_vs_full_products", t_dml / t_full, "x")


QUICK_RUN = """
import json, sys, time
t0 = time.perf_counter()
from dmllab.experiments.execution import Execution
from dmllab.training import presets, apply_overrides
from dmllab.training.store import run
cfg = apply_overrides(presets.get("proxynca++", "synthetic", sys.argv[3]), [f"run.device={sys.argv[1]}"])
r = run(cfg, seed=int(sys.argv[2]), progress=False, force=True)
print("RESULT " + json.dumps({"wall_time_s": r.wall_time_s, "timings": r.extra.get("timings", {})}))
"""


def quick_runs(device: str, seeds: list[int], profile: str) -> tuple[float, list[dict]]:
    """Runs of the ProxyNCA++ ``profile`` preset for ``seeds`` at once, one process each: (wall seconds of all,
    each run's RESULT)."""
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", QUICK_RUN, device, str(s), profile],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for s in seeds
    ]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t0
    results = []
    for p, out in zip(procs, outs):
        line = [x for x in out.splitlines() if x.startswith("RESULT ")]
        results.append(
            json.loads(line[-1][7:]) if p.returncode == 0 and line else {"exit_status": p.returncode}
        )
    return wall, results


def bench_quick_run(add, device: str, seeds: int, profile: str) -> None:
    for seed in range(seeds):
        wall, (result,) = quick_runs(device, [seed], profile)
        setting = f"proxynca++_seed{seed}_{'cold' if seed == 0 else 'warm'}"
        add("quick_run", setting, "process_wall_s", wall, "s")
        if "exit_status" in result:
            add("quick_run", setting, "exit_status", result["exit_status"], "")
            continue
        add("quick_run", setting, "wall_time_s", result["wall_time_s"], "s")
        for phase, s in sorted(result["timings"].items()):
            add("quick_run", setting, f"phase_{phase}_s", s, "s")


def bench_quick_workers(add, device: str, workers: list[int], profile: str) -> None:
    quick_runs(device, [0], profile)  # caches built
    for w in workers:
        wall, results = quick_runs(device, [100 + i for i in range(w)], profile)
        failed = [r for r in results if "exit_status" in r]
        if failed:
            add("quick_workers", f"workers{w}", "failed_runs", len(failed), "")
            continue
        add("quick_workers", f"workers{w}", "s_per_run", wall / w, "s")
        add(
            "quick_workers",
            f"workers{w}",
            "mean_run_wall_time_s",
            sum(r["wall_time_s"] for r in results) / w,
            "s",
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=PARTS, action="append", help="run only these parts (repeatable)")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --smoke: checks the script)")
    p.add_argument(
        "--smoke", action="store_true", help="tiny sizes: checks that every part runs, measures nothing"
    )
    p.add_argument(
        "--settings", choices=("default", "plan"), default="default", help="model settings (docstring)"
    )
    p.add_argument(
        "--precisions",
        choices=("settings", "both"),
        default="settings",
        help="settings: each setting's own run.amp; both: every setting in fp32 and in bf16",
    )
    p.add_argument(
        "--steps", type=int, default=50, help="timed batches per model, loader and epoch measurement"
    )
    p.add_argument("--repeats", type=int, default=3, help="timed evaluator runs (mean)")
    p.add_argument("--quick-seeds", type=int, default=3, help="quick_run: seeds (the first one cold)")
    p.add_argument("--gpu-workers", default="1,2,4,8", help="quick_workers: worker counts, comma-separated")
    p.add_argument("--weights", default=None, help="ResNet-50 ImageNet state-dict file (model.weights_path)")
    p.add_argument("--out", type=Path, default=None, help=f"CSV to write (default on CUDA: {DEFAULT_OUT})")
    p.add_argument("--workdir", type=Path, default=None, help="where the fake CUB goes (default: a temp dir)")
    args = p.parse_args(argv)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "bench_gpu.py: no CUDA GPU is available here (torch.cuda.is_available() is False); run it on a machine "
            "with an NVIDIA GPU, or check the script with --device cpu --smoke --out /tmp/gpu_smoke.csv",
            file=sys.stderr,
        )
        return 2
    if args.out is None and not args.device.startswith("cuda"):
        print(
            "bench_gpu.py: --device cpu writes no calibration rows: pass --out (a scratch CSV)",
            file=sys.stderr,
        )
        return 2
    out = args.out or DEFAULT_OUT
    parts = args.only or list(PARTS)
    device_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = "python benchmarks/bench_gpu.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    rows: list[dict] = []

    def add(bench, setting, metric, value, unit):
        print(f"  {bench} {setting} {metric}: {value:.4f} {unit}", flush=True)
        rows.append(
            dict(
                benchmark=bench,
                setting=setting,
                metric=metric,
                value=f"{value:.4f}",
                unit=unit,
                device=device_name,
                torch_version=torch.__version__,
                command=command.strip(),
                timestamp=stamp,
            )
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", newline="") as fh:  # after every row: an interrupted run keeps its numbers
            w = csv.DictWriter(fh, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(rows)

    settings = (
        SMOKE_SETTINGS if args.smoke else DEFAULT_SETTINGS if args.settings == "default" else plan_settings()
    )
    if args.precisions == "both":
        settings = sorted({(b, t, batch, amp) for b, t, batch, _ in settings for amp in ("off", "bf16")})
    steps = 3 if args.smoke else args.steps
    profile = "smoke" if args.smoke else "quick"  # of the quick_run and quick_workers parts
    largest = max(s[2] for s in settings)
    per_class = 2 + math.ceil(steps * largest / TRAIN_CLASSES)  # epochs of at least `steps` batches
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        os.environ.setdefault("DMLLAB_RESULTS", str(work / "results"))
        os.environ.setdefault("DMLLAB_CACHE", str(work / "cache"))
        root = work / "CUB_200_2011"
        if FAKE_CUB_PARTS & set(parts) and not (root / "images.txt").is_file():
            t0 = time.perf_counter()
            make_fake_cub(root, per_class, size=(64, 48) if args.smoke else (500, 375))
            print(
                f"fake CUB ({TRAIN_CLASSES * per_class} training images) in {time.perf_counter() - t0:.1f} s"
            )
        print(f"device: {device_name}", flush=True)
        cfgs = [config(root, args.device, s, args.weights) for s in settings]
        if {"model_step", "embed"} & set(parts):
            bench_model(add, cfgs, set(parts), steps)
        if "loader" in parts:
            from dmllab.data.loaders import resolve_num_workers

            auto = resolve_num_workers("auto")
            transform = settings[0][1]  # the paper's ProxyNCA++ crops (the smoke profile's with --smoke)
            bench_loader(
                add, root, args.device, transform, sorted({s[2] for s in settings}), steps, max(1, auto)
            )
        if "end_to_end" in parts:
            cfgs = [config(root, args.device, s, args.weights, num_workers="auto") for s in settings]
            bench_end_to_end(add, cfgs, steps if args.smoke else 0)
        if "evaluator" in parts:
            bench_evaluator(add, args.device, 1 if args.smoke else args.repeats, 0.01 if args.smoke else 1.0)
        if "quick_run" in parts:
            bench_quick_run(add, args.device, 2 if args.smoke else args.quick_seeds, profile)
        if "quick_workers" in parts:
            counts = [1, 2] if args.smoke else [int(w) for w in args.gpu_workers.split(",")]
            bench_quick_workers(add, args.device, counts, profile)
        if "syncs" in parts and (args.device.startswith("cuda") or args.smoke):
            bench_syncs(add, cfgs, root, args.device, profile, steps, args.weights)
        elif "syncs" in parts:
            print("syncs: CUDA only (torch.cuda.set_sync_debug_mode); skipped", flush=True)
    print(f"wrote {len(rows)} rows to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
