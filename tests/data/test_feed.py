"""How batches reach the device: the prefetcher's conversion, the epoch stream's batches and seeds, the split
cache's budget."""

from __future__ import annotations

import torch

from dmllab.data.feed import DevicePrefetcher, EpochStream, SplitCache, sample_seeds
from dmllab.data.transforms import IMAGENET_MEAN, IMAGENET_STD


def _uint8_batches(n: int = 3, b: int = 4):
    g = torch.Generator().manual_seed(0)
    return [
        (torch.randint(0, 256, (b, 3, 8, 8), generator=g, dtype=torch.uint8), torch.arange(b))
        for _ in range(n)
    ]


def test_prefetcher_normalises_uint8_and_lays_out_channels_last():
    batches = _uint8_batches()
    out = list(DevicePrefetcher(batches, torch.device("cpu"), channels_last=True))
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    assert len(out) == 3
    for (x, y), (u, v) in zip(out, batches):
        assert x.dtype == torch.float32 and x.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(x, (u.float() / 255 - mean) / std)
        assert torch.equal(y, v)
    floats = [(torch.randn(2, 3, 4, 4), torch.tensor([0, 1]))]
    ((x, _),) = DevicePrefetcher(floats, torch.device("cpu"), channels_last=False)
    assert torch.equal(x, floats[0][0])  # a v1 preset's float batch as it is


def test_epoch_stream_chains_epochs_with_their_own_seeds():
    calls = []

    def epoch_batches(e):
        calls.append(e)
        return [[e * 10 + i, e * 10 + i + 1] for i in range(0, 4, 2)]

    stream = EpochStream(epoch_batches, lambda e: 100 + e, first=2, until=4)
    items = list(stream)
    assert len(items) == 6  # 2 batches x epochs 2, 3, 4
    expected = [b for e in (2, 3, 4) for b in sample_seeds(epoch_batches(e), 100 + e)]
    assert items == expected
    assert stream.batches(5) == epoch_batches(5)


def test_split_cache_keeps_a_split_within_its_budget():
    batches = _uint8_batches(3, 4)
    size = 12
    fits = SplitCache(budget=size * 3 * 8 * 8)
    assert [x for x, _ in fits.record("val", batches, size)] == [x for x, _ in batches]
    assert "val" in fits
    again = list(fits.batches("val", 5))
    assert [len(x) for x, _ in again] == [5, 5, 2]
    assert torch.equal(torch.cat([x for x, _ in again]), torch.cat([x for x, _ in batches]))
    small = SplitCache(budget=size * 3 * 8 * 8 - 1)
    list(small.record("val", batches, size))
    assert "val" not in small
    partial = SplitCache()
    next(partial.record("val", batches, size))  # a consumer that stops early keeps nothing
    assert "val" not in partial
