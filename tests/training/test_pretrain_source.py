"""The pre-trained SmallCNN as the "synthetic-pretrain" weights source: the builder reads it like any weights,
and never trains it; the run store prepares it first (dmllab.training.pretrain.prepare)."""

from __future__ import annotations

import pytest
import torch

from dmllab.models import SmallCNN
from dmllab.training import build, presets, run_key, smallcnn_weights


def _weights_on_disk(monkeypatch, tmp_path, fresh=lambda width, seed: True):
    """The source's file of a width at ``tmp_path/w<width>.pt`` (``fresh``: whether it is there and current);
    returns the list of widths the source was asked for."""
    asked = []

    def is_fresh(width, seed, **kw):
        asked.append(width)
        return fresh(width, seed)

    monkeypatch.setattr(smallcnn_weights, "is_fresh", is_fresh)
    monkeypatch.setattr(smallcnn_weights, "weights_path", lambda width=16, seed=0: tmp_path / f"w{width}.pt")
    return asked


def _never_pretrain(monkeypatch):
    import dmllab.training.pretrain as pretrain

    def boom(*a, **k):
        raise AssertionError("building a model started a pre-training")

    monkeypatch.setattr(pretrain, "ensure_pretrained_smallcnn", boom)


def test_the_builder_loads_the_pretrained_smallcnn_through_the_weights_source(monkeypatch, tmp_path):
    source = SmallCNN(width=8)
    torch.save(source.state_dict(), tmp_path / "w8.pt")
    asked = _weights_on_disk(monkeypatch, tmp_path)
    _never_pretrain(monkeypatch)
    cfg = presets.get("proxynca++", "synthetic", "smoke").replace("model.pretrained", True)
    model = build.build_model(cfg.model)  # what Trainer.setup builds
    assert asked == [8]
    for key, value in source.state_dict().items():
        torch.testing.assert_close(model.backbone.state_dict()[key], value)
    # pretrained=False: random initialisation, the source is not asked
    build.build_model(cfg.replace("model.pretrained", False).model)
    assert asked == [8]


def test_a_trunk_not_pretrained_yet_is_an_error_naming_the_command_never_a_training(monkeypatch, tmp_path):
    _weights_on_disk(monkeypatch, tmp_path, fresh=lambda width, seed: False)
    _never_pretrain(monkeypatch)
    cfg = presets.get("proxynca++", "synthetic", "smoke").replace("model.pretrained", True)
    with pytest.raises(smallcnn_weights.WeightsNotPreparedError, match="`dmllab pretrain --width 8`"):
        build.build_model(cfg.model)
    draw = cfg.replace("model.backbone.pretrain_seed", 2)
    with pytest.raises(
        smallcnn_weights.WeightsNotPreparedError, match="`dmllab pretrain --width 8 --seed 2`"
    ):
        build.build_model(draw.model)


def test_weights_path_of_a_width_is_the_file_build_smallcnn_loads():
    from dmllab.models.smallcnn import default_smallcnn_weights_path
    from dmllab.training.smallcnn_weights import weights_path

    assert weights_path(16) == default_smallcnn_weights_path(16) and weights_path(16).name.endswith("-w16.pt")
    assert weights_path(32).name == "smallcnn-synthetic.pt" == default_smallcnn_weights_path().name


def test_run_key_follows_the_weights_fingerprint_of_any_backbone(monkeypatch):
    paper = presets.get("proxynca++", "cub", "paper")
    v2 = paper.replace("model.backbone.imagenet_weights", "IMAGENET1K_V2")
    assert run_key(paper) != run_key(v2)  # ImageNet weights are an implicit input too
    quick = presets.get("proxynca++", "synthetic", "quick")
    key = run_key(quick)
    monkeypatch.setattr(smallcnn_weights, "pretrain_fingerprint", lambda *a, **k: "other-weights")
    assert run_key(quick) != key


def test_the_run_that_pretrains_equals_the_run_that_finds_the_weights(monkeypatch, tmp_path):
    """On a fresh machine the first run that needs the pre-trained SmallCNN has the run store prepare it
    (:func:`dmllab.training.pretrain.prepare`) before the run trains; the pre-training seeds and draws (its own
    trainer, seed 0). That run must give what the same run gives with the weights already on disk (a
    bench_study.py finding: one of 368 runs of a fresh quick study differed from the committed one)."""
    import random

    import numpy as np

    import dmllab.training.pretrain as pretrain
    from dmllab.training.store import RunStore, run

    torch.save(SmallCNN(width=8).state_dict(), tmp_path / "w8.pt")
    state = {"fresh": True, "pretrained": 0}
    _weights_on_disk(monkeypatch, tmp_path, fresh=lambda width, seed: state["fresh"])
    monkeypatch.setattr(pretrain, "is_fresh", lambda width, seed, **kw: state["fresh"])

    def pretrains(width=16, *, progress=True, **kw):
        torch.manual_seed(0), np.random.seed(0), random.seed(0)  # what a Trainer(seed=0) does first
        torch.rand(1000), np.random.rand(10), random.random()
        state["fresh"], state["pretrained"] = True, state["pretrained"] + 1
        return tmp_path / f"w{width}.pt"

    monkeypatch.setattr(pretrain, "ensure_pretrained_smallcnn", pretrains)
    cfg = presets.get("proxynca++", "synthetic", "smoke").replace("model.pretrained", True)
    metrics = []
    for fresh in (True, False):  # the weights found; the weights pre-trained by the run store first
        state["fresh"] = fresh
        store = RunStore(tmp_path / f"runs-{fresh}")
        metrics.append(run(cfg, seed=1, store=store, progress=False, force=True).metrics)
    assert state["pretrained"] == 1
    assert metrics[0] == metrics[1]
