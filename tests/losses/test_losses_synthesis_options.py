"""Proxy Synthesis options: static lambda (Table 2a), composition (Table 1), random pairing."""

from __future__ import annotations

import pytest
import torch
from losses_naive import norm_softmax as naive_norm_softmax

import dmllab.losses as L
from dmllab.losses import COMPOSITIONS, ProxySynthesis, synthesis_partners

C, D, T = 4, 5, 0.5


def _batch(seed=0, b=8):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(b, D, generator=g, dtype=torch.float64)
    labels = (torch.arange(b) % C)[torch.randperm(b, generator=g)]
    return emb, labels


def _naive_ps(emb, labels, proxies, lam, anchors, partners, used_emb, used_prox):
    """X^ and P^ of PS Eq. 4 written out, then the naive NormSoftMax (ProxyNCA++ Eq. 9)."""
    e = [x / x.norm() for x in emb]
    p = [q / q.norm() for q in proxies]
    xs, ys, ps = [], [], []
    synth_e = [
        lam * e[i] + (1 - lam) * e[j] for i, j in zip(anchors.tolist(), partners.tolist(), strict=True)
    ]
    synth_p = [
        lam * p[labels[i]] + (1 - lam) * p[labels[j]]
        for i, j in zip(anchors.tolist(), partners.tolist(), strict=True)
    ]
    if used_prox in ("original", "both"):
        ps += p
    first = len(ps)
    if used_prox in ("synthetic", "both"):
        ps += synth_p
    if used_emb in ("original", "both"):
        xs += e
        ys += labels.tolist()
    if used_emb in ("synthetic", "both"):
        xs += synth_e
        ys += [first + k for k in range(len(synth_e))] if used_prox == "both" else list(range(len(synth_e)))
    return naive_norm_softmax(torch.stack(xs), torch.tensor(ys), torch.stack(ps), T)


@pytest.mark.parametrize("composition", sorted(COMPOSITIONS))
def test_composition_matches_table1_definition(composition):
    used_emb, used_prox = composition
    torch.manual_seed(0)
    base = L.NormSoftmaxLoss(C, D, temperature=T)
    ps = ProxySynthesis(base, lam=0.3, embeddings=used_emb, proxies=used_prox)
    emb, labels = _batch(seed=1)
    value = ps(emb, labels)
    assert ps.composition == COMPOSITIONS[composition]
    if ps.composition == "M1":
        assert ps.last_lam is None
        torch.testing.assert_close(value, base(emb, labels))
        return
    anchors, partners = ps.last_partners
    ref = _naive_ps(emb, labels, base.proxies.detach().double(), 0.3, anchors, partners, used_emb, used_prox)
    assert value.item() == pytest.approx(ref, rel=1e-5)


@pytest.mark.parametrize("bad", [("synthetic", "original"), ("original", "synthetic"), ("both", "original")])
def test_invalid_compositions_raise(bad):
    with pytest.raises(ValueError, match="composition"):
        ProxySynthesis(L.NormSoftmaxLoss(C, D), embeddings=bad[0], proxies=bad[1])


def test_static_lambda_is_used_every_batch_and_call_overrides():
    ps = ProxySynthesis(L.NormSoftmaxLoss(C, D), lam=0.2, generator=torch.Generator().manual_seed(0))
    emb, labels = _batch()
    for _ in range(3):
        ps(emb, labels)
        assert ps.last_lam == 0.2
    ps(emb, labels, lam=0.7)
    assert ps.last_lam == 0.7
    with pytest.raises(ValueError, match="lam"):
        ProxySynthesis(L.NormSoftmaxLoss(C, D), lam=1.5)


def test_random_pairing_partners_differ_and_are_uniform():
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(8, 8)
    for _ in range(400):
        anchors, partners = synthesis_partners(labels, 8, pairing="random", generator=g)
        assert (labels[anchors] != labels[partners]).all()
        counts[anchors, partners] += 1
    # anchor 0 (class 0): each of the 6 other-class samples about 400/6 times
    row = counts[0, 2:]
    assert row.min() > 40 and row.max() < 95 and counts[0, :2].sum() == 0
    # the sorted pairing is deterministic and class 0 only meets class 1 (the next label)
    _, sorted_partners = synthesis_partners(labels, 8)
    assert set(labels[sorted_partners[:2]].tolist()) == {1}
    with pytest.raises(ValueError, match="pairing"):
        synthesis_partners(labels, 8, pairing="nearest")


def test_random_pairing_reproducible_with_generator_and_factory_options():
    emb, labels = _batch(seed=4)
    values = []
    for _ in range(2):
        torch.manual_seed(0)
        loss = L.build_loss(
            "proxy_synthesis",
            num_classes=C,
            embedding_dim=D,
            base="normsoftmax",
            pairing="random",
            lam=0.4,
            generator=torch.Generator().manual_seed(5),
            embeddings="synthetic",
            proxies="both",
        )
        values.append(loss(emb, labels))
        assert loss.composition == "M4" and loss.pairing == "random"
    torch.testing.assert_close(values[0], values[1])
