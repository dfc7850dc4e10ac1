"""The trainer on the in-memory data path and with cached frozen-block features (smoke profile)."""

from __future__ import annotations

import math

import pytest
import torch

from dmllab.training.protocol import run_protocol


@pytest.mark.parametrize(
    "overrides",
    [
        {"data.in_memory": True},
        {"data.in_memory": True, "model.frozen_blocks": 4, "data.feature_views": 2},
    ],
)
def test_smoke_run_in_memory(smoke_cfg, overrides):
    cfg = smoke_cfg.replace("schedule.epochs", 1)
    for k, v in overrides.items():
        cfg = cfg.replace(k, v)
    r = run_protocol(cfg, seed=0, progress=False)
    assert math.isfinite(r.metrics["R@1"]) and 0.0 <= r.metrics["R@1"] <= 1.0
    t = r.extra["timings"]
    assert t["step"] > 0 and t["data"] > 0 and t["test"] > 0


def test_frozen_blocks_do_not_change(smoke_cfg):
    from dmllab.training.protocol import stage_plans
    from dmllab.training.trainer import Trainer

    cfg = smoke_cfg.replace("data.in_memory", True).replace("model.frozen_blocks", 3)
    cfg = (
        cfg.replace("data.feature_views", 2)
        .replace("schedule.warmup_epochs", 1)
        .replace("schedule.epochs", 1)
    )
    tr = Trainer(cfg, progress=False, seed=0)
    tr.setup(stage_plans(cfg)[0])
    before = {k: v.clone() for k, v in tr.model.backbone.state_dict().items()}
    tr.fit()
    after = tr.model.backbone.state_dict()
    frozen = ("stage1.", "stage2.")
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith(frozen))  # BN stats too
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("stage4.0.weight"))


def test_feature_views_need_frozen_blocks(smoke_cfg):
    cfg = smoke_cfg.replace("data.in_memory", True).replace("data.feature_views", 2)
    with pytest.raises(ValueError, match="frozen_blocks"):
        run_protocol(cfg, seed=0, progress=False)


# The quick profile's code path (in-memory images, 4 frozen blocks, cached views) at smoke scale, for
# every method family whose training step does something of its own: heating (alpha and lr change at an epoch),
# Proxy Synthesis, manifold mixup (mixes the trunk's output), the classifier losses, the pair losses.
QUICK_PATH = {"data.in_memory": True, "model.frozen_blocks": 4, "data.feature_views": 2}


@pytest.mark.parametrize(
    "method",
    [
        "proxynca++",
        "heated_softmax:HLN",
        "proxy_synthesis",
        "proxy_anchor",
        "normsoftmax",
        "multi_similarity",
    ],
)
def test_every_method_family_trains_on_the_quick_path(method):
    from dmllab.training import presets

    options = {"heating": "in_run"} if method.startswith("heated_softmax") else {}  # heating inside the run
    cfg = presets.get(method, "synthetic", "smoke", **options)
    for k, v in QUICK_PATH.items():
        cfg = cfg.replace(k, v)
    r = run_protocol(cfg, seed=0, progress=False)
    assert math.isfinite(r.metrics["R@1"]) and 0.0 <= r.metrics["R@1"] <= 1.0


def test_mixup_on_the_quick_path():
    """Manifold mixup mixes the trunk's output (the cache is fine); input mixup mixes images, so the config
    with cached features is rejected and runs with the frozen prefix on the mixed images instead."""
    import dataclasses

    from dmllab.spec import Spec
    from dmllab.training import apply_overrides, presets
    from dmllab.training.config import ConfigValueError
    from dmllab.training.presets.proxy_synthesis import without_synthesis

    cfg = without_synthesis(presets.get("proxy_synthesis", "synthetic", "smoke"))
    for k, v in QUICK_PATH.items():
        cfg = cfg.replace(k, v)

    def mixed(name):
        return dataclasses.replace(cfg, loss=Spec(name, {"alpha": 0.5}, wraps=cfg.loss))

    r = run_protocol(mixed("manifold_mixup"), seed=0, progress=False)
    assert math.isfinite(r.metrics["R@1"])
    with pytest.raises(ConfigValueError, match="input_mixup"):
        apply_overrides(mixed("input_mixup"), [f"data.feature_views={QUICK_PATH['data.feature_views']}"])
    r = run_protocol(mixed("input_mixup").replace("data.feature_views", 0), seed=0, progress=False)
    assert math.isfinite(r.metrics["R@1"])


def test_cached_feature_run_never_imports_torchvision(smoke_cfg):
    """A run on cached frozen-block features (the quick path once its cache exists) neither builds its per-image
    transform nor imports torchvision for the provenance; the recorded
    version is still torchvision's full version string. The cache is built here first (its augmentation uses
    torchvision's roi_align); the run is checked in a fresh interpreter, since this session imports torchvision."""
    import json
    import os
    import subprocess
    import sys

    overrides = {
        "schedule.epochs": 1,
        "data.in_memory": True,
        "model.frozen_blocks": 4,
        "data.feature_views": 2,
    }
    cfg = smoke_cfg
    for k, v in overrides.items():
        cfg = cfg.replace(k, v)
    from dmllab.training.config import run_threads

    with run_threads(cfg):  # the feature cache of the run's thread count, as the store trains it
        run_protocol(cfg, seed=0, progress=False)
    code = (
        "import json, sys\n"
        "from dmllab.training import presets\n"
        "from dmllab.training.store import RunStore, run\n"
        "cfg = presets.get('proxynca++', 'synthetic', 'smoke')\n"
        f"for k, v in {overrides!r}.items():\n"
        "    cfg = cfg.replace(k, v)\n"
        "store = RunStore()\n"
        "run(cfg, seed=0, store=store, progress=False, force=True)\n"
        "imported = 'torchvision' in sys.modules\n"
        "prov = json.loads((store.run_dir(cfg, 0) / 'provenance.json').read_text())\n"
        "import torchvision\n"
        "print(json.dumps({'imported': imported, 'recorded': prov['versions']['torchvision'],\n"
        "                  'actual': torchvision.__version__}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["imported"] is False
    assert got["recorded"] == got["actual"]
