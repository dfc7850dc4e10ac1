from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from dmllab.models import EmbeddingHead, GlobalKMaxPool2d, ScaledBatchNorm1d


def _feature_map(batch: int = 8, channels: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, channels, 3, 3, generator=torch.Generator().manual_seed(seed))


def test_plain_head_is_pool_then_linear():
    head = EmbeddingHead(16, 4)
    x = _feature_map()
    expected = x.mean(dim=(2, 3)) @ head.linear.weight.T + head.linear.bias
    torch.testing.assert_close(head(x), expected)
    assert head.norm_position is None


def test_layernorm_head_has_no_norm_parameters_and_normalises_pooled_features():
    head = EmbeddingHead(16, 4, pooling="max", norm="layernorm")
    assert head.norm_position == "pre"  # ProxyNCA++ +norm: on the pooled 2048-d features
    assert isinstance(head.pre_norm, nn.LayerNorm) and list(head.pre_norm.parameters()) == []
    assert sum(p.numel() for p in head.parameters()) == 16 * 4 + 4  # only the Linear layer
    x = _feature_map()
    pooled = x.amax(dim=(2, 3))
    normed = (pooled - pooled.mean(1, keepdim=True)) / torch.sqrt(
        pooled.var(1, unbiased=False, keepdim=True) + 1e-5
    )
    torch.testing.assert_close(head(x), normed @ head.linear.weight.T + head.linear.bias)


def test_batchnorm_head_is_heated_up_eq13_on_the_embedding():
    head = EmbeddingHead(16, 4, norm="batchnorm")
    assert head.norm_position == "post"  # Heated-up Softmax Eq. 13: on the k-dim embedding f
    # BN "without the learned scale" (Eq. 13, footnote 2): the learned shift beta (D values) stays.
    assert sum(p.numel() for p in head.parameters()) == 16 * 4 + 4 + 4
    head.train()
    beta = torch.tensor([0.5, -1.0, 2.0, 0.25])
    with torch.no_grad():
        head.post_norm.shift.copy_(beta)
    x = _feature_map()
    f = head.linear(x.mean(dim=(2, 3)))  # (B, D)
    bn = (f - f.mean(0)) / torch.sqrt(f.var(0, unbiased=False) + 1e-5) + beta
    torch.testing.assert_close(head(x), bn / math.sqrt(4))
    head(x).sum().backward()
    assert head.post_norm.shift.grad is not None  # learnable


def test_batchnorm_pre_divides_by_sqrt_of_channels():
    head = EmbeddingHead(16, 4, norm="batchnorm", norm_position="pre")
    assert isinstance(head.pre_norm, ScaledBatchNorm1d) and isinstance(head.post_norm, nn.Identity)
    x = _feature_map()
    pooled = x.mean(dim=(2, 3))
    bn = (pooled - pooled.mean(0)) / torch.sqrt(pooled.var(0, unbiased=False) + 1e-5) / math.sqrt(16)
    torch.testing.assert_close(head(x), bn @ head.linear.weight.T + head.linear.bias)


def test_scaled_batchnorm_has_norm_close_to_one():
    torch.manual_seed(0)
    out = ScaledBatchNorm1d(256)(torch.randn(512, 256) * 7 + 3)
    assert abs(out.norm(dim=1).mean().item() - 1.0) < 0.02


def test_layernorm_post_position():
    head = EmbeddingHead(16, 8, norm="layernorm", norm_position="post")
    out = head(_feature_map())
    torch.testing.assert_close(out.mean(1), torch.zeros(8), atol=1e-5, rtol=0)


def test_l2_normalised_embedding():
    head = EmbeddingHead(16, 5, pooling="kmax", k=3, l2_normalize=True)
    assert isinstance(head.pool, GlobalKMaxPool2d)
    out = head(_feature_map())
    torch.testing.assert_close(out.norm(dim=1), torch.ones(8))


def test_default_init_is_pytorch_linear():
    torch.manual_seed(7)
    head = EmbeddingHead(16, 4, norm="layernorm")
    torch.manual_seed(7)
    reference = nn.Linear(16, 4)
    torch.testing.assert_close(head.linear.weight, reference.weight)
    torch.testing.assert_close(head.linear.bias, reference.bias)


def test_kaiming_init_fan_out_and_zero_bias():
    torch.manual_seed(0)
    head = EmbeddingHead(512, 64, init="kaiming")
    assert torch.count_nonzero(head.linear.bias) == 0
    expected_std = math.sqrt(2.0 / 64)  # fan_out of a (64, 512) Linear weight is 64
    assert abs(head.linear.weight.std().item() / expected_std - 1) < 0.05


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"norm": "groupnorm"}, "valid norms: none, layernorm, batchnorm"),
        ({"init": "xavier"}, "valid inits"),
        ({"norm": "layernorm", "norm_position": "middle"}, "valid: pre, post"),
        ({"norm_position": "pre"}, "needs a norm"),
        ({"pooling": "kmax"}, "needs k"),
    ],
)
def test_head_rejects_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EmbeddingHead(16, 4, **kwargs)
