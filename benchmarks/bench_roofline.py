"""The quick profile's compute floor: FLOPs of a quick ProxyNCA++ run, the machine's measured rates, and how far
the quick profile's cost targets (one run <= 8 s, `make study` from empty <= 30 min on 2 cores) are from what the
current recipe can reach on this machine at any software speed-up.

Measured on the trainer's own modules (quick ProxyNCA++ config: the trainable SmallCNN blocks 5-6 on cached
block-4 features, max pooling + LayerNorm head, ProxyNCA++ loss, Adam with the three parameter groups):

* FLOPs per training step (forward + backward, backbone trainable) and per warm-up step (backbone frozen),
  counted by ``torch.utils.flop_counter.FlopCounterMode`` (convolutions and matrix products; BatchNorm, ReLU,
  pooling and the optimiser's element-wise work are not counted, so the FLOP rates below are lower bounds);
* the wall time of a step on one torch thread (the study runs 2 jobs of 1 thread each), in the trainer's
  memory format (NCHW) and in channels_last, alternating repetitions, median;
* the machine's single-thread sgemm rate (2048^3 ``torch.mm``, best of 5): the practical ceiling of a
  compute-bound step.

From these and the measured study (``results/benchmarks/study.csv``, ``bench_study.py``) it derives the FLOPs
of one run, the share of the study's training time that this compute explains, and the factor by which a
run's FLOPs must shrink to meet each target even if every step ran at the sgemm ceiling.

    .venv/bin/python benchmarks/bench_roofline.py    # -> results/benchmarks/roofline.csv (about 20 s)
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchutil import write_csv  # noqa: E402

#: The quick profile's cost targets (seconds): one run, and `make study` from empty on 2 cores.
RUN_TARGET_S = 8.0
STUDY_TARGET_S = 30 * 60.0


def _setup(threads: int):
    """The quick ProxyNCA++ trainer set up for its single stage: (trainer, embedder, plan, steps per epoch)."""
    from dmllab.data import ClassBalancedSampler
    from dmllab.training import StagePlan, Trainer, apply_overrides, presets

    torch.set_num_threads(threads)
    cfg = apply_overrides(presets.get("proxynca++", "synthetic", "quick"), ["model.pretrained=false"])
    trainer = Trainer(cfg, progress=False)
    plan = StagePlan(
        "single", cfg.data.train_split, None, cfg.schedule.epochs, cfg.schedule.warmup_epochs, "none"
    )
    trainer.setup(plan)
    labels = list(trainer.data.dataset(cfg.data.train_split, train=True).labels)
    steps = len(ClassBalancedSampler(labels, cfg.data.batch_size, cfg.data.per_class, seed=0))
    return trainer, trainer.embedder(), plan, steps


def _batch(trainer, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch shaped like the cached block-4 features of the quick profile, 8 classes x 4."""
    n = trainer.cfg.model.frozen_blocks
    probe = torch.zeros(1, 3, 56, 56)
    with torch.no_grad():
        c, h, w = trainer.model.backbone.forward_blocks(probe, 0, n).shape[1:]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, c, h, w, generator=g).relu()
    y = torch.randperm(trainer.loss.num_classes, generator=g)[: batch // 4].repeat_interleave(4)
    return x, y


def _step(trainer, embedder, x, y) -> None:
    loss = trainer.loss(embedder(x), y)
    trainer.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    trainer.optimizer.step()


def _flops(trainer, embedder, x, y) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        loss = trainer.loss(embedder(x), y)
        loss.backward()
    trainer.optimizer.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def _set_backbone_trainable(trainer, trainable: bool) -> None:
    for p in trainer.model.backbone.parameters():
        p.requires_grad_(trainable)
    trainer._freeze_prefix()


def _conv_share(trainer, embedder, x, y, steps: int = 20) -> tuple[float, float]:
    """(share of a step's CPU time in the convolutions' forward + backward, their seconds per step), by
    ``torch.profiler`` (self time of ``aten::mkldnn_convolution`` and ``aten::convolution_backward``)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            _step(trainer, embedder, x, y)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    conv = sum(
        e.self_cpu_time_total
        for e in events
        if e.key in ("aten::mkldnn_convolution", "aten::convolution_backward")
    )
    return conv / total, conv / steps / 1e6


def _sgemm_gflops(n: int = 2048, reps: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(reps))
    return 2 * n**3 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _study_row(path: Path) -> dict[str, float] | None:
    if not path.is_file():
        return None
    with path.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["pass"] == "from_empty"]
    return (
        {k: float(v) for k, v in rows[-1].items() if k.endswith("_s") or k in ("runs", "trained", "jobs")}
        if rows
        else None
    )


def _import_floor(path: Path) -> float | None:
    """Sum of the ``floor`` rows of quick.csv that a fresh quick ``dmllab train`` process still pays (torch,
    torch._dynamo via the first optimiser, scikit-learn's KMeans; torchvision is no longer imported)."""
    if not path.is_file():
        return None
    with path.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["setting"] == "floor"]
    paid = [float(r["wall_s"]) for r in rows if r["overrides"] != "import torchvision"]
    return sum(paid) if paid else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps per timed repetition")
    parser.add_argument("--reps", type=int, default=7, help="repetitions per memory format (alternating)")
    parser.add_argument("--out", default=None, help="CSV path (default results/benchmarks/roofline.csv)")
    args = parser.parse_args(argv)
    from dmllab.paths import results_dir

    bench_dir = results_dir() / "benchmarks"
    trainer, embedder, plan, steps_per_epoch = _setup(threads=1)
    cfg = trainer.cfg
    x, y = _batch(trainer, cfg.data.batch_size)

    _set_backbone_trainable(trainer, False)
    flops_warm = _flops(trainer, embedder, x, y)
    _set_backbone_trainable(trainer, True)
    flops_train = _flops(trainer, embedder, x, y)
    warm_epochs, epochs = cfg.schedule.warmup_epochs, cfg.schedule.epochs
    run_flops = steps_per_epoch * (warm_epochs * flops_warm + epochs * flops_train)

    # step time, 1 thread: NCHW (the trainer's) vs channels_last, alternating
    times: dict[str, list[float]] = {"nchw": [], "channels_last": []}
    xs = {"nchw": x, "channels_last": x.contiguous(memory_format=torch.channels_last)}
    for _ in range(3):
        _step(trainer, embedder, x, y)
    for _ in range(args.reps):
        for fmt in times:
            fmt_cl = fmt == "channels_last"
            trainer.model.to(memory_format=torch.channels_last if fmt_cl else torch.contiguous_format)
            _step(trainer, embedder, xs[fmt], y)  # first step after the switch re-lays out the weights
            t0 = time.perf_counter()
            for _ in range(args.steps):
                _step(trainer, embedder, xs[fmt], y)
            times[fmt].append((time.perf_counter() - t0) / args.steps)
    trainer.model.to(memory_format=torch.contiguous_format)
    step_s = {fmt: statistics.median(v) for fmt, v in times.items()}
    sgemm = _sgemm_gflops()
    conv_share, conv_s = _conv_share(trainer, embedder, x, y)

    rows: list[dict] = []

    def add(measure: str, value: float | int, unit: str, note: str = "") -> None:
        rows.append({"measure": measure, "value": value, "unit": unit, "note": note})

    add("flops_per_train_step", flops_train, "FLOP", "forward+backward, batch 32, conv+matmul only")
    add("flops_per_warmup_step", flops_warm, "FLOP", "forward + head/proxy gradients, backbone frozen")
    add(
        "steps_per_epoch",
        steps_per_epoch,
        "steps",
        f"{len(trainer.data.dataset(cfg.data.train_split, train=True))} "
        f"{cfg.data.train_split} images, batch {cfg.data.batch_size}",
    )
    add("epochs", warm_epochs + epochs, "epochs", f"{warm_epochs} warm-up + {epochs}")
    add("flops_per_run", float(run_flops), "FLOP", "training only")
    add("step_s_nchw", step_s["nchw"], "s", "1 thread, median")
    add("step_s_channels_last", step_s["channels_last"], "s", "1 thread, median")
    add(
        "channels_last_speedup",
        step_s["nchw"] / step_s["channels_last"],
        "x",
        "not adopted (docs/quick-profile.md)",
    )
    add("step_gflops_nchw", flops_train / step_s["nchw"] / 1e9, "GFLOP/s", "counted FLOPs / step time")
    add("conv_share_of_step", conv_share, "ratio", "torch.profiler self time, conv forward+backward")
    add(
        "conv_gflops",
        flops_train / conv_s / 1e9,
        "GFLOP/s",
        "counted FLOPs / conv time (all counted FLOPs are conv or matmul; the matmuls are < 1%)",
    )
    add("sgemm_gflops_1thread", sgemm, "GFLOP/s", "2048^3 torch.mm, best of 5")
    add("step_efficiency_vs_sgemm", flops_train / step_s["nchw"] / 1e9 / sgemm, "ratio")
    run_train_s = steps_per_epoch * (warm_epochs + epochs) * step_s["nchw"]
    add("run_train_s_estimate_1thread", run_train_s, "s", "steps x step time (warm-up steps counted as full)")
    run_at_ceiling_s = run_flops / (sgemm * 1e9)
    add("run_train_s_at_sgemm_1thread", run_at_ceiling_s, "s", "run FLOPs at the sgemm rate")

    floor = _import_floor(bench_dir / "quick.csv")
    if floor is not None:
        add("run_import_floor_s", floor, "s", "quick.csv floor rows a fresh process pays")
        budget = RUN_TARGET_S - floor
        # the per-run target is for a 2-thread process: both cores at the sgemm rate
        add(
            "run_target_flop_budget",
            budget * 2 * sgemm * 1e9,
            "FLOP",
            f"({RUN_TARGET_S} s - floor) x 2 threads at sgemm",
        )
        add(
            "run_target_reduction_needed",
            run_flops / (budget * 2 * sgemm * 1e9),
            "x",
            "FLOP reduction of a run for <= 8 s even at the sgemm rate, evaluation ignored",
        )
    study = _study_row(bench_dir / "study.csv")
    if study is not None:
        jobs, runs = study["jobs"], study["runs"]
        other = study["wall_s"] - study["train_s"]
        add(
            "study_train_s_measured",
            study["train_s"],
            "s",
            f"study.csv from_empty, {int(runs)} runs, {int(jobs)} jobs",
        )
        explained = runs * run_train_s / jobs
        add(
            "study_train_share_explained",
            explained / study["train_s"],
            "ratio",
            "runs x steps x step time / jobs over the measured training phase (warm-up steps as full; no evaluation, set-up)",
        )
        add("study_other_phases_s", other, "s", "plan + notebooks + plots + report")
        budget = STUDY_TARGET_S - other
        add("study_train_budget_s", budget, "s", "30 min minus the other phases")
        at_ceiling = runs * run_at_ceiling_s / jobs
        add("study_train_s_at_sgemm", at_ceiling, "s", "every run's FLOPs at the sgemm rate on both cores")
        add(
            "study_reduction_needed_at_sgemm",
            at_ceiling / budget,
            "x",
            "FLOP reduction per run even at the sgemm rate",
        )
        add("study_reduction_needed_measured", study["train_s"] / budget, "x", "at the measured per-run time")

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for r in rows:
        r.update(timestamp=stamp, torch_version=torch.__version__, threads=1)
        v = r["value"]
        print(f"{r['measure']:<34} {v:>14.4g} {r['unit']:<8} {r['note']}")
    out = write_csv(Path(args.out) if args.out else bench_dir / "roofline.csv", rows)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
