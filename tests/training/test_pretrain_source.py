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
