"""Mixed precision: proxies stay float32 and logits/losses are computed in float32 under autocast."""

from __future__ import annotations

import math

import pytest
import torch
from losses_naive import make_batch
from losses_naive import proxy_anchor as naive_proxy_anchor

import dmllab.losses as L

PROXY_LOSSES = [
    "proxynca",
    "normsoftmax",
    "softmax",
    "arcface",
    "cosface",
    "sphereface",
    "proxy_anchor",
    "heated_softmax",
]
C, D = 6, 16


@pytest.mark.parametrize("name", PROXY_LOSSES + ["proxy_synthesis"])
def test_bf16_autocast_equals_fp32_on_rounded_embeddings(name):
    torch.manual_seed(0)
    loss = L.build_loss(name, num_classes=C, embedding_dim=D)
    head = torch.nn.Linear(12, D)
    x = torch.randn(24, 12)
    labels = torch.arange(24) % C
    with torch.autocast("cpu", dtype=torch.bfloat16):
        emb = head(x)
        assert emb.dtype == torch.bfloat16
        kw = {"lam": 0.3} if name == "proxy_synthesis" else {}
        value = loss(emb, labels, **kw)
        logits = loss.logits(emb)
    assert value.dtype == torch.float32
    assert logits.dtype == torch.float32 and logits.shape == (24, C)
    reference = loss(emb.detach().float(), labels, **kw)  # same bf16-rounded values, no autocast
    torch.testing.assert_close(value, reference, rtol=1e-6, atol=1e-6)
    value.backward()
    for p in loss.parameters():
        assert p.dtype == torch.float32
        assert p.grad is not None and p.grad.dtype == torch.float32


def test_proxy_anchor_fp16_large_similarities_is_finite():
    # Every embedding sits on every proxy direction: cos = 1, alpha (cos + delta) = 35.2 and
    # e^35.2 overflows float16 (max 65504) and even a naive float32 sum of many terms loses precision.
    loss = L.ProxyAnchorLoss(3, 8, alpha=32.0, delta=0.1)
    direction = torch.ones(8)
    with torch.no_grad():
        loss.proxies.copy_(direction.expand(3, 8))
    emb = direction.expand(64, 8).clone().half().requires_grad_(True)
    labels = torch.arange(64) % 3
    value = loss(emb, labels)
    value.backward()
    assert torch.isfinite(value)
    assert torch.isfinite(emb.grad).all()
    want = naive_proxy_anchor(emb.detach().double(), labels, loss.proxies.detach().double(), 32.0, 0.1)
    assert value.item() == pytest.approx(want, rel=1e-5)
    assert not math.isinf(want)


def test_proxy_anchor_fp16_under_autocast_is_finite():
    emb, labels, _ = make_batch(batch_size=32, num_classes=4, dim=8, seed=0, dtype=torch.float32)
    loss = L.ProxyAnchorLoss(4, 8)
    with torch.no_grad():
        loss.proxies.copy_(emb[:4] * 3)  # large similarities for the first samples
    with torch.autocast("cpu", dtype=torch.float16):
        value = loss(emb.half(), labels)
    assert value.dtype == torch.float32 and torch.isfinite(value)
