"""torch.autograd.gradcheck in float64 for every proxy loss (wrt embeddings, proxies and bias)."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from losses_naive import make_batch

from dmllab.losses import functional as LF
from dmllab.losses import synthesize

FUNCTIONS = {
    "proxynca": functools.partial(LF.proxy_nca, temperature=1 / 3),
    "proxynca_classic": functools.partial(LF.proxy_nca, temperature=1.0, prob=False),
    "normsoftmax": functools.partial(LF.norm_softmax, temperature=0.5),
    "sphereface": functools.partial(LF.margin_softmax, scale=5.0, m1=1.05),
    "cosface": functools.partial(LF.margin_softmax, scale=5.0, m3=0.1),
    "arcface": functools.partial(LF.margin_softmax, scale=5.0, m2=0.1),
    "proxy_anchor": functools.partial(LF.proxy_anchor, alpha=4.0, delta=0.1),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_gradcheck_proxy_losses(name):
    emb, labels, proxies = make_batch(batch_size=8, num_classes=4, dim=5, seed=1)
    emb.requires_grad_(True)
    proxies.requires_grad_(True)
    fn = FUNCTIONS[name]
    assert torch.autograd.gradcheck(lambda e, p: fn(e, labels, p), (emb, proxies))


@pytest.mark.parametrize("heated", [False, True])
def test_gradcheck_linear_classifiers(heated):
    emb, labels, weight = make_batch(batch_size=8, num_classes=4, dim=5, seed=2)
    bias = torch.randn(4, dtype=torch.float64)
    args = (emb.requires_grad_(True), weight.requires_grad_(True), bias.requires_grad_(True))
    if heated:
        assert torch.autograd.gradcheck(lambda e, w, b: LF.heated_softmax(e, labels, w, b, alpha=4.0), args)
    else:
        assert torch.autograd.gradcheck(lambda e, w, b: LF.softmax(e, labels, w, b), args)


@pytest.mark.parametrize("base", ["normsoftmax", "proxy_anchor", "arcface"])
def test_gradcheck_proxy_synthesis_fixed_lambda(base):
    emb, labels, proxies = make_batch(batch_size=6, num_classes=3, dim=4, seed=3)
    emb.requires_grad_(True)
    proxies.requires_grad_(True)
    fn = FUNCTIONS[base]

    def loss(e, p):
        batch = synthesize(F.normalize(e, dim=1), labels, F.normalize(p, dim=1), lam=0.3, num_synthetic=5)
        return fn(batch.embeddings, batch.labels, batch.proxies)

    assert torch.autograd.gradcheck(loss, (emb, proxies))
