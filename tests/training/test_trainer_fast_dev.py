"""A fast dev run (``run.fast_dev_run = N``): N batches per epoch and per evaluation, at most one warm-up and one
schedule epoch per stage with every scheduled event moved inside, the batch shrunk to fit a tiny split, its own
run key; and the paper presets' fast dev runs on the miniature SOP and In-Shop in their real layouts (class-balanced
batches shrunk to fit, In-Shop's query/gallery evaluation)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from dmllab.experiments import Run, registry
from dmllab.experiments.execution import Execution
from dmllab.experiments.lookup import place
from dmllab.training import Trainer, presets
from dmllab.training.config import config_hash
from dmllab.training.protocol import (
    FAST_DEV_EPOCHS,
    FAST_DEV_WARMUP_EPOCHS,
    run_protocol,
    stage_plans,
    training_config,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from data_layouts import make_inshop, make_sop  # noqa: E402


def test_fast_dev_run_is_part_of_the_key_and_absent_at_its_default():
    cfg = presets.get("proxynca++", "cub", "paper")
    assert cfg.run.fast_dev_run == 0
    assert config_hash(cfg) == config_hash(cfg.replace("run.fast_dev_run", 0))
    assert config_hash(cfg.replace("run.fast_dev_run", 2)) != config_hash(cfg)
    assert config_hash(cfg.replace("run.fast_dev_run", 2)) != config_hash(cfg.replace("run.fast_dev_run", 3))


def test_fast_dev_schedule_keeps_every_scheduled_event_inside_its_short_schedule():
    """Warm-up, two stages, lr milestones, the heating epoch and a fine-tune all run once, cut short."""
    pnpp = presets.get("proxynca++", "cub", "paper").replace("run.fast_dev_run", 2)
    t = training_config(pnpp)
    assert (t.schedule.epochs, t.schedule.warmup_epochs) == (FAST_DEV_EPOCHS, FAST_DEV_WARMUP_EPOCHS)
    assert t.run.two_stage and stage_plans(pnpp)[0].total_epochs == FAST_DEV_EPOCHS + FAST_DEV_WARMUP_EPOCHS
    assert training_config(t) == t  # idempotent
    real = presets.get("proxynca++", "cub", "paper")
    assert training_config(real) is real  # a real run is untouched

    heated = presets.get("heated_softmax", "cars", "paper").replace("run.fast_dev_run", 1)
    assert heated.callback("heating").get("epoch") > FAST_DEV_EPOCHS
    heating = training_config(heated).callback("heating")
    assert heating.get("epoch") == FAST_DEV_EPOCHS  # heated in its one epoch
    assert heating.without("epoch") == heated.callback("heating").without("epoch")  # the factors kept
    stage_plans(heated)  # the schedule check accepts it

    stepped = real.replace("schedule.scheduler", "multistep").replace("schedule.milestones", (5, 20))
    stepped = stepped.replace("run.two_stage", False).replace("run.fast_dev_run", 1)
    assert training_config(stepped).schedule.milestones == (0,)  # both drops inside the one epoch
    stage_plans(stepped)

    finetune = presets.get("heated_softmax", "synthetic", "quick", variant="HLN", heating="finetune")
    assert finetune.finetune.epochs > 1
    short = training_config(finetune.replace("run.fast_dev_run", 1))
    assert short.schedule.epochs == 1 and short.callback("heating").get("epoch") == 1


def _with_labels(trainer, monkeypatch, labels):
    """``trainer`` whose training splits hold ``labels`` (the labels its data path gives the batch shape)."""
    monkeypatch.setattr(trainer.data, "labels", lambda split, prefix=None: labels)
    return trainer


def test_batch_shrinks_to_fit_a_tiny_split_and_says_so(smoke_cfg, monkeypatch):
    labels = [0, 0, 0, 1, 1]  # 2 classes, 5 images: fewer than one 16 = 4 x 4 class-balanced batch
    real = _with_labels(Trainer(smoke_cfg, progress=False), monkeypatch, labels)
    assert real.fast_dev is None  # a real run's batches are the sampler's own: 16 = 4 x 4, never shrunk
    assert real.batch_shape("train") == (16, None) and smoke_cfg.data.per_class == 4
    fast = _with_labels(
        Trainer(smoke_cfg.replace("run.fast_dev_run", 2), progress=False), monkeypatch, labels
    )
    assert fast.batch_shape("train") == (4, 2)  # 2 classes x 2 images: one batch fits
    assert fast.fast_dev.shrunk == [
        "synthetic train: batch 16 = 4 classes x 4 -> 4 = 2 classes x 2 (2 classes, 5 images)"
    ]
    _with_labels(fast, monkeypatch, np.arange(40) % 8)
    assert fast.batch_shape("train") == (16, 4)  # enough data: nothing shrinks
    random_cfg = smoke_cfg.replace("data.sampler", "random").replace("run.fast_dev_run", 2)
    random = _with_labels(Trainer(random_cfg, progress=False), monkeypatch, labels)
    assert random.batch_shape("trainval") == (5, None)
    assert "5 random images" in random.fast_dev.shrunk[0]


def test_fast_dev_trains_n_batches_per_epoch_and_evaluates_n_batches(smoke_cfg):
    cfg = smoke_cfg.replace("run.fast_dev_run", 1).replace("data.eval_batch_size", 8)
    result = run_protocol(cfg, progress=False)
    # stage 1 (one schedule epoch, no warm-up in the smoke preset) and stage 2 (the best epoch: 1), one batch each
    assert [(r["stage"], r["epoch"]) for r in result.history] == [("stage1", 1), ("stage2", 1)]
    assert result.extra["fast_dev"] == {"steps": 2, "shrunk": []}
    trainer = Trainer(cfg, progress=False)
    evaluated = sum(len(labels) for _, labels in trainer.data.eval_batches("test"))
    assert evaluated == 8  # N = 1 batch of eval_batch_size images
    assert len(trainer.data.dataset("test", train=False)) > 8


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("D")
    make_sop(root / "sop")
    make_inshop(root / "inshop")
    return root


@pytest.mark.filterwarnings("error::dmllab.metrics.FewReferencesWarning")  # its splits are small on purpose
@pytest.mark.parametrize("dataset", ["sop", "inshop"])
def test_paper_preset_fast_dev_run_on_the_miniature_sop_and_inshop(dataset, data_root):
    """The paper preset of ProxyNCA++ (class-balanced 3-image batches, two-stage on SOP, the query/gallery test on
    In-Shop), placed as the study places it (data root with one folder per dataset, no counts check, random init),
    trains its fast dev run on the real layouts: the batch shrinks to the miniature's classes."""
    artifact = registry.get("pnpp_table3_6_sota")
    execution = Execution("cpu", str(data_root), fast_dev_run=1, pretrained=False, check_counts=False)
    params = artifact.params("paper", execution)
    cfg = presets.get("proxynca++", dataset, "paper")
    run = place(Run(cfg, 0), params)
    c = run.config
    assert (c.data.root, c.run.fast_dev_run, c.model.pretrained) == (str(data_root / dataset), 1, False)
    assert c.data.dataset.get("check_counts") is False
    # a smaller input keeps the test fast; the data path (decode, transforms, sampler, loader workers) is the real one
    c = c.replace("model.backbone", "resnet18").replace("model.embedding_dim", 32)
    result = run_protocol(c, progress=False)
    assert result.extra["fast_dev"]["steps"] >= 1
    assert any("classes" in line for line in result.extra["fast_dev"]["shrunk"])
    assert "R@1" in result.metrics
    if dataset == "inshop":
        assert c.data.query_split == "query" and c.data.gallery_split == "gallery"


