"""Each loss against a naive per-sample loop written from the paper's equation (float64)."""

from __future__ import annotations

import math

import pytest
import torch
from losses_naive import linear_softmax as naive_linear_softmax
from losses_naive import make_batch
from losses_naive import margin_softmax as naive_margin_softmax
from losses_naive import norm_softmax as naive_norm_softmax
from losses_naive import proxy_anchor as naive_proxy_anchor
from losses_naive import proxy_nca as naive_proxy_nca

import dmllab.losses as L
from dmllab.losses import functional as LF

SEEDS = [0, 1, 2]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("temperature", [1.0, 1 / 3, 1 / 9])
@pytest.mark.parametrize("prob", [True, False])
def test_proxy_nca_matches_eq6_and_eq3(seed, temperature, prob):
    emb, labels, proxies = make_batch(seed=seed)
    got = LF.proxy_nca(emb, labels, proxies, temperature=temperature, prob=prob)
    want = naive_proxy_nca(emb, labels, proxies, temperature, prob=prob)
    assert got.item() == pytest.approx(want, rel=1e-10, abs=1e-10)


def test_classic_proxy_nca_can_be_negative():
    # Embeddings on top of their proxies: Eq. 3 excludes the positive, so -log(e^0 / sum_{neg} e^{-d/T}) < 0.
    proxies = torch.eye(4, dtype=torch.float64)
    labels = torch.arange(4)
    value = LF.proxy_nca(proxies.clone(), labels, proxies, temperature=1.0, prob=False)
    assert value.item() < 0
    assert value.item() == pytest.approx(naive_proxy_nca(proxies, labels, proxies, 1.0, prob=False))
    assert LF.proxy_nca(proxies.clone(), labels, proxies, temperature=1.0, prob=True).item() > 0


def test_proxy_nca_logits_are_minus_distance_over_t():
    emb, _, proxies = make_batch(seed=3)
    logits = LF.proxy_nca_logits(emb, proxies, temperature=0.25)
    d = torch.cdist(emb / emb.norm(dim=1, keepdim=True), proxies / proxies.norm(dim=1, keepdim=True)) ** 2
    torch.testing.assert_close(logits, -d / 0.25)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("temperature", [1.0, 0.5, 0.05])
