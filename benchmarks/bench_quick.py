"""Quick-profile run time and signal: the quick ProxyNCA++ preset (``dmllab train --method proxynca++ --dataset
synthetic --profile quick``) per setting and seed, each run in a fresh process with a fresh run store, settings
alternating within each seed so that they share the machine's load (2 shared CPU cores: compare ratios).

Settings (config overrides on the quick preset):

* ``before``: the full fine-tuning recipe that the quick preset replaced (the whole SmallCNN at trunk lr 0.1, PIL
  transforms per image, ProxyNCA++'s two-stage protocol: stage 1 on ``train`` with validation and the plateau rule,
  stage 2 on ``trainval``);
* ``after``: the quick preset as it is (in-memory tensor data, first 4 blocks frozen and cached for 4 augmented
  views, trunk lr 1.0, one stage on ``trainval``; chosen on validation by ``benchmarks/select_quick.py``);
* ``native``: ``after`` with ``DMLLAB_CPU_ISA=native``: torch's CPU kernels as the machine picks them instead of
  pinned to AVX2 (dmllab.numerics): what the pin costs on this CPU (nothing on an AVX2-only one). Its images,
  pre-trained weights and feature caches are its own (built natively, in the cache's ``native/`` folder).

Per run: wall time of the process (start-up = interpreter + imports until the run starts), the phases the
trainer records (setup incl. model build, data, forward/backward/update, per-epoch validation, test evaluation,
checkpointing, feature-cache build), best epoch, test R@1, and the pre-trained-only network's test R@1 (the
preset's network before any metric learning, same seed and CPU kernels). One-off caches shared by all runs (the
generated images, the pre-trained SmallCNN, the feature cache) are built first and timed in ``oneoff`` rows. Every
row names the CPU (``cpu``) and the kernels that torch ran (``cpu_capability``).

``floor`` rows: the imports a fresh ``dmllab train`` process cannot avoid, each timed in fresh interpreters
(median of 3, the interpreter's own start subtracted): torch; torch._dynamo, which the first ``torch.optim``
optimiser imports (torch's ``_disable_dynamo`` wrapper on ``Optimizer.__init__``); scikit-learn's KMeans and
NMI (the quick profile's NMI); torchvision (no longer imported by a quick run on cached features).

    .venv/bin/python benchmarks/bench_quick.py --seeds 5 --before-seeds 2 --settings before,after,native
    .venv/bin/python benchmarks/bench_quick.py --seeds 1 --settings after               # a subset
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import child_result, machine, write_csv

SETTINGS: dict[str, list[str]] = {
    "before": [
        "data.in_memory=false",
        "model.frozen_blocks=0",
        "data.feature_views=0",
        "optim.lr=0.1",
        "run.two_stage=true",
        "data.train_split=train",
        "schedule.scheduler=plateau",
    ],
    "after": [],
    "native": [],
}
# The environment of a setting's processes, on top of this one's.
SETTING_ENV: dict[str, dict[str, str]] = {"native": {"DMLLAB_CPU_ISA": "native"}}

_RUN = r"""
import json, sys, time
t0 = time.perf_counter()
from dmllab.training import apply_overrides, presets
from dmllab.training.store import RunStore, run
cfg = apply_overrides(presets.get("proxynca++", "synthetic", "quick"), json.loads(sys.argv[1]))
t1 = time.perf_counter()
r = run(cfg, seed=int(sys.argv[2]), store=RunStore(), progress=False, force=True)
import torch
print("RESULT " + json.dumps({"import_s": t1 - t0, "run_s": time.perf_counter() - t1, "metrics": r.metrics,
      "best_epoch": r.best_epoch, "timings": r.extra.get("timings", {}),
      "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads()}))
"""
# The pre-trained-only network's test R@1 (building the images and pre-training the SmallCNN if missing).
_PRETRAINED = r"""
import json, sys
from dmllab.experiments.kit import evaluate_network
from dmllab.training import apply_overrides, presets
from dmllab.training.pretrain import prepare
cfg = apply_overrides(presets.get("proxynca++", "synthetic", "quick"), json.loads(sys.argv[1]))
prepare(cfg, progress=False)  # the pre-trained SmallCNN, trained here if missing (building a model never does)
print("RESULT " + json.dumps(evaluate_network(cfg, seed=int(sys.argv[2]))["R@1"]))
"""
# The frozen-prefix feature caches of a setting, timed.
_FEATURES = r"""
import json, sys, time
import torch
from dmllab.training import Trainer, apply_overrides, presets
from dmllab.training.protocol import stage_plans
cfg = apply_overrides(presets.get("proxynca++", "synthetic", "quick"), json.loads(sys.argv[1]))
t0 = time.perf_counter()
trainer = Trainer(cfg, progress=False, seed=0)
trainer.setup(stage_plans(cfg)[0])
d = cfg.data
splits = [(d.train_split, True), (d.test_split, False)]
if cfg.run.two_stage:
    splits += [(d.trainval_split, True), (d.val_split, False)]
for split, train in splits:
    trainer.data.source(split, train=train, prefix=trainer.prefix())
print("RESULT " + json.dumps({"wall_s": time.perf_counter() - t0, "cache_build_s": trainer.timings["cache_build"],
      "torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}))
"""

FIELDS = [
    "setting",
    "seed",
    "wall_s",
    "startup_s",
    "setup_s",
    "data_s",
    "step_s",
    "eval_s",
    "test_s",
    "checkpoint_s",
    "cache_build_s",
    "other_s",
    "best_epoch",
    "test_R@1",
    "pretrained_R@1",
    "overrides",
    "torch_threads",
    "cpu_capability",
    "cpu",
]


def _child(code: str, name: str, *args: str, results: str | None = None) -> tuple[dict, float]:
    """Run ``code`` in a fresh process with setting ``name``'s environment; its RESULT and the process's wall."""
    env = {**os.environ, **SETTING_ENV.get(name, {})}
    if results is not None:
        env["DMLLAB_RESULTS"] = results
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{name} ({' '.join(args)}) failed:\n{out.stderr[-3000:]}")
    return child_result(out.stdout), wall


def _one_run(name: str, seed: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-quick-") as res:  # a fresh run store per run
        r, wall = _child(_RUN, name, json.dumps(SETTINGS[name]), str(seed), results=res)
    return {**r, "wall_s": wall}


def _pretrained_r1(name: str, seed: int) -> float:
    return _child(_PRETRAINED, name, json.dumps(SETTINGS[name]), str(seed))[0]


FLOOR: dict[str, str] = {
    "interpreter": "pass",
    "import torch": "import torch",
    "torch.optim first optimiser (imports torch._dynamo)": "import torch; torch.optim.Adam([torch.zeros(1, requires_grad=True)])",
    "import sklearn KMeans + NMI": "import sklearn.cluster, sklearn.metrics",
    "import torchvision": "import torchvision",
}


def _floor(repeats: int = 3) -> list[dict]:
    """Wall time of each :data:`FLOOR` statement in fresh interpreters (median of ``repeats``); every row but
    the interpreter's subtracts the wall of what it builds on (the interpreter; torch for the optimiser and
    torchvision), so the rows add up to about a fresh process's import floor (numpy counts in torch's and
    scikit-learn's rows)."""

    def median_wall(code: str) -> float:
        walls = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
            walls.append(time.perf_counter() - t0)
        return statistics.median(walls)

    walls = {name: median_wall(code) for name, code in FLOOR.items()}
    base = {
        "interpreter": 0.0,
        "import torch": walls["interpreter"],
        "torch.optim first optimiser (imports torch._dynamo)": walls["import torch"],
        "import sklearn KMeans + NMI": walls["interpreter"],
        "import torchvision": walls["import torch"],  # torchvision imports torch
    }
    return [{"setting": "floor", "seed": "", "wall_s": walls[n] - base[n], "overrides": n} for n in FLOOR]


def _oneoff(settings: list[str]) -> list[dict]:
    """Build the shared caches once (images, pre-trained weights, feature caches), each in a fresh process with
    its setting's environment, and time them (a process's wall, its imports included)."""
    from dmllab.training import apply_overrides, presets

    rows = []
    for env_name in dict.fromkeys("native" if n in SETTING_ENV else "pinned" for n in settings):
        name = next(n for n in settings if ("native" if n in SETTING_ENV else "pinned") == env_name)
        wall = _child(_PRETRAINED, name, json.dumps([]), "0")[1]  # generates the images, pre-trains SmallCNN
        rows.append(
            {"setting": "oneoff", "seed": "", "wall_s": wall, "overrides": f"images+weights ({env_name})"}
        )
    for name in settings:
        cfg = apply_overrides(presets.get("proxynca++", "synthetic", "quick"), SETTINGS[name])
        if not cfg.data.feature_views:
            continue
        r = _child(_FEATURES, name, json.dumps(SETTINGS[name]))[0]
        rows.append({"setting": "oneoff", "seed": "", **r, "overrides": f"feature cache for {name}"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--settings", default="before,after", help=f"comma list of {', '.join(SETTINGS)}")
    ap.add_argument(
        "--before-seeds",
        type=int,
        default=None,
        help="seeds of the slow 'before' setting (default: --seeds); its seeds are the first ones",
    )
    ap.add_argument(
        "--out", default=str(Path(__file__).resolve().parent.parent / "results/benchmarks/quick.csv")
    )
    args = ap.parse_args()
    names = args.settings.split(",")
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        ap.error(f"unknown setting(s) {unknown}; valid: {', '.join(SETTINGS)}")
    rows = _floor()
    for r in rows:
        print(f"floor  {r['overrides']}: {r['wall_s']:.2f} s", flush=True)
    rows += _oneoff(names)
    for seed in range(args.seeds):
        for name in names:
            if name == "before" and args.before_seeds is not None and seed >= args.before_seeds:
                continue
            pre = _pretrained_r1(name, seed)
            r = _one_run(name, seed)
            t = r["timings"]
            known = sum(t.get(k, 0.0) for k in ("setup", "data", "step", "eval", "test", "checkpoint"))
            row = {
                "setting": name,
                "seed": seed,
                "wall_s": r["wall_s"],
                "startup_s": r["wall_s"] - r["run_s"],
                **{
                    f"{k}_s": t.get(k, 0.0)
                    for k in ("setup", "data", "step", "eval", "test", "checkpoint", "cache_build")
                },
                "other_s": r["run_s"] - known,
                "best_epoch": r["best_epoch"],
                "test_R@1": r["metrics"]["R@1"],
                "pretrained_R@1": pre,
                "overrides": " ".join(
                    SETTINGS[name] + [f"{k}={v}" for k, v in SETTING_ENV.get(name, {}).items()]
                ),
                "torch_threads": r["torch_threads"],
                "cpu_capability": r["cpu_capability"],
            }
            rows.append(row)
            print(
                f"{name:7s} seed {seed}: wall {row['wall_s']:.1f} s, test R@1 {100 * row['test_R@1']:.2f} "
                f"(pre-trained only {100 * pre:.2f})",
                flush=True,
            )
    cpu = machine()
    out = write_csv(args.out, [{**r, "cpu": cpu} for r in rows], FIELDS)
    print(f"\nwrote {out}")
    for name in names:
        rs = [r for r in rows if r["setting"] == name]
        r1 = [100 * r["test_R@1"] for r in rs]
        gain = [100 * (r["test_R@1"] - r["pretrained_R@1"]) for r in rs]
        sd = statistics.stdev(r1) if len(r1) > 1 else float("nan")
        print(
            f"{name:7s} median wall {statistics.median(r['wall_s'] for r in rs):6.1f} s | test R@1 mean "
            f"{statistics.mean(r1):.2f} sd {sd:.2f} | minus pre-trained-only {statistics.mean(gain):.2f}"
        )


if __name__ == "__main__":
    main()
