"""Proxy Synthesis (PS Eq. 4-5): partners, lambda, number of synthetics, and the loss on the augmented batch."""

from __future__ import annotations

import math

import pytest
import torch
from losses_naive import linear_softmax as naive_linear_softmax
from losses_naive import make_batch
from losses_naive import norm_softmax as naive_norm_softmax
from losses_naive import proxy_anchor as naive_proxy_anchor

import dmllab.losses as L
from dmllab.losses import ProxySynthesis, sample_beta, synthesis_partners

LABEL_SETS = [
    torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]),  # balanced, sorted
    torch.tensor([3, 1, 3, 2, 1, 2, 3, 1]),  # shuffled
    torch.tensor([5, 5, 5, 5, 5, 5, 5, 1]),  # one class dominates (> B/2)
    torch.tensor([0, 1]),
    torch.tensor([4, 0, 4, 4, 2, 0, 9, 9, 9, 9, 9]),
]


@pytest.mark.parametrize("labels", LABEL_SETS)
@pytest.mark.parametrize("mu", [0.5, 1.0, 2.5])
def test_partners_always_from_different_classes(labels, mu):
    k = int(mu * len(labels))
    anchors, partners = synthesis_partners(labels, k)
    assert anchors.shape == partners.shape == (k,)
    assert (labels[anchors] != labels[partners]).all()
    assert anchors.tolist() == [i % len(labels) for i in range(k)]


def test_random_batches_partners_differ():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        b = int(torch.randint(2, 40, (1,), generator=g))
        labels = torch.randint(0, 5, (b,), generator=g)
        if labels.unique().numel() < 2:
            continue
        anchors, partners = synthesis_partners(labels, 2 * b)
        assert (labels[anchors] != labels[partners]).all()


def test_balanced_batch_is_label_sorted_roll_by_class_size():
    labels = torch.tensor([2, 0, 1, 2, 0, 1, 1, 2, 0])  # 3 classes x 3
    order = torch.argsort(labels, stable=True)
    _, partners = synthesis_partners(labels, 9)
    rolled = {int(order[s]): int(order[(s + 3) % 9]) for s in range(9)}
    assert partners.tolist() == [rolled[i] for i in range(9)]


def test_single_class_batch_raises_in_partner_function():
    with pytest.raises(ValueError, match="two classes"):
        synthesis_partners(torch.zeros(4, dtype=torch.long), 4)


def test_sample_beta_follows_beta_distribution():
    stats = pytest.importorskip("scipy.stats")
    g = torch.Generator().manual_seed(123)
    for alpha in (0.4, 2.0):
        samples = [sample_beta(alpha, g) for _ in range(3000)]
        assert all(0.0 <= s <= 1.0 for s in samples)
        assert stats.kstest(samples, stats.beta(alpha, alpha).cdf).pvalue > 1e-3
        # A wrong distribution must be rejected by the same test (so it can fail).
        assert stats.kstest(samples, stats.beta(alpha + 1.0, alpha).cdf).pvalue < 1e-3


def test_sample_beta_reproducible_with_generator():
    a = [sample_beta(0.4, torch.Generator().manual_seed(7)) for _ in range(2)]
    assert a[0] == a[1]


def test_module_draws_one_lambda_per_batch_from_generator():
    base = L.NormSoftmaxLoss(4, 8)
    ps = ProxySynthesis(base, alpha=0.4, generator=torch.Generator().manual_seed(11))
    emb, labels, _ = make_batch(batch_size=8, num_classes=4, dim=8, seed=0, dtype=torch.float32)
    ps(emb, labels)
    assert ps.last_lam == sample_beta(0.4, torch.Generator().manual_seed(11))


@pytest.mark.parametrize("mu", [0.25, 0.5, 1.0, 2.0])
def test_number_of_synthetics_is_int_mu_b(mu, monkeypatch):
    base = L.NormSoftmaxLoss(5, 8)
    seen = {}
    original = base.loss_from_proxies

    def spy(embeddings, labels, proxies, bias=None):
        seen.update(emb=embeddings.shape, labels=labels.clone(), proxies=proxies.shape)
        return original(embeddings, labels, proxies, bias)

    monkeypatch.setattr(base, "loss_from_proxies", spy)
    emb, labels, _ = make_batch(batch_size=10, num_classes=5, dim=8, seed=1, dtype=torch.float32)
    ProxySynthesis(base, mu=mu)(emb, labels, lam=0.3)
    k = int(mu * 10)
    assert seen["emb"] == (10 + k, 8)
    assert seen["proxies"] == (5 + k, 8)
    assert seen["labels"][10:].tolist() == list(range(5, 5 + k))