def test_a_fast_dev_run_shrinks_the_paper_crops_after_the_real_transform(data_root):
    """A fast dev run resizes the paper preset's crops (ProxyNCA++: 256 px) to FastDevRun.IMAGE_SIZE after the
    preset's own steps, says so, and a real run keeps them; crops no larger are never enlarged."""
    from dmllab.data.transforms import build_transforms, crop_size
    from dmllab.training.callbacks import FastDevRun

    cfg = presets.get("proxynca++", "sop", "paper").replace("data.root", str(data_root / "sop"))
    cfg = cfg.replace("data.dataset.check_counts", False).replace("model.pretrained", False)
    size = FastDevRun.IMAGE_SIZE
    assert crop_size(cfg.data.transform) == 256 > size
    fast = Trainer(cfg.replace("run.fast_dev_run", 1), progress=False)
    real = Trainer(cfg, progress=False)
    for split, train in (("train", True), ("test", False)):
        image, _ = fast.data.dataset(split, train=train)[0]
        assert tuple(image.shape) == (3, size, size)
        assert tuple(real.data.dataset(split, train=train)[0][0].shape) == (3, 256, 256)
    assert fast.fast_dev.shrunk == [
        f"images: the proxynca++ preset's 256 px crops resized to {size} x {size}"
    ]
    # the resize is the last step: the real test crop, resized (naive reference)
    from PIL import Image
    from torchvision.transforms.v2 import functional as F

    img = Image.new("RGB", (300, 200), (120, 30, 200))
    want = F.resize(
        build_transforms("proxynca++", train=False, uint8=True)(img), [size, size], antialias=True
    )
    assert (build_transforms("proxynca++", train=False, uint8=True, size=size)(img) == want).all()
    smoke = presets.get("proxynca++", "synthetic", "smoke").replace("data.in_memory", False)
    assert FastDevRun(1).image_size(smoke.data) is None  # 32 px crops: never enlarged
