"""PS Table 5 regularisers: Virtual Softmax (naive reference) and Input / Manifold Mixup (from the definition)."""

from __future__ import annotations

import pytest
import torch
from losses_naive import linear_softmax as naive_linear_softmax
from losses_naive import virtual_softmax as naive_virtual_softmax

import dmllab.losses as L
from dmllab.losses import functional as LF

C, D = 5, 6


def _batch(seed=0, b=10, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    emb = scale * torch.randn(b, D, generator=g, dtype=torch.float64)
    labels = (torch.arange(b) % C)[torch.randperm(b, generator=g)]
    weight = torch.randn(C, D, generator=g, dtype=torch.float64)
    bias = torch.randn(C, generator=g, dtype=torch.float64)
    return emb, labels, weight, bias


@pytest.mark.parametrize("clip", [None, 10.0, 1.0])
@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_virtual_softmax_matches_naive(clip, scale):
    emb, labels, weight, bias = _batch(seed=int(10 * scale), scale=scale)
    value = LF.virtual_softmax(emb, labels, weight, bias, clip=clip)
    ref = naive_virtual_softmax(emb, labels, weight, bias, clip)
    assert value.item() == pytest.approx(ref, rel=1e-10)


def test_virtual_softmax_exceeds_softmax_and_clip_binds():
    emb, labels, weight, bias = _batch(seed=1, scale=4.0)
    sm = LF.softmax(emb, labels, weight, bias)
    vs = LF.virtual_softmax(emb, labels, weight, bias, clip=None)
    assert vs > sm  # one more negative class in every denominator
    logits = LF.virtual_softmax_logits(emb, labels, weight, bias, clip=1.0)
    assert logits.shape == (10, C + 1) and logits[:, -1].max() <= 1.0


def test_virtual_softmax_module():
    torch.manual_seed(0)
    loss = L.build_loss("virtual_softmax", num_classes=C, embedding_dim=D, clip=5.0)
    emb = torch.randn(8, D, dtype=torch.float64)
    labels = torch.arange(8) % C
    ref = naive_virtual_softmax(emb, labels, loss.proxies.detach(), loss.bias.detach(), 5.0)
    assert loss(emb, labels).item() == pytest.approx(ref, rel=1e-6)
    assert loss.logits(emb.float()).shape == (8, C)
    with pytest.raises(ValueError, match="clip"):
        L.VirtualSoftmaxLoss(C, D, clip=0.0)


def test_mixup_loss_equals_cross_entropy_with_mixed_target():
    emb, labels, weight, bias = _batch(seed=2)
    labels_b = labels.roll(1)
    lam = 0.3
    value = LF.mixup_loss(lambda e, y: LF.softmax(e, y, weight, bias), emb, labels, labels_b, lam)
    logp = torch.log_softmax(emb @ weight.t() + bias, dim=1)
    target = lam * torch.nn.functional.one_hot(labels, C) + (1 - lam) * torch.nn.functional.one_hot(
        labels_b, C
    )
    ref = -(target * logp).sum(1).mean()
    torch.testing.assert_close(value, ref)
    # and with the naive per-sample loop
    naive = lam * naive_linear_softmax(emb, labels, weight, bias) + (1 - lam) * naive_linear_softmax(
        emb, labels_b, weight, bias
    )
    assert value.item() == pytest.approx(naive, rel=1e-10)


class _Net(torch.nn.Module):
    """backbone (B, 3, 4, 4) -> (B, 2, 4, 4); head: flatten + linear."""

    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Conv2d(3, 2, 1)
        self.head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(32, D))

    def forward(self, x):
        return self.head(self.backbone(x))


@pytest.mark.parametrize("mode", ["input_mixup", "manifold_mixup"])
def test_mixup_embeds_the_mixed_batch(mode):
    torch.manual_seed(0)
    net = _Net()
    images = torch.randn(6, 3, 4, 4)
    loss = L.NormSoftmaxLoss(C, D)
    mixup = L.Mixup(loss, mode, alpha=0.4, generator=torch.Generator().manual_seed(3))
    emb, draw = mixup.embed(net, images)
    assert 0.0 <= draw.lam <= 1.0 and sorted(draw.perm.tolist()) == list(range(6))
    lam, perm = draw.lam, draw.perm
    if mode == "input_mixup":
        ref = net(lam * images + (1 - lam) * images[perm])
    else:
        h = net.backbone(images)
        ref = net.head(lam * h + (1 - lam) * h[perm])
    torch.testing.assert_close(emb, ref)
    labels = torch.arange(6) % C
    value = mixup(emb, labels, draw)
    torch.testing.assert_close(value, lam * loss(emb, labels) + (1 - lam) * loss(emb, labels[perm]))


def test_mixup_same_generator_same_draw_and_validation():
    a = L.Mixup(None, "input_mixup", generator=torch.Generator().manual_seed(7)).draw(5, torch.device("cpu"))
    b = L.Mixup(None, "input_mixup", generator=torch.Generator().manual_seed(7)).draw(5, torch.device("cpu"))
    assert a.lam == b.lam and torch.equal(a.perm, b.perm)
    with pytest.raises(ValueError, match="mixup mode"):
        L.Mixup(None, "cutmix")
    with pytest.raises(ValueError, match="alpha"):
        L.Mixup(None, "input_mixup", alpha=0.0)
    with pytest.raises(ValueError, match="backbone"):
        L.Mixup(None, "manifold_mixup").embed(torch.nn.Linear(3, 3), torch.randn(4, 3))
