"""ClassBalancedSampler invariants (official-code.md "Batches")."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from dmllab.data import ClassBalancedSampler


def _labels(sizes: dict[int, int]) -> list[int]:
    labels = [c for c, n in sizes.items() for _ in range(n)]
    np.random.default_rng(0).shuffle(labels)  # indices of a class are scattered, as in a real index
    return labels


def test_rejects_bad_arguments() -> None:
    labels = _labels({c: 5 for c in range(10)})
    with pytest.raises(ValueError, match="divisible"):
        ClassBalancedSampler(labels, batch_size=10, per_class=4)
    with pytest.raises(ValueError, match="distinct classes"):
        ClassBalancedSampler(_labels({0: 20, 1: 20}), batch_size=12, per_class=4)
    with pytest.raises(ValueError, match="fewer than one batch"):
        ClassBalancedSampler(labels[:7], batch_size=8, per_class=4)


@pytest.mark.parametrize(("batch_size", "per_class"), [(32, 4), (12, 3), (8, 1)])
def test_batches_hold_distinct_classes_with_per_class_images(batch_size: int, per_class: int) -> None:
    sizes = {c * 7 + 3: 5 + c % 9 for c in range(30)}  # non-contiguous labels, uneven sizes
    labels = _labels(sizes)
    sampler = ClassBalancedSampler(labels, batch_size, per_class, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler) == len(labels) // batch_size
    for batch in batches:
        assert len(batch) == batch_size
        counts = Counter(labels[i] for i in batch)
        assert len(counts) == batch_size // per_class
        assert set(counts.values()) == {per_class}
        assert len(set(batch)) == batch_size  # no image twice: every class has >= per_class images


def test_deterministic_from_seed_and_epoch() -> None:
    labels = _labels({c: 6 for c in range(20)})
    a, b = ClassBalancedSampler(labels, 16, 4, seed=1), ClassBalancedSampler(labels, 16, 4, seed=1)
    assert list(a) == list(b) == list(a)  # re-iterating the same epoch repeats it
    a.set_epoch(1)
    epoch1 = list(a)
    assert epoch1 != list(b)
    b.set_epoch(1)
    assert list(b) == epoch1
    assert list(ClassBalancedSampler(labels, 16, 4, seed=2)) != list(
        ClassBalancedSampler(labels, 16, 4, seed=1)
    )


def test_per_class_lists_are_reshuffled_when_exhausted() -> None:
    # 2 classes, 2 of each per batch: class 0 is in every batch and cycles through its 5 images ~5 times.
    labels = _labels({0: 5, 1: 45})
    sampler = ClassBalancedSampler(labels, batch_size=4, per_class=2, seed=0)
    stream = {0: [], 1: []}
    for batch in sampler:
        for i in batch:
            stream[labels[i]].append(i)
    for c, draws in stream.items():
        members = [i for i, y in enumerate(labels) if y == c]
        # every image once per pass: running counts never differ by more than one (no image skipped or favoured)
        seen = Counter()
        for i in draws:
            seen[i] += 1
            assert max(seen.values()) - min(seen.get(j, 0) for j in members) <= 1
    passes = [tuple(stream[0][k : k + 5]) for k in range(0, 20, 5)]
    assert all(sorted(p) == sorted(passes[0]) for p in passes)  # every pass is a permutation of the class
    assert len(set(passes)) > 1  # the order changes between passes (reshuffled), not a fixed cycle


def test_classes_smaller_than_per_class_repeat_their_images() -> None:
    labels = _labels({0: 2, 1: 1, 2: 8, 3: 8})
    sampler = ClassBalancedSampler(labels, batch_size=16, per_class=4, seed=0)
    for batch in sampler:
        by_class: dict[int, list[int]] = {}
        for i in batch:
            by_class.setdefault(labels[i], []).append(i)
        assert {len(v) for v in by_class.values()} == {4}
        small = by_class[0]
        assert set(small) == {i for i, y in enumerate(labels) if y == 0}  # both images, each twice
        assert sorted(Counter(small).values()) == [2, 2]
        assert set(by_class[1]) == {labels.index(1)}


def test_classes_are_drawn_uniformly() -> None:
    labels = _labels({0: 200, 1: 5, 2: 5, 3: 5})  # one big class must not dominate
    sampler = ClassBalancedSampler(labels, batch_size=2, per_class=1, seed=0)
    picks = Counter()
    for epoch in range(5):
        sampler.set_epoch(epoch)
        picks.update(labels[i] for batch in sampler for i in batch)
    freq = np.array([picks[c] for c in range(4)]) / sum(picks.values())
    np.testing.assert_allclose(freq, 0.25, atol=0.03)


def test_works_as_dataloader_batch_sampler() -> None:
    labels = _labels({c: 4 for c in range(8)})
    ds = TensorDataset(torch.arange(len(labels)), torch.tensor(labels))
    loader = DataLoader(ds, batch_sampler=ClassBalancedSampler(labels, 8, 4))
    batches = list(loader)
    assert len(batches) == 4
    for idx, y in batches:
        assert idx.shape == (8,) and len(set(y.tolist())) == 2
