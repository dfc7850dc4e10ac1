from __future__ import annotations

import pytest
import torch

from dmllab.models import (
    GlobalAvgMaxPool2d,
    GlobalAvgPool2d,
    GlobalKMaxPool2d,
    GlobalMaxPool2d,
    build_pooling,
    global_kmax_pool2d,
    list_poolings,
)


def naive_kmax(x: torch.Tensor, k: int) -> torch.Tensor:
    """ProxyNCA++ Eq. 7 written out: per image and channel, sort the H*W activations and average the k largest."""
    batch, channels = x.shape[:2]
    out = torch.empty(batch, channels, dtype=x.dtype)
    for b in range(batch):
        for c in range(channels):
            values = sorted(x[b, c].flatten().tolist(), reverse=True)
            out[b, c] = sum(values[:k]) / k
    return out


@pytest.mark.parametrize("k", [1, 2, 5, 20])
def test_kmax_matches_sort_reference(k):
    x = torch.randn(3, 4, 5, 4, generator=torch.Generator().manual_seed(k), dtype=torch.float64)
    torch.testing.assert_close(GlobalKMaxPool2d(k)(x), naive_kmax(x, k))


def test_kmax_channels_last_input_matches_contiguous():
    x = torch.randn(2, 6, 5, 5, generator=torch.Generator().manual_seed(0))
    expected = global_kmax_pool2d(x, 3)
    torch.testing.assert_close(global_kmax_pool2d(x.to(memory_format=torch.channels_last), 3), expected)
    torch.testing.assert_close(expected, naive_kmax(x, 3))


def test_kmax_extremes_are_max_and_average_pooling():
    x = torch.randn(2, 3, 4, 6, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(GlobalKMaxPool2d(1)(x), x.amax(dim=(2, 3)))
    torch.testing.assert_close(GlobalKMaxPool2d(24)(x), x.mean(dim=(2, 3)))


def test_kmax_gradient_reaches_only_the_top_k():
    k = 3
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x.requires_grad_(True)
    GlobalKMaxPool2d(k)(x).sum().backward()
    flat = x.detach().flatten(2)
    threshold = flat.sort(dim=2, descending=True).values[:, :, k - 1 : k]  # k-th largest, (B, C, 1)
    expected = (flat >= threshold).to(flat.dtype) / k
    torch.testing.assert_close(x.grad.flatten(2), expected)
    assert int((x.grad != 0).sum()) == 2 * 3 * k


def test_kmax_gradcheck():
    x = torch.randn(2, 2, 3, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    x.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: global_kmax_pool2d(t, 4), (x,))


def test_kmax_larger_than_map_names_the_map_size():
    with pytest.raises(ValueError, match=r"3x3 = 9"):
        GlobalKMaxPool2d(10)(torch.zeros(1, 2, 3, 3))


@pytest.mark.parametrize("bad_k", [0, -1, 2.5, True])
def test_kmax_rejects_bad_k(bad_k):
    with pytest.raises(ValueError, match="k"):
        GlobalKMaxPool2d(bad_k)


def test_pooling_rejects_non_feature_maps():
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        GlobalAvgPool2d()(torch.zeros(2, 3))


def test_simple_poolings():
    x = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(GlobalAvgPool2d()(x), x.mean(dim=(2, 3)))
    torch.testing.assert_close(GlobalMaxPool2d()(x), x.amax(dim=(2, 3)))
    expected = torch.stack([torch.stack([c.mean() + c.max() for c in img]) for img in x])
    torch.testing.assert_close(GlobalAvgMaxPool2d()(x), expected)


def test_build_pooling_registry():
    assert list_poolings() == ["avg", "avg+max", "kmax", "max"]
    assert isinstance(build_pooling("avg"), GlobalAvgPool2d)
    assert isinstance(build_pooling("max"), GlobalMaxPool2d)
    assert isinstance(build_pooling("avg+max"), GlobalAvgMaxPool2d)
    pool = build_pooling("kmax", k=4)
    assert isinstance(pool, GlobalKMaxPool2d) and pool.k == 4


def test_build_pooling_unknown_name_lists_valid_ones():
    with pytest.raises(KeyError, match=r"avg, avg\+max, kmax, max"):
        build_pooling("gem")


def test_build_pooling_k_only_for_kmax():
    with pytest.raises(ValueError, match="needs k"):
        build_pooling("kmax")
    with pytest.raises(ValueError, match="only used by pooling 'kmax'"):
        build_pooling("avg", k=3)


def test_kmax_accepts_numpy_integers():
    import numpy as np

    assert GlobalKMaxPool2d(np.int64(2)).k == 2
