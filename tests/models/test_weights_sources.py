"""Weights sources: what ``pretrained=True`` resolves to per backbone, and its fingerprint for the run store."""

from __future__ import annotations

import inspect

import pytest
import torch

import dmllab.training.smallcnn_weights as smallcnn_weights  # registers the SmallCNN's "synthetic-pretrain" source
from dmllab.models import list_backbones
from dmllab.models.weights import WEIGHTS_SOURCES, resolve_weights, weights_fingerprint, weights_source


def test_every_backbone_has_exactly_one_weights_source():
    for backbone in list_backbones():
        serving = [n for n in WEIGHTS_SOURCES if backbone in WEIGHTS_SOURCES.get(n).backbones]
        assert len(serving) == 1, (backbone, serving)
    assert (
        weights_source("smallcnn")[0] == "synthetic-pretrain" and weights_source("resnet50")[0] == "imagenet"
    )
    with pytest.raises(KeyError, match="imagenet: resnet50"):
        weights_source("vgg16")


def test_imagenet_resolves_to_the_torchvision_enum_without_downloading():
    from torchvision.models import GoogLeNet_Weights, ResNet50_Weights

    assert resolve_weights("resnet50", pretrained=True) is ResNet50_Weights.IMAGENET1K_V1
    v2 = resolve_weights("resnet50", pretrained=True, backbone_kwargs={"imagenet_weights": "DEFAULT"})
    assert v2 is ResNet50_Weights.IMAGENET1K_V2
    assert resolve_weights("googlenet", pretrained=True) is GoogLeNet_Weights.IMAGENET1K_V1
    assert resolve_weights("resnet50", pretrained=False) is None
    assert resolve_weights("resnet50", pretrained=True, weights_path="/x/w.pt") == "/x/w.pt"  # a file wins
    with pytest.raises(ValueError, match="IMAGENET1K_V1"):
        resolve_weights("resnet50", pretrained=True, backbone_kwargs={"imagenet_weights": "V9"})


def test_fingerprints_name_the_source_and_change_with_the_weights():
    v1 = weights_fingerprint("resnet50", pretrained=True)
    assert v1 == "imagenet:ResNet50_Weights.IMAGENET1K_V1:resnet50-0676ba61.pth"
    assert (
        weights_fingerprint("resnet50", pretrained=True, backbone_kwargs={"imagenet_weights": "DEFAULT"})
        != v1
    )
    assert weights_fingerprint("resnet50", pretrained=False) is None
    assert weights_fingerprint("resnet50", pretrained=True, weights_path="/x/w.pt") is None

    from dmllab.training.smallcnn_weights import pretrain_fingerprint

    w16 = weights_fingerprint("smallcnn", pretrained=True, backbone_kwargs={"width": 16})
    assert w16 == f"synthetic-pretrain:{pretrain_fingerprint(16)}"
    assert weights_fingerprint("smallcnn", pretrained=True, backbone_kwargs={"width": 8}) != w16
    # no width: SmallCNN's own default (32)
    assert (
        weights_fingerprint("smallcnn", pretrained=True) == f"synthetic-pretrain:{pretrain_fingerprint(32)}"
    )


def test_the_synthetic_pretrain_source_reads_and_never_trains(monkeypatch, tmp_path):
    """Resolving the SmallCNN's weights reads the pre-trained file; a trunk not pre-trained yet is a named error
    naming the command, and :func:`dmllab.training.pretrain.prepare` is what trains it first."""
    import dmllab.training.pretrain as pretrain
    from dmllab.training import presets

    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path))
    with pytest.raises(smallcnn_weights.WeightsNotPreparedError, match="dmllab pretrain --width 16 --seed 3"):
        resolve_weights("smallcnn", pretrained=True, backbone_kwargs={"width": 16, "pretrain_seed": 3})
    calls = []
    monkeypatch.setattr(pretrain, "ensure_pretrained_smallcnn", lambda **kw: calls.append(kw))
    cfg = presets.get("proxynca++", "synthetic", "quick").replace("model.backbone.pretrain_seed", 3)
    pretrain.prepare(cfg, progress=False)
    assert calls == [{"width": 16, "progress": False, "seed": 3}]
    pretrain.prepare(cfg.replace("model.pretrained", False))  # nothing to prepare
    assert len(calls) == 1


def _imports(path, *, top_level_only):
    import ast

    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_no_import_cycle_and_no_smallcnn_branch_in_the_builder_or_store():
    """dmllab.models never imports dmllab.training (the training layer registers the SmallCNN's source); the
    builder and the trainer never import the pre-training module, which imports the trainer."""
    from pathlib import Path

    import dmllab.models
    from dmllab.training import build, pretrain, store, trainer

    for path in Path(dmllab.models.__file__).parent.glob("*.py"):
        assert not any(n.startswith("dmllab.training") for n in _imports(path, top_level_only=False)), path
    for module in (trainer, build):
        assert "dmllab.training.pretrain" not in _imports(Path(module.__file__), top_level_only=False)
    assert "dmllab.training.trainer" in _imports(Path(pretrain.__file__), top_level_only=True)
    assert "smallcnn" not in inspect.getsource(build.build_model)
    assert "smallcnn" not in inspect.getsource(store.implicit_inputs)


def test_a_provider_leaves_the_callers_random_state_as_it_was(monkeypatch, tmp_path):
    import random
    from dataclasses import replace

    import numpy as np

    def reseeds(backbone, kwargs, *, progress=True):
        torch.manual_seed(0), np.random.seed(0), random.seed(0)
        torch.rand(5), np.random.rand(5), random.random()
        return tmp_path / "w.pt"

    def draws():
        return torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random()

    source = WEIGHTS_SOURCES.get("synthetic-pretrain")
    monkeypatch.setitem(WEIGHTS_SOURCES._items, "synthetic-pretrain", replace(source, provide=reseeds))
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    expected = draws()
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    resolve_weights("smallcnn", pretrained=True, progress=False)
    assert draws() == expected