def _hand_built(emb, labels, proxies, lam, anchors, partners):
    """Augmented batch built with explicit loops on L2-normalised vectors (official-code mixing space)."""
    unit = lambda v: v / v.norm()  # noqa: E731
    xs = [unit(x) for x in emb]
    ps = [unit(p) for p in proxies]
    c = len(ps)
    aug_x, aug_y, aug_p = list(xs), labels.tolist(), list(ps)
    for k, (i, j) in enumerate(zip(anchors.tolist(), partners.tolist(), strict=True)):
        aug_x.append(lam * xs[i] + (1 - lam) * xs[j])
        aug_p.append(lam * ps[labels[i]] + (1 - lam) * ps[labels[j]])
        aug_y.append(c + k)
    return torch.stack(aug_x), torch.tensor(aug_y), torch.stack(aug_p)


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.8])
@pytest.mark.parametrize("mu", [0.5, 1.0])
def test_loss_equals_base_loss_on_hand_built_batch(lam, mu):
    torch.manual_seed(0)
    emb, labels, _ = make_batch(batch_size=12, num_classes=4, dim=8, seed=2, dtype=torch.float32)
    for base, naive in [
        (L.NormSoftmaxLoss(4, 8, temperature=1 / 23), lambda e, y, p: naive_norm_softmax(e, y, p, 1 / 23)),
        (L.ProxyAnchorLoss(4, 8), lambda e, y, p: naive_proxy_anchor(e, y, p, 32.0, 0.1)),
    ]:
        ps = ProxySynthesis(base, mu=mu)
        value = ps(emb, labels, lam=lam)
        anchors, partners = ps.last_partners
        assert len(anchors) == int(mu * 12)
        assert (labels[anchors] != labels[partners]).all()
        e, y, p = _hand_built(emb.double(), labels, base.proxies.detach().double(), lam, anchors, partners)
        assert value.item() == pytest.approx(naive(e, y, p), rel=1e-5)


def test_softmax_base_mixes_raw_vectors_and_bias():
    torch.manual_seed(0)
    base = L.SoftmaxLoss(3, 4)
    emb, labels, _ = make_batch(batch_size=6, num_classes=3, dim=4, seed=3, dtype=torch.float32)
    ps = ProxySynthesis(base, mu=1.0)
    value = ps(emb, labels, lam=0.25)
    anchors, partners = ps.last_partners
    w, b = base.proxies.detach().double(), base.bias.detach().double()
    e = emb.double()
    aug_e = torch.cat([e, 0.25 * e[anchors] + 0.75 * e[partners]])
    aug_w = torch.cat([w, 0.25 * w[labels[anchors]] + 0.75 * w[labels[partners]]])
    aug_b = torch.cat([b, 0.25 * b[labels[anchors]] + 0.75 * b[labels[partners]]])
    aug_y = torch.cat([labels, 3 + torch.arange(6)])
    assert value.item() == pytest.approx(naive_linear_softmax(aug_e, aug_y, aug_w, aug_b), rel=1e-5)


def test_gradients_flow_to_embeddings_and_proxies():
    base = L.ProxyNCALoss(4, 8)
    ps = ProxySynthesis(base)
    assert {id(p) for p in ps.parameters()} == {id(p) for p in base.parameters()}
    emb, labels, _ = make_batch(batch_size=8, num_classes=4, dim=8, seed=4, dtype=torch.float32)
    emb.requires_grad_(True)
    ps(emb, labels, lam=0.4).backward()
    assert emb.grad.abs().sum() > 0 and (emb.grad.abs().sum(dim=1) > 0).all()
    assert (base.proxies.grad.abs().sum(dim=1) > 0).all()
    # The synthetic proxies contribute: the gradient differs from the plain base loss's.
    g_ps = base.proxies.grad.clone()
    base.proxies.grad = None
    base(emb, labels).backward()
    assert not torch.allclose(g_ps, base.proxies.grad)


def test_single_class_batch_skips_synthesis():
    base = L.NormSoftmaxLoss(4, 8)
    ps = ProxySynthesis(base)
    emb, _, _ = make_batch(batch_size=5, num_classes=1, dim=8, seed=5, dtype=torch.float32)
    labels = torch.full((5,), 2)
    value = ps(emb, labels)
    assert ps.last_lam is None and ps.last_partners is None
    torch.testing.assert_close(value, base(emb, labels))


