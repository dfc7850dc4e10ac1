from __future__ import annotations

import pytest
import torch
from torch import nn

from dmllab.models import (
    EmbeddingHead,
    EmbeddingNet,
    EmbeddingTail,
    GlobalKMaxPool2d,
    ScaledBatchNorm1d,
    SmallCNN,
    build_backbone,
    build_model,
    freeze_batchnorm,
    unfreeze_batchnorm,
)


def _backbone_bns(net: EmbeddingNet) -> list[nn.BatchNorm2d]:
    return [m for m in net.backbone.modules() if isinstance(m, nn.BatchNorm2d)]


def _small_net(**kwargs) -> EmbeddingNet:
    return build_model(backbone="smallcnn", embedding_dim=8, width=4, **kwargs)


def test_build_model_wires_backbone_and_head():
    net = build_model(
        backbone="smallcnn",
        embedding_dim=16,
        pooling="kmax",
        k=5,
        norm="layernorm",
        l2_normalize=True,
        head_init="kaiming",
        width=8,
    )
    assert isinstance(net.backbone, SmallCNN) and net.backbone.out_channels == 64
    assert isinstance(net.head, EmbeddingHead) and isinstance(net.head.pool, GlobalKMaxPool2d)
    assert net.head.pool.k == 5 and net.head.norm_position == "pre" and net.embedding_dim == 16
    assert torch.count_nonzero(net.head.linear.bias) == 0
    out = net(torch.randn(4, 3, 56, 56))
    assert out.shape == (4, 16)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(4))


def test_forward_is_head_of_backbone():
    net = _small_net(norm="batchnorm").eval()
    x = torch.randn(3, 3, 56, 56)
    with torch.no_grad():
        torch.testing.assert_close(net(x), net.head(net.backbone(x)))
    assert isinstance(net.head.post_norm, ScaledBatchNorm1d)


@pytest.mark.parametrize("start", [0, 3, 6])
def test_embedding_tail_on_prefix_features_is_the_model(start):
    net = _small_net(norm="layernorm")
    net.backbone.freeze_blocks(start)
    net.train()  # the frozen prefix stays in eval mode, the tail's BN uses batch statistics in both paths
    x = torch.randn(4, 3, 56, 56)
    tail = EmbeddingTail(net, start)
    with torch.no_grad():
        feats = net.backbone.forward_blocks(x, 0, start)
        torch.testing.assert_close(tail(feats), net(x), rtol=0, atol=0)
    assert tail.head is net.head
    tail(feats).sum().backward()  # training the tail trains the model itself
    trainable = [p for b in net.backbone.blocks()[start:] for p in b.parameters()] + list(
        net.head.parameters()
    )
    assert all(p.grad is not None for p in trainable)
    assert all(p.grad is None for b in net.backbone.blocks()[:start] for p in b.parameters())


def test_embedding_tail_needs_a_blocked_backbone():
    net = _small_net()
    net.backbone = nn.Conv2d(3, 32, 3)  # no forward_blocks
    with pytest.raises(ValueError, match="backbone with blocks"):
        EmbeddingTail(net, 2)


def test_frozen_bn_stays_frozen_after_train():
    net = _small_net(frozen_bn=True, norm="batchnorm")
    net.train()
    bns = _backbone_bns(net)
    assert bns and all(not bn.training for bn in bns)
    assert all(not p.requires_grad for bn in bns for p in bn.parameters())
    assert all(p.requires_grad for p in net.backbone.stage1[0].parameters())  # convs still train
    assert net.head.post_norm.bn.training  # the head's Heated-up BN keeps using batch statistics
    before = [bn.running_mean.clone() for bn in bns]
    net(torch.randn(4, 3, 56, 56)).sum().backward()
    assert all(torch.equal(b, bn.running_mean) for b, bn in zip(before, bns))
    assert all(bn.weight.grad is None for bn in bns)
    net.eval()
    net.train(True)
    assert all(not bn.training for bn in _backbone_bns(net))


def test_frozen_bn_can_be_switched_off():
    net = _small_net(frozen_bn=True)
    net.frozen_bn = False
    net.train()
    assert all(bn.training and bn.weight.requires_grad for bn in _backbone_bns(net))
    net.frozen_bn = True
    assert all(not bn.training and not bn.weight.requires_grad for bn in _backbone_bns(net))


def test_freeze_batchnorm_on_a_plain_module_until_train():
    trunk = build_backbone("smallcnn", width=4).train()
    freeze_batchnorm(trunk)
    bns = [m for m in trunk.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(not bn.training and not bn.weight.requires_grad for bn in bns)
    trunk.train()  # a plain module: train() switches BN back (documented); the trainer re-freezes
    assert all(bn.training for bn in bns)
    unfreeze_batchnorm(trunk)
    assert all(bn.weight.requires_grad for bn in bns)


def test_param_groups_split_backbone_and_head():
    net = _small_net(norm="layernorm")
    groups = net.param_groups()
    assert set(groups) == {"backbone", "embedding"}
    ids = {name: {id(p) for p in params} for name, params in groups.items()}
    assert not ids["backbone"] & ids["embedding"]
    assert ids["backbone"] | ids["embedding"] == {id(p) for p in net.parameters()}
    assert ids["embedding"] == {id(net.head.linear.weight), id(net.head.linear.bias)}


@pytest.mark.parametrize("pooling", ["avg", "max", "avg+max"])
def test_channels_last_model_matches_contiguous(pooling):
    net = _small_net(pooling=pooling).eval()
    x = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = net(x)
        out = net.to(memory_format=torch.channels_last)(x.to(memory_format=torch.channels_last))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_unfrozen_net_leaves_a_caller_frozen_backbone_alone():
    trunk = freeze_batchnorm(build_backbone("smallcnn", width=4))
    net = EmbeddingNet(trunk, EmbeddingHead(trunk.out_channels, 8), frozen_bn=False)
    assert all(not bn.weight.requires_grad for bn in _backbone_bns(net))
