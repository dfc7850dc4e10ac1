"""How the DataLoader path's batches reach the device (:class:`dmllab.data.loaders.RunData` uses these).

* :class:`DevicePrefetcher`: host batches -> the network's input on the device. On CUDA the next batch is copied
  from pinned memory on a side stream while the current one trains, then converted there (uint8 -> float32,
  normalised: :func:`dmllab.data.transforms.normalise_uint8`) and laid out channels_last; on the CPU the same
  conversion runs inline. The DataLoader's workers decode and crop to uint8 only.
* :class:`EpochStream` with :class:`SeededSamples`: the batch sampler of one DataLoader iterator that spans the
  epochs of a stage: epoch e's batches, then e + 1's, ..., so the workers go on decoding across an epoch boundary
  (and during a validation) instead of draining and refilling. Every sample is augmented from its own seed
  (epoch seed and position), so the batches do not depend on which worker decodes them or when.
* :class:`SplitCache`: an evaluation split's batches kept in host memory as the loader gave them (uint8 for the
  full-size presets; the test transform draws nothing) up to :data:`EVAL_CACHE_BYTES`, so a split is decoded
  once per run, not at every validation.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

#: The most bytes of decoded images one evaluation split keeps in host memory (:class:`SplitCache`): 4 GiB holds
#: CUB's or Cars' test split at 256 px as uint8 (0.6-1.6 GB); a larger split (SOP's 60,502 test images: 11.9 GB)
#: is decoded again at each evaluation.
EVAL_CACHE_BYTES = 4 * 2**30


class DevicePrefetcher:
    """``(images, labels)`` host batches -> the same on ``device``, images as float32 network input (uint8 ones
    normalised by :func:`~dmllab.data.transforms.normalise_uint8`, float ones as they are), channels_last where
    asked. On CUDA one batch ahead: the copy and conversion of batch k + 1 run on a side stream while batch k
    trains (timm's PrefetchLoader); elsewhere inline. ``total``: the number of batches (a progress bar's)."""

    def __init__(
        self, batches: Iterable[Any], device: torch.device, channels_last: bool, total: int | None = None
    ) -> None:
        self.batches, self.device, self.channels_last = batches, torch.device(device), channels_last
        self.total = len(batches) if total is None and hasattr(batches, "__len__") else total

    def convert(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch on the device: copied without waiting (pinned memory), normalised, laid out."""
        from dmllab.data.transforms import normalise_uint8

        x = normalise_uint8(images.to(self.device, non_blocking=True))
        if self.channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.as_tensor(labels).to(self.device, non_blocking=True)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.device.type != "cuda":
            for images, labels, *_ in self.batches:
                yield self.convert(images, labels)
            return
        side = torch.cuda.Stream(self.device)
        main = torch.cuda.current_stream(self.device)
        ready = None
        for images, labels, *_ in self.batches:
            with torch.cuda.stream(side):
                nxt = self.convert(images, labels)
            if ready is not None:
                yield ready
            main.wait_stream(side)
            for t in nxt:
                t.record_stream(main)  # allocated on the side stream, used on the main one
            ready = nxt
        if ready is not None:
            yield ready


class SeededSamples(Dataset):
    """``dataset[index]`` after seeding torch, numpy and random from the sample's own seed; items are
    ``(index, seed)`` pairs (:class:`EpochStream`)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: tuple[int, int]) -> Any:
        index, seed = item
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        return self.dataset[index]


def sample_seeds(batches: Iterable[Iterable[int]], seed: int) -> Iterator[list[tuple[int, int]]]:
    """``batches`` as lists of ``(index, seed)``: the sample at position p of the epoch gets
    ``(seed * 1_000_003 + p) mod (2^63 - 1)`` (``seed``: the epoch's, :func:`dmllab.rng.epoch_seed`)."""
    pos = 0
    for batch in batches:
        batch = [int(i) for i in batch]
        yield [(i, (seed * 1_000_003 + pos + k) % (2**63 - 1)) for k, i in enumerate(batch)]
        pos += len(batch)


class EpochStream:
    """The batch sampler of a DataLoader iterator spanning epochs ``first``, ``first + 1``, ... ``until`` (None:
    no end): epoch e's batches (:meth:`batches`, ``epoch_batches(e)``, computed once) with their sample seeds
    (:func:`sample_seeds` with ``epoch_seed(e)``), then epoch e + 1's. An epoch's batches depend on its epoch only,
    never on when the loader asks for them."""

    def __init__(
        self,
        epoch_batches: Callable[[int], Iterable[Iterable[int]]],
        epoch_seed: Callable[[int], int],
        first: int,
        until: int | None = None,
    ) -> None:
        self.epoch_batches, self.epoch_seed = epoch_batches, epoch_seed
        self.first, self.until = first, until
        self._epochs: dict[int, list[list[int]]] = {}

    def batches(self, epoch: int) -> list[list[int]]:
        """The index batches of ``epoch``."""
        if epoch not in self._epochs:
            self._epochs[epoch] = [[int(i) for i in b] for b in self.epoch_batches(epoch)]
        return self._epochs[epoch]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        epoch = self.first
        while self.until is None or epoch <= self.until:
            yield from sample_seeds(self.batches(epoch), self.epoch_seed(epoch))
            for old in [e for e in self._epochs if e < epoch]:
                del self._epochs[old]
            epoch += 1


class SplitCache:
    """Evaluation batches kept in host memory: :meth:`record` passes a loader's batches through and keeps them
    when the whole split fits in ``budget`` bytes; :meth:`batches` serves them again, ``batch_size`` at a time.
    The copy is pageable memory (a process that trains run after run does not accumulate gigabytes of page-locked
    memory): its batches reach the device through a staged copy, once per evaluation."""

    def __init__(self, budget: int = EVAL_CACHE_BYTES) -> None:
        self.budget = budget
        self.splits: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}

    def __contains__(self, key: Any) -> bool:
        return key in self.splits

    def record(
        self, key: Any, batches: Iterable[Any], size: int
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield ``batches`` (of a split of ``size`` images); once all are through, keep them under ``key`` if they
        fit the budget."""
        images = labels = None
        filled = 0
        for x, y, *_ in batches:
            if filled == 0 and x.element_size() * x[0].numel() * size <= self.budget:
                images = torch.empty((size, *x.shape[1:]), dtype=x.dtype)
                labels = torch.empty((size,), dtype=torch.long)
            if images is not None and filled + len(x) <= size:
                images[filled : filled + len(x)] = x
                labels[filled : filled + len(x)] = torch.as_tensor(y)
            filled += len(x)
            yield x, y
        if images is not None and filled == size:
            self.splits[key] = (images, labels)

    def batches(self, key: Any, batch_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        images, labels = self.splits[key]
        for i in range(0, len(labels), batch_size):
            yield images[i : i + batch_size], labels[i : i + batch_size]
