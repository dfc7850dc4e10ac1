"""Registry contract: every loss builds uniformly, is finite, backpropagates, and every parameter is trainable."""

from __future__ import annotations

import math

import pytest
import torch

import dmllab.losses as L

C, D = 8, 16
REQUIRED = {"margin_softmax": {"scale": 23.0}}  # the only loss without a default for a hyper-parameter


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(32, D, generator=g)
    labels = (torch.arange(32) % C)[torch.randperm(32, generator=g)]  # 8 classes x 4 images
    return emb, labels


def test_every_loss_registers_where_it_is_defined():
    """Registration at the definition (``@LOSSES.register(name)`` on the class): every registered factory lives in
    a module of ``dmllab.losses``, so the contract tests below, which loop over the registry, see a new loss
    without a list of names to copy here."""
    assert L.list_losses() == sorted(L.LOSSES) and len(L.LOSSES) == len(set(L.list_losses()))
    for name in L.LOSSES:
        factory = L.LOSSES.get(name)
        defined = getattr(
            factory, "func", factory
        )  # sphereface & co: partial(MarginSoftmaxLoss.from_preset, name)
        assert defined.__module__.startswith("dmllab.losses."), (name, defined.__module__)
    assert set(L.MARGIN_SOFTMAX_PRESETS) <= set(L.LOSSES)