def test_invalid_arguments():
    base = L.NormSoftmaxLoss(4, 8)
    with pytest.raises(ValueError, match="alpha"):
        ProxySynthesis(base, alpha=0.0)
    with pytest.raises(ValueError, match="mu"):
        ProxySynthesis(base, mu=-1.0)
    with pytest.raises(ValueError, match="proxy loss"):
        ProxySynthesis(L.MarginLoss(4, 8))
    emb, labels, _ = make_batch(batch_size=8, num_classes=4, dim=8, dtype=torch.float32)
    with pytest.raises(ValueError, match="lam"):
        ProxySynthesis(base)(emb, labels, lam=1.5)
    assert not math.isnan(ProxySynthesis(base)(emb, labels).item())


def _naive_partners(labels, k, u=None):
    """The module docstring's rule, one anchor at a time: anchor i = k mod B at sorted position s of its class
    block [a, a + n) pairs with sorted position a + n + ((s - a + k // B) mod (B - n)) (mod B); with ``u``
    (random pairing) the offset is floor(u_k (B - n)) instead."""
    b = len(labels)
    order = sorted(range(b), key=lambda i: (int(labels[i]), i))
    rank = {i: s for s, i in enumerate(order)}
    partners = []
    for j in range(k):
        s = rank[j % b]
        same = [t for t in range(b) if int(labels[order[t]]) == int(labels[order[s]])]
        a, n = same[0], len(same)
        offset = (s - a + j // b) % (b - n) if u is None else min(int(u[j] * (b - n)), b - n - 1)
        partners.append(order[(a + n + offset) % b])
    return partners


@pytest.mark.parametrize("pairing", ["sorted", "random"])
def test_partners_follow_the_rule(pairing):
    g = torch.Generator().manual_seed(1)
    for _ in range(40):
        b = int(torch.randint(2, 30, (1,), generator=g))
        labels = torch.randint(0, 6, (b,), generator=g)
        if labels.unique().numel() < 2:
            continue
        k = int(torch.randint(1, 3 * b, (1,), generator=g))
        seed = int(torch.randint(0, 2**31, (1,), generator=g))
        u = torch.rand(k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).tolist()
        anchors, partners = synthesis_partners(
            labels, k, pairing=pairing, generator=torch.Generator().manual_seed(seed)
        )
        assert anchors.tolist() == [j % b for j in range(k)]
        assert partners.tolist() == _naive_partners(labels, k, u if pairing == "random" else None)


def _ps_value_and_grads(labels, *, sync_free_mode: bool, seed: int = 3):
    from dmllab.losses._validate import DeviceChecks, sync_free

    torch.manual_seed(0)
    base = L.NormSoftmaxLoss(5, 8)
    ps = ProxySynthesis(base, generator=torch.Generator().manual_seed(seed), pairing="random")
    emb = torch.randn(len(labels), 8, requires_grad=True)
    if sync_free_mode:
        with sync_free(DeviceChecks()):
            value = ps(emb, labels)
    else:
        value = ps(emb, labels)
    value.backward()
    return value.detach(), emb.grad, base.proxies.grad, base, emb


def test_sync_free_synthesis_equals_the_eager_one():
    """Inside sync_free the one-class branch is taken on the device (both losses computed, torch.where keeps
    one): a batch of several classes gives the eager value and gradients exactly."""
    labels = torch.tensor([0, 3, 3, 1, 0, 4, 1, 1])
    eager = _ps_value_and_grads(labels, sync_free_mode=False)
    free = _ps_value_and_grads(labels, sync_free_mode=True)
    for a, b in zip(eager[:3], free[:3]):
        assert torch.equal(a, b)


def test_sync_free_one_class_batch_gives_the_base_loss():
    labels = torch.full((6,), 2)
    value, emb_grad, proxy_grad, base, emb = _ps_value_and_grads(labels, sync_free_mode=True)
    emb2 = emb.detach().clone().requires_grad_(True)
    base.proxies.grad = None
    expected = base(emb2, labels)
    expected.backward()
    assert torch.equal(value, expected.detach())
    assert torch.equal(emb_grad, emb2.grad) and torch.equal(proxy_grad, base.proxies.grad)