def test_norm_softmax_matches_eq9(seed, temperature):
    emb, labels, proxies = make_batch(seed=seed)
    got = LF.norm_softmax(emb, labels, proxies, temperature=temperature)
    assert got.item() == pytest.approx(naive_norm_softmax(emb, labels, proxies, temperature), rel=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_softmax_matches_linear_classifier(seed):
    emb, labels, weight = make_batch(seed=seed)
    bias = torch.randn(weight.shape[0], dtype=torch.float64)
    got = LF.softmax(emb, labels, weight, bias)
    assert got.item() == pytest.approx(naive_linear_softmax(emb, labels, weight, bias), rel=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("alpha", [16.0, 4.0])
def test_heated_softmax_matches_definition(seed, alpha):
    emb, labels, weight = make_batch(seed=seed)
    emb = emb / emb.norm(dim=1, keepdim=True)  # the LN head's f_hat
    bias = torch.randn(weight.shape[0], dtype=torch.float64)
    got = LF.heated_softmax(emb, labels, weight, bias, alpha=alpha)
    want = naive_linear_softmax(emb, labels, weight, bias, alpha=alpha, normalize_weights=True)
    assert got.item() == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    "params",
    [
        {"scale": 30.0, "m1": 1.05, "m2": 0.0, "m3": 0.0},
        {"scale": 23.0, "m1": 1.0, "m2": 0.0, "m3": 0.1},
        {"scale": 23.0, "m1": 1.0, "m2": 0.1, "m3": 0.0},
        {"scale": 10.0, "m1": 1.2, "m2": 0.05, "m3": 0.02},
        {"scale": 2.0, "m1": 1.0, "m2": 0.0, "m3": 0.0},
    ],
)
def test_margin_softmax_matches_ps_eq6(seed, params):
    emb, labels, proxies = make_batch(seed=seed)
    got = LF.margin_softmax(emb, labels, proxies, **params)
    want = naive_margin_softmax(emb, labels, proxies, **params)
    assert got.item() == pytest.approx(want, rel=1e-9)


def test_margin_softmax_without_margin_is_norm_softmax():
    emb, labels, proxies = make_batch(seed=4)
    a = LF.margin_softmax(emb, labels, proxies, scale=23.0)
    b = LF.norm_softmax(emb, labels, proxies, temperature=1 / 23.0)
    torch.testing.assert_close(a, b)


def test_margin_softmax_clamps_before_acos():
    # An embedding exactly on its proxy (cos = 1) must give a finite loss and finite gradients.
    proxies = torch.eye(3, dtype=torch.float64, requires_grad=True)
    emb = torch.eye(3, dtype=torch.float64).requires_grad_(True)
    loss = LF.margin_softmax(emb, torch.arange(3), proxies, scale=23.0, m1=1.0, m2=0.1)
    loss.backward()
    assert math.isfinite(loss.item())
    assert torch.isfinite(emb.grad).all() and torch.isfinite(proxies.grad).all()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("alpha,delta", [(32.0, 0.1), (4.0, 0.0), (16.0, 0.3)])
def test_proxy_anchor_matches_eq4(seed, alpha, delta):
    emb, labels, proxies = make_batch(seed=seed)
    got = LF.proxy_anchor(emb, labels, proxies, alpha=alpha, delta=delta)
    assert got.item() == pytest.approx(naive_proxy_anchor(emb, labels, proxies, alpha, delta), rel=1e-10)


def test_proxy_anchor_missing_classes_and_no_negatives():
    # Classes 3..6 have no sample (positive term averaged over the 3 present proxies, negative over all 7);
    # a batch of one class has no negatives for that proxy.
    g = torch.Generator().manual_seed(5)
    emb = torch.randn(6, 4, dtype=torch.float64, generator=g)
    proxies = torch.randn(7, 4, dtype=torch.float64, generator=g)
    labels = torch.tensor([0, 0, 1, 2, 2, 2])
    got = LF.proxy_anchor(emb, labels, proxies, alpha=32.0, delta=0.1)
    assert got.item() == pytest.approx(naive_proxy_anchor(emb, labels, proxies, 32.0, 0.1), rel=1e-10)
    one_class = torch.zeros(6, dtype=torch.long)
    emb.requires_grad_(True)
    got = LF.proxy_anchor(emb, one_class, proxies, alpha=32.0, delta=0.1)
    got.backward()
    assert got.item() == pytest.approx(
        naive_proxy_anchor(emb.detach(), one_class, proxies, 32.0, 0.1), rel=1e-10
    )
    assert torch.isfinite(emb.grad).all()


@pytest.mark.parametrize(
    "name,kwargs,naive",
    [
        ("proxynca", {"temperature": 1 / 9}, lambda e, y, p, m: naive_proxy_nca(e, y, p, 1 / 9)),
        (
            "proxynca",
            {"temperature": 1.0, "prob": False},
            lambda e, y, p, m: naive_proxy_nca(e, y, p, 1.0, False),
        ),
        ("normsoftmax", {"temperature": 0.5}, lambda e, y, p, m: naive_norm_softmax(e, y, p, 0.5)),
        ("softmax", {}, lambda e, y, p, m: naive_linear_softmax(e, y, p, m.bias.detach().double())),
        (
            "heated_softmax",
            {"alpha": 16.0},
            lambda e, y, p, m: naive_linear_softmax(e, y, p, m.bias.detach().double(), 16.0, True),
        ),
        ("arcface", {}, lambda e, y, p, m: naive_margin_softmax(e, y, p, 23.0, 1.0, 0.1, 0.0)),
        ("cosface", {}, lambda e, y, p, m: naive_margin_softmax(e, y, p, 23.0, 1.0, 0.0, 0.1)),
        ("sphereface", {}, lambda e, y, p, m: naive_margin_softmax(e, y, p, 30.0, 1.05, 0.0, 0.0)),
        ("proxy_anchor", {}, lambda e, y, p, m: naive_proxy_anchor(e, y, p, 32.0, 0.1)),
    ],
)
def test_modules_match_naive_reference(name, kwargs, naive):
    torch.manual_seed(0)
    emb, labels, _ = make_batch(batch_size=16, num_classes=6, dim=8, seed=7, dtype=torch.float32)
    loss = L.build_loss(name, num_classes=6, embedding_dim=8, **kwargs)
    if loss.bias is not None:
        with torch.no_grad():
            loss.bias.normal_()
    value = loss(emb, labels)
    assert value.dtype == torch.float32
    want = naive(emb.double(), labels, loss.proxies.detach().double(), loss)
    assert value.item() == pytest.approx(want, rel=2e-5, abs=1e-5)