class _TwoPart(torch.nn.Module):
    """``model`` as a backbone (identity here) and a head, for manifold mixup's feature map."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.backbone, self.head = torch.nn.Identity(), model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


@pytest.mark.parametrize("name", L.list_losses())
def test_every_loss_contract(name):
    torch.manual_seed(0)
    loss = L.build_loss(name, num_classes=C, embedding_dim=D, **REQUIRED.get(name, {}))
    assert isinstance(loss.has_proxies, bool)
    params = list(loss.parameters())
    # Parameters reachable by an optimiser built from loss.parameters() (Proxy Anchor repo #25 trap).
    model = torch.nn.Linear(D, D)
    opt = torch.optim.SGD([{"params": model.parameters()}, {"params": loss.parameters(), "lr": 0.1}], lr=0.01)
    in_groups = {id(p) for group in opt.param_groups for p in group["params"]}
    assert all(id(p) in in_groups for p in params)

    emb, labels = _batch()
    if hasattr(loss, "embed"):  # a training-step regulariser (mixup) embeds the batch itself
        mixed, draw = loss.embed(_TwoPart(model), emb)
        value = loss(mixed, labels, draw)
    else:
        value = loss(model(emb), labels)
    assert value.ndim == 0 and value.dtype == torch.float32
    assert math.isfinite(value.item())
    value.backward()
    assert model.weight.grad is not None and model.weight.grad.abs().sum() > 0
    for p in params:
        assert p.grad is not None, f"{name}: a loss parameter received no gradient"
        assert torch.isfinite(p.grad).all()
    if hasattr(loss, "embed"):
        loss = loss.base  # the wrapped loss holds the proxies
    if loss.has_proxies:
        rows = C * getattr(loss, "centers_per_class", 1)  # SoftTriple: K centres per class
        assert loss.proxies.shape == (rows, D) and any(p is loss.proxies for p in params)
        assert loss.proxies.grad.abs().sum() > 0
        logits = loss.logits(emb)
        assert logits.shape == (32, C) and logits.dtype == torch.float32
    before = [p.detach().clone() for p in params]
    opt.step()
    assert all(not torch.equal(b, p) for b, p in zip(before, params, strict=True) if p.grad.abs().sum() > 0)


def test_margin_loss_learns_class_specific_beta():
    loss = L.build_loss("margin", num_classes=C, embedding_dim=D)
    (beta,) = list(loss.parameters())
    assert beta.shape == (C,) and torch.allclose(beta, torch.full((C,), 1.2))


def test_unknown_name_lists_valid_names():
    with pytest.raises(KeyError) as info:
        L.build_loss("proxy_ancor", num_classes=C, embedding_dim=D)
    message = str(info.value)
    for name in L.list_losses():
        assert name in message


def test_proxy_synthesis_factory_forwards_base_kwargs():
    loss = L.build_loss(
        "proxy_synthesis",
        num_classes=C,
        embedding_dim=D,
        base="proxynca",
        alpha=0.2,
        mu=0.5,
        temperature=1 / 12,
    )
    assert isinstance(loss, L.ProxySynthesis) and isinstance(loss.base, L.ProxyNCALoss)
    assert (loss.alpha, loss.mu, loss.base.temperature) == (0.2, 0.5, 1 / 12)
    assert isinstance(L.build_loss("proxy_synthesis", num_classes=C, embedding_dim=D).base, L.NormSoftmaxLoss)
    with pytest.raises(ValueError, match="proxy loss"):
        L.build_loss("proxy_synthesis", num_classes=C, embedding_dim=D, base="multi_similarity")
    with pytest.raises(ValueError, match="itself"):
        L.build_loss("proxy_synthesis", num_classes=C, embedding_dim=D, base="proxy_synthesis")
    with pytest.raises(KeyError, match="valid loss names"):
        L.build_loss("proxy_synthesis", num_classes=C, embedding_dim=D, base="nope")


def test_margin_softmax_presets_are_the_ps_paper_values():
    # Proxy Synthesis supplement: SphereFace (30, 1.05, 0, 0), CosFace (23, 1, 0, 0.1), ArcFace (23, 1, 0.1, 0).
    expected = {
        "sphereface": (30.0, 1.05, 0.0, 0.0),
        "cosface": (23.0, 1.0, 0.0, 0.1),
        "arcface": (23.0, 1.0, 0.1, 0.0),
    }
    for name, values in expected.items():
        loss = L.build_loss(name, num_classes=C, embedding_dim=D)
        assert (loss.scale, loss.m1, loss.m2, loss.m3) == values
    assert L.build_loss("arcface", num_classes=C, embedding_dim=D, m2=0.3).m2 == 0.3


def test_defaults_follow_the_papers():
    assert L.ProxyNCALoss(C, D).temperature == pytest.approx(1 / 9) and L.ProxyNCALoss(C, D).prob
    assert L.NormSoftmaxLoss(C, D).temperature == 0.5
    pa = L.ProxyAnchorLoss(C, D)
    assert (pa.alpha, pa.delta) == (32.0, 0.1)
    hs = L.HeatedSoftmaxLoss(C, D)
    assert hs.alpha == 16.0 and hs.bias is not None
    hs.alpha = 4.0  # the heating-up schedule changes it
    assert hs.logits(torch.ones(1, D)).shape == (1, C)


def test_proxy_initialisation():
    torch.manual_seed(0)
    nca = L.ProxyNCALoss(500, 64)  # randn / 8
    assert nca.proxies.std().item() == pytest.approx(1 / 8, rel=0.05)
    pa = L.ProxyAnchorLoss(500, 64)  # kaiming_normal_, fan_out = num_classes
    assert pa.proxies.std().item() == pytest.approx(math.sqrt(2 / 500), rel=0.05)
    with pytest.raises(ValueError, match="proxy_init"):
        L.NormSoftmaxLoss(C, D, proxy_init="zeros")


def test_heated_softmax_logits():
    loss = L.HeatedSoftmaxLoss(C, D, alpha=16.0)
    f = torch.nn.functional.normalize(torch.randn(4, D), dim=1)
    w = torch.nn.functional.normalize(loss.proxies.detach(), dim=1)
    torch.testing.assert_close(loss.logits(f), 16.0 * f @ w.t() + loss.bias.detach())
    no_bias = L.HeatedSoftmaxLoss(C, D, bias=False)
    assert no_bias.bias is None and len(list(no_bias.parameters())) == 1


def test_a_wrapper_nests_the_spec_of_what_it_wraps():
    from dmllab.spec import Spec

    spec = Spec(
        "input_mixup",
        {"alpha": 0.3},
        wraps=Spec("proxy_synthesis", {"alpha": 0.4}, wraps=Spec("proxy_anchor", {"alpha": 16.0})),
    )
    loss = L.build_loss(spec, num_classes=C, embedding_dim=D)
    # three alphas, each its own component's: mixup's Beta shape, PS's Beta shape, Proxy Anchor's scale
    assert (loss.alpha, loss.base.alpha, loss.base.base.alpha) == (0.3, 0.4, 16.0)
    with pytest.raises(ValueError, match="wraps another loss"):
        L.build_loss(Spec("proxy_synthesis"), num_classes=C, embedding_dim=D)
    with pytest.raises(ValueError, match="wraps no other loss"):
        L.build_loss(Spec("proxynca", wraps=Spec("normsoftmax")), num_classes=C, embedding_dim=D)
