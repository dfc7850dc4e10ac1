"""A run killed with SIGKILL mid-way resumes from its last epoch checkpoint and ends like an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from dmllab.training import RunStore, apply_overrides, run

SCRIPT = """
import os, signal, sys
from dmllab.training import RunStore, apply_overrides, presets, run

class Kill:
    def on_epoch_end(self, trainer, epoch, metrics):
        if trainer.state.plan.name == "stage1" and epoch == 2:
            os.kill(os.getpid(), signal.SIGKILL)

class Count:
    def on_epoch_end(self, trainer, epoch, metrics):
        print("EPOCH", trainer.state.plan.name, epoch, flush=True)

cfg = apply_overrides(
    presets.get("proxynca++", "synthetic", "smoke"), ["schedule.epochs=3", "run.checkpoint_minutes=0"]
)
hooks = (Kill(),) if sys.argv[1] == "kill" else (Count(),)
r = run(cfg, seed=5, store=RunStore(sys.argv[2]), hooks=hooks, progress=False)
print("R@1", repr(r.metrics["R@1"]))
"""


def test_sigkill_then_restart_resumes(smoke_cfg, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    store = str(tmp_path / "killed")
    killed = subprocess.run(
        [sys.executable, "-c", SCRIPT, "kill", store], env=env, capture_output=True, text=True
    )
    assert killed.returncode == -signal.SIGKILL
    again = subprocess.run(
        [sys.executable, "-c", SCRIPT, "count", store], env=env, capture_output=True, text=True
    )
    assert again.returncode == 0, again.stderr
    epochs = [line.split()[1:] for line in again.stdout.splitlines() if line.startswith("EPOCH")]
    assert epochs[0] == ["stage1", "3"]  # resumed after the last completed epoch
    resumed = float(again.stdout.split("R@1")[-1])
    cfg = apply_overrides(smoke_cfg, ["schedule.epochs=3"])
    clean = run(cfg, seed=5, store=RunStore(tmp_path / "clean"), progress=False)
    assert resumed == clean.metrics["R@1"]
