"""Training batch samplers: class-balanced batches (ProxyNCA++ "+cbs"; official-code.md "Batches") and random
batches, registered in :data:`SAMPLERS` (a config's ``data.sampler``).

A class-balanced batch holds ``batch_size // per_class`` distinct classes with ``per_class`` images each
(CUB/Cars: 8 classes x 4 images; SOP/In-Shop: 64 x 3). Every sampler is built as
``SAMPLERS.get(name)(labels, batch_size, seed=..., **kwargs)`` and yields lists of indices; ``set_epoch(key,
seed)`` before each epoch selects that epoch's reproducible order (``key`` an epoch number unique within the run,
``seed`` the epoch's own seed; each sampler uses the one its procedure needs).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import BatchSampler, RandomSampler, Sampler

from dmllab.registry import Registry


class ClassBalancedSampler(Sampler[list[int]]):
    """A batch sampler: every batch draws ``batch_size // per_class`` distinct classes, ``per_class`` images each.

    Procedure (per epoch, from a generator seeded with ``(seed, epoch)``):

    * every class gets a shuffled list of its image indices;
    * a batch picks ``batch_size // per_class`` classes uniformly at random without replacement (each class
      equally likely, whatever its size);
    * for each picked class it takes the next ``per_class`` indices from that class's list. When the list
      runs out it is reshuffled and reading restarts at its beginning; images already taken for the current
      batch are moved to the end of the fresh order, so a class with at least ``per_class`` images never
      repeats an image within a batch and no leftover image is skipped.
    * A class with fewer than ``per_class`` images is read cyclically in the same way, so it still contributes
      ``per_class`` indices: all of its images, plus repeats.

    An epoch is ``len(labels) // batch_size`` batches. Iterating twice gives the same batches; call
    :meth:`set_epoch` before each epoch to get a new, reproducible order.

    Args:
        labels: class label of every image of the dataset (any hashable values).
        batch_size: images per batch; must be a multiple of ``per_class``.
        per_class: images per class in a batch.
        seed: base seed.
    """

    def __init__(self, labels: Sequence[int], batch_size: int, per_class: int, seed: int = 0) -> None:
        if per_class < 1 or batch_size < 1:
            raise ValueError(f"batch_size ({batch_size}) and per_class ({per_class}) must be positive")
        if batch_size % per_class:
            raise ValueError(f"batch_size ({batch_size}) must be divisible by per_class ({per_class})")
        labels = np.asarray(labels).reshape(-1)
        self.classes_per_batch = batch_size // per_class
        classes, inverse = np.unique(labels, return_inverse=True)
        if len(classes) < self.classes_per_batch:
            raise ValueError(
                f"{len(classes)} classes cannot fill a batch of {self.classes_per_batch} distinct classes "
                f"(batch_size {batch_size} // per_class {per_class})"
            )
        if len(labels) < batch_size:
            raise ValueError(f"{len(labels)} images are fewer than one batch of {batch_size}")
        self.class_indices = [np.flatnonzero(inverse == c) for c in range(len(classes))]
        self.num_images = len(labels)
        self.batch_size = batch_size
        self.per_class = per_class
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int, generator: torch.Generator | None = None) -> None:
        """Select the epoch whose (deterministic) batch order the next iteration yields (from ``(seed given to
        the constructor, epoch)``; the epoch's ``generator`` is not used)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_images // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        orders = [rng.permutation(idx) for idx in self.class_indices]
        positions = [0] * len(orders)
        for _ in range(len(self)):
            batch: list[int] = []
            for c in rng.choice(len(orders), size=self.classes_per_batch, replace=False):
                taken: list[int] = []
                while len(taken) < self.per_class:
                    if positions[c] == len(orders[c]):
                        orders[c] = _reshuffle(rng, self.class_indices[c], taken)
                        positions[c] = 0
                    taken.append(int(orders[c][positions[c]]))
                    positions[c] += 1
                batch.extend(taken)
            yield batch


def _reshuffle(rng: np.random.Generator, indices: np.ndarray, taken: list[int]) -> np.ndarray:
    """A fresh permutation of ``indices`` with the ones in ``taken`` (already in this batch) moved last."""
    order = rng.permutation(indices)
    if not taken:
        return order
    in_batch = np.isin(order, taken)
    return np.concatenate([order[~in_batch], order[in_batch]])


class RandomBatchSampler(Sampler[list[int]]):
    """Random batches: a uniform permutation of the images cut into ``len(labels) // batch_size`` full batches
    (torch's ``RandomSampler`` + ``BatchSampler(drop_last=True)``).

    The permutation is drawn, when iteration starts, from the generator :meth:`set_epoch` gave (the epoch's
    generator, which the data path goes on drawing augmentations from), else from one seeded with ``seed``.

    Args:
        labels: one label per image (only their number is used).
        batch_size: images per batch.
        seed: the permutation's seed without an epoch generator.
    """

    def __init__(self, labels: Sequence[int], batch_size: int, seed: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.num_images = len(labels)
        if self.num_images < batch_size:
            raise ValueError(f"{self.num_images} images are fewer than one batch of {batch_size}")
        self.batch_size = batch_size
        self.seed = seed
        self.generator: torch.Generator | None = None

    def set_epoch(self, epoch: int, generator: torch.Generator | None = None) -> None:
        """Draw the next iteration's permutation from ``generator`` (the epoch's)."""
        self.generator = generator

    def __len__(self) -> int:
        return self.num_images // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        generator = self.generator or torch.Generator().manual_seed(self.seed)
        order = RandomSampler(range(self.num_images), generator=generator)
        return iter(BatchSampler(order, self.batch_size, drop_last=True))


#: The training batch samplers by name (``data.sampler``); the builder supplies labels, batch size and seed.
SAMPLERS: Registry = Registry("batch sampler", supplied=("labels", "batch_size", "seed"))
SAMPLERS.register("class_balanced", ClassBalancedSampler)
SAMPLERS.register("random", RandomBatchSampler)
