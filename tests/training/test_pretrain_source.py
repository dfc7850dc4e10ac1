"""The pre-trained SmallCNN as the "synthetic-pretrain" weights source: the trainer builds it like any weights."""

from __future__ import annotations

import torch

from dmllab.models import SmallCNN
from dmllab.training import Trainer, presets, run_key


def test_trainer_builds_the_pretrained_smallcnn_through_the_weights_source(monkeypatch, tmp_path):
    import dmllab.training.pretrain as pretrain

    source = SmallCNN(width=8)
    torch.save(source.state_dict(), tmp_path / "w8.pt")
    asked = []

    def fake(width=16, *, progress=True, **kw):
        asked.append(width)
        return tmp_path / f"w{width}.pt"

    monkeypatch.setattr(pretrain, "ensure_pretrained_smallcnn", fake)
    cfg = presets.get("proxynca++", "synthetic", "smoke").replace("model.pretrained", True)
    model = Trainer(cfg, progress=False).build_model()
    assert asked == [8]
    for key, value in source.state_dict().items():
        torch.testing.assert_close(model.backbone.state_dict()[key], value)
    # pretrained=False: random initialisation, the provider is not asked
    Trainer(cfg.replace("model.pretrained", False), progress=False).build_model()
    assert asked == [8]


def test_weights_path_of_a_width_is_the_file_build_smallcnn_loads():
    from dmllab.models.smallcnn import default_smallcnn_weights_path
    from dmllab.training.pretrain import weights_path

    assert weights_path(16) == default_smallcnn_weights_path(16) and weights_path(16).name.endswith("-w16.pt")
    assert weights_path(32).name == "smallcnn-synthetic.pt" == default_smallcnn_weights_path().name


def test_run_key_follows_the_weights_fingerprint_of_any_backbone(monkeypatch):
    import dmllab.training.pretrain as pretrain

    paper = presets.get("proxynca++", "cub", "paper")
    v2 = paper.replace("model.backbone_kwargs", (("imagenet_weights", "IMAGENET1K_V2"),))
    assert run_key(paper) != run_key(v2)  # ImageNet weights are an implicit input too
    quick = presets.get("proxynca++", "synthetic", "quick")
    key = run_key(quick)
    monkeypatch.setattr(pretrain, "pretrain_fingerprint", lambda *a, **k: "other-weights")
    assert run_key(quick) != key


def test_the_run_that_pretrains_equals_the_run_that_finds_the_weights(monkeypatch, tmp_path):
    """On a fresh machine the first run that needs the pre-trained SmallCNN produces it inside its model
    build, after the run has seeded itself; the pre-training seeds and draws (its own trainer, seed 0). That run
    must give what the same run gives with the weights already on disk (a bench_study.py finding: one of 368
    runs of a fresh quick study differed from the committed one)."""
    import random

    import numpy as np

    import dmllab.training.pretrain as pretrain
    from dmllab.training.store import RunStore, run

    torch.save(SmallCNN(width=8).state_dict(), tmp_path / "w8.pt")

    def found(width=16, *, progress=True, **kw):
        return tmp_path / f"w{width}.pt"

    def pretrains(width=16, *, progress=True, **kw):
        torch.manual_seed(0), np.random.seed(0), random.seed(0)  # what a Trainer(seed=0) does first
        torch.rand(1000), np.random.rand(10), random.random()
        return found(width)

    cfg = presets.get("proxynca++", "synthetic", "smoke").replace("model.pretrained", True)
    metrics = []
    for provider in (found, pretrains):
        monkeypatch.setattr(pretrain, "ensure_pretrained_smallcnn", provider)
        store = RunStore(tmp_path / provider.__name__)
        metrics.append(run(cfg, seed=1, store=store, progress=False, force=True).metrics)
    assert metrics[0] == metrics[1]
