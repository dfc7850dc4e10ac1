"""The batches of one run: its datasets, its training batches per epoch and its evaluation batches.

:class:`RunData` serves a trainer from a run's data section (``cfg.data``, :class:`dmllab.training.config.DataConfig`)
along one of three paths:

* the **DataLoader** path: per-image PIL decoding and transforms in ``data.num_workers`` processes (the real
  datasets on the paper profile). The workers return uint8 crops (the full-size presets,
  :func:`dmllab.data.transforms.build_transforms` with ``uint8``) that :class:`dmllab.data.feed.DevicePrefetcher`
  copies to the device and normalises there. On CUDA with workers, one DataLoader iterator per (stage, split) spans
  the stage's epochs (:class:`dmllab.data.feed.EpochStream`), every sample augmented from its own seed, so the
  batches do not depend on which worker decodes them or when; evaluation splits are decoded once and kept in host
  memory up to :data:`dmllab.data.feed.EVAL_CACHE_BYTES` (on every device: the test transform draws nothing);
  :meth:`RunData.close` ends the workers at the end of a stage.
* the **in-memory** path (``data.in_memory``): the split's uint8 images as one tensor on the run's device,
  augmented a batch at a time with torch (:class:`dmllab.data.tensor.InMemoryImages`; the quick and smoke presets);
* the **feature cache** (``data.feature_views`` with a frozen trunk prefix): the prefix's outputs for a few
  augmented views per image, computed once and shared by every run with the same frozen weights
  (:class:`dmllab.data.tensor.FeatureCache`), held on the run's device.

Randomness: an epoch's batches come from ``data.sampler`` (:data:`dmllab.data.SAMPLERS`) and its augmentations from
one generator seeded by (run seed, stage, epoch) (:func:`dmllab.rng.epoch_seed`), so a resumed run draws exactly
the batches of an uninterrupted one. ``limit`` (a fast dev run) keeps the first batches of every epoch and of every
evaluation.
"""

from __future__ import annotations

import inspect
import itertools
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from dmllab.data.feed import DevicePrefetcher, EpochStream, SeededSamples, SplitCache
from dmllab.rng import epoch_key, epoch_seed, worker_init

#: A frozen trunk prefix: ``(forward(x) -> features, digest of its weights)``, or None without a feature cache.
Prefix = tuple[Callable[[torch.Tensor], torch.Tensor], str] | None


def loader_context(workers: int) -> Any:
    """The multiprocessing context of a DataLoader's ``workers``: fork on Linux, whichever process builds the
    loader; None (the platform's default) without workers or elsewhere. A study's training worker is a spawned
    process (:mod:`dmllab.pipeline.executors`), whose default start method is then spawn as well: its DataLoader
    workers would each start a fresh interpreter that imports torch and dmllab again for every loader, where
    forked workers start at once from the loading process, as under ``dmllab train``."""
    if workers <= 0 or not sys.platform.startswith("linux"):
        return None
    return multiprocessing.get_context("fork")


def resolve_num_workers(value: int | str) -> int:
    """``data.num_workers``: an int as given, or "auto" = the cores this process may use
    (:func:`dmllab.validation.usable_cores`, its CPU affinity: what a cgroup or SLURM grants) minus 2 (the
    training process and the pin-memory thread), at least 0."""
    from dmllab.validation import usable_cores

    if value == "auto":
        return max(0, usable_cores() - 2)
    return int(value)


def open_split(
    data: Any,
    split: str,
    *,
    train: bool,
    progress: bool = False,
    raw: bool = False,
    uint8: bool = False,
    size: int | None = None,
) -> Dataset:
    """The ``split`` dataset of a run's data section with the train or test transform of ``data.transform``
    (``raw``: without a transform, images as the dataset holds them; ``uint8``: a full-size preset's uint8 crop;
    ``size``: its output resized to ``size`` x ``size``: :func:`dmllab.data.transforms.build_transforms`).

    A fold split name (:func:`dmllab.data.folds.fold_split`, e.g. ``"mlrc:0of4:train"``: the MLRC protocol's
    class-disjoint folds) is the matching :class:`~dmllab.data.folds.ClassSubset` of the ``trainval`` split."""
    from dmllab.data import DATASETS, build_dataset, build_transforms

    if is_fold(split):
        return fold_subset(
            open_split(
                data, data.trainval_split, train=train, progress=progress, raw=raw, uint8=uint8, size=size
            ),
            split,
        )
    spec = data.dataset
    # lazy: no torchvision import in the workers of an in-memory data path
    transform = (
        None if raw else build_transforms(data.transform, train=train, lazy=True, uint8=uint8, size=size)
    )
    kw = spec.kw
    if "progress" in inspect.signature(DATASETS.get(spec.name)).parameters:
        kw["progress"] = progress
    return build_dataset(spec.name, data.root, split, transform=transform, **kw)


def is_fold(split: str) -> bool:
    """Whether ``split`` names a fold of the ``trainval`` split (:func:`dmllab.data.folds.fold_split`)."""
    from dmllab.data.folds import parse_fold_split

    return parse_fold_split(split) is not None


def fold_subset(trainval: Dataset, split: str) -> Dataset:
    """The fold ``split`` of the ``trainval`` dataset: its :class:`~dmllab.data.folds.ClassSubset`."""
    from dmllab.data.folds import ClassSubset, fold_classes, parse_fold_split

    fold, folds, part = parse_fold_split(split)
    return ClassSubset(trainval, fold_classes(trainval.num_classes, fold, folds, part))


class Timed:
    """Wrap a batch iterator, adding the time spent producing batches to ``timings["data"]``; ``total`` is the
    number of batches (for a progress bar)."""

    def __init__(self, it: Any, timings: dict[str, float], total: int | None = None) -> None:
        if total is None:
            total = len(it) if hasattr(it, "__len__") else getattr(it, "total", None)
        self.total = total
        self.it = iter(it)
        self.timings = timings

    def __iter__(self) -> Timed:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter()
        try:
            return next(self.it)
        finally:
            self.timings["data"] += time.perf_counter() - t0


class RunData:
    """The datasets and batches of one run (module docstring).

    Args:
        data: the run's data section (``cfg.data``).
        seed: the run seed.
        device: where the trainer computes (CUDA keeps loader workers across epochs and pins memory).
        limit: keep the first ``limit`` batches of every epoch and evaluation (a fast dev run), None for all.
        progress: let datasets that generate on first use show their progress.
        timings: seconds per phase, updated in place (``data``, ``cache_build``).
        channels_last: the DataLoader path's images reach the device channels_last (the trainer's memory format).
        image_size: the DataLoader path's images resized to this size after the transform (a fast dev run's small
            images); None: the transform's own size.
    """

    def __init__(
        self,
        data: Any,
        *,
        seed: int,
        device: torch.device,
        limit: int | None = None,
        progress: bool = False,
        timings: dict[str, float] | None = None,
        channels_last: bool = False,
        image_size: int | None = None,
    ) -> None:
        self.data = data
        self.image_size = image_size
        self.seed = seed
        self.device = torch.device(device)
        self.limit = limit
        self.progress = progress
        self.timings = timings if timings is not None else {"data": 0.0, "cache_build": 0.0}
        self.channels_last = channels_last
        self.workers = resolve_num_workers(data.num_workers)
        self._datasets: dict[tuple[str, bool], Dataset] = {}
        self._sources: dict[tuple, Any] = {}
        self._persistent: dict[tuple, Any] = {}  # eval loaders kept between validations
        self._streams: dict[tuple, _Stream] = {}  # training iterators spanning epochs
        self._eval_cache = SplitCache()

    # ------------------------------------------------------------------------------------------ datasets
    def dataset(self, split: str, *, train: bool) -> Dataset:
        """The ``split`` dataset with the train or test transform (:func:`open_split`), built once."""
        key = (split, train)
        if key not in self._datasets:
            if is_fold(split):  # the folds share one trainval dataset
                self._datasets[key] = fold_subset(self.dataset(self.data.trainval_split, train=train), split)
            else:
                in_memory = self.data.in_memory  # batches augmented on the tensors: no per-image resize
                self._datasets[key] = open_split(self.data, split, train=train, progress=self.progress,
                                                 uint8=not in_memory, size=None if in_memory else self.image_size)  # fmt: skip
        return self._datasets[key]

    def source(self, split: str, *, train: bool, prefix: Prefix = None) -> Any:
        """The in-memory source of ``split`` (``data.in_memory``): :class:`dmllab.data.tensor.InMemoryImages`, or
        with a frozen ``prefix`` the prefix's cached features (:class:`~dmllab.data.tensor.FeatureCache`, keyed by
        the prefix weights, so every stage and seed with the same frozen weights shares it)."""
        from dmllab.data.tensor import FeatureCache, InMemoryImages

        d = self.data
        ds = self.dataset(split, train=train)
        if prefix is None:
            key: tuple = (split, train)
            if key not in self._sources:
                self._sources[key] = InMemoryImages(ds, d.transform, train=train).to(self.device)
            return self._sources[key]
        forward, digest = prefix
        key = (split, train, digest)
        if key not in self._sources:
            cache = FeatureCache(
                forward, digest, ds, d.transform, train=train, views=d.feature_views, device=self.device
            )
            self.timings["cache_build"] += cache.build_seconds
            self._sources[key] = cache.to(self.device)
        return self._sources[key]

    # ------------------------------------------------------------------------------------------ training
    def sampler(
        self, labels: Any, stage: str, epoch: int, shape: tuple[int, int | None], gen: torch.Generator
    ):
        """The epoch's index batches from ``data.sampler`` with the batch ``shape`` ``(batch_size, per_class)``
        (per_class None: the sampler's own), first ``limit`` of them."""
        from dmllab.data import SAMPLERS

        spec = self.data.sampler
        batch_size, per_class = shape
        kw = spec.kw if per_class is None else {**spec.kw, "per_class": per_class}
        batches = SAMPLERS.get(spec.name)(labels, batch_size, seed=self.seed, **kw)
        batches.set_epoch(epoch_key(stage, epoch), gen)
        return batches if self.limit is None else list(itertools.islice(batches, self.limit))

    def train_batches(
        self,
        stage: str,
        split: str,
        epoch: int,
        shape: tuple[int, int | None],
        prefix: Prefix = None,
        until: int | None = None,
    ) -> Timed:
        """One epoch of training batches ``(images or features, labels)`` of ``split`` on the device (module
        docstring); ``until``: the stage's last epoch (where an iterator spanning epochs stops)."""
        gen = torch.Generator().manual_seed(epoch_seed(self.seed, stage, epoch))
        if self.data.in_memory:
            return self._tensor_batches(stage, split, epoch, shape, prefix, gen)
        ds = self.dataset(split, train=True)
        if not self._persistent_workers():
            loader = self._loader(
                ds, batch_sampler=self.sampler(ds.labels, stage, epoch, shape, gen), generator=gen
            )
            return Timed(DevicePrefetcher(loader, self.device, self.channels_last), self.timings)
        key = (stage, split)
        stream = self._streams.get(key)
        if stream is None or not stream.resumes(epoch):  # a first epoch, or not the one that follows
            if stream is not None:
                stream.close()

            def epoch_batches(e: int) -> Any:
                e_gen = torch.Generator().manual_seed(epoch_seed(self.seed, stage, e))
                return self.sampler(ds.labels, stage, e, shape, e_gen)

            epochs = EpochStream(epoch_batches, lambda e: epoch_seed(self.seed, stage, e), epoch, until)
            stream = self._streams[key] = _Stream(
                self._loader(SeededSamples(ds), batch_sampler=epochs), epochs
            )
        n = stream.start(epoch)
        return Timed(DevicePrefetcher(stream.take(n), self.device, self.channels_last, n), self.timings, n)

    def _loader(self, ds: Dataset, **kw: Any) -> DataLoader:
        """A DataLoader of this run's workers over ``ds`` (numpy and ``random`` seeded in each), pinned on CUDA."""
        return DataLoader(
            ds,
            num_workers=self.workers,
            pin_memory=self.device.type == "cuda",
            worker_init_fn=worker_init,
            multiprocessing_context=loader_context(self.workers),
            **kw,
        )

    def _tensor_batches(
        self, stage: str, split: str, epoch: int, shape: tuple[int, int | None], prefix: Prefix, gen: Any
    ) -> Timed:
        """One epoch of in-memory batches, augmented by torch from the epoch's generator; with cached features
        each image uses view ``(offset_i + epoch) % views``, ``offset`` drawn once per (seed, stage)."""
        src = self.source(split, train=True, prefix=prefix)
        batches = self.sampler(src.labels.tolist(), stage, epoch, shape, gen)
        if prefix is None:
            batches = list(batches)
            return Timed(src.batches(batches, gen), self.timings, len(batches))
        offset_gen = torch.Generator().manual_seed(epoch_seed(self.seed, stage, 0))
        offsets = torch.randint(src.views, (len(src),), generator=offset_gen)
        views = ((offsets + epoch) % src.views).to(src.features.device)  # the epoch's view of every image

        def feature_batches() -> Any:
            for idx in batches:
                idx = torch.as_tensor(idx, dtype=torch.long).to(views.device, non_blocking=True)
                yield src.batch(idx, views[idx])

        return Timed(feature_batches(), self.timings, len(batches))

    def labels(self, split: str, *, prefix: Prefix = None) -> Any:
        """The labels of the training split ``split`` (the list the sampler draws from)."""
        if self.data.in_memory:
            return self.source(split, train=True, prefix=prefix).labels.tolist()
        return self.dataset(split, train=True).labels

    # ------------------------------------------------------------------------------------------ evaluation
    def eval_batches(self, split: str, prefix: Prefix = None, every: int = 1) -> Iterable[Any]:
        """The batches of ``split`` on the device in index order, test transform (first ``limit`` of them);
        ``every``: every ``every``-th image only (a sample spread over the classes)."""
        d = self.data
        if d.in_memory:
            batches = self.source(split, train=False, prefix=prefix).ordered(d.eval_batch_size, every)
            return itertools.islice(batches, self.limit) if self.limit else batches
        return DevicePrefetcher(self._eval_host_batches(split, every), self.device, self.channels_last)

    def _eval_host_batches(self, split: str, every: int) -> Iterator[Any]:
        """The host batches of :meth:`eval_batches`: from the split cache, else from a loader (its batches
        recorded in the cache when the whole split fits, :class:`dmllab.data.feed.SplitCache`)."""
        d = self.data
        if every == 1 and split in self._eval_cache:
            return self._eval_cache.batches(split, d.eval_batch_size)
        ds = self.dataset(split, train=False)
        if every > 1:
            ds = Subset(ds, range(0, len(ds), every))
        if self.limit:  # the split's first batches (in index order: the first classes, whole)
            ds = Subset(ds, range(min(len(ds), self.limit * d.eval_batch_size)))
        if every > 1 or not self._persistent_workers():
            loader: Any = self._loader(ds, batch_size=d.eval_batch_size, shuffle=False)
        else:  # no randomness: one loader per split, its workers kept between evaluations
            if ("eval", split) not in self._persistent:
                self._persistent[("eval", split)] = self._loader(
                    ds, batch_size=d.eval_batch_size, shuffle=False, persistent_workers=True
                )
            loader = self._persistent[("eval", split)]
        return loader if every > 1 else self._eval_cache.record(split, loader, len(ds))

    def _persistent_workers(self) -> bool:
        return self.workers > 0 and self.device.type == "cuda"

    def close(self) -> None:
        """End the workers of the loaders kept across epochs (at the end of a stage); the split cache stays."""
        for stream in self._streams.values():
            stream.close()
        for loader in self._persistent.values():
            _shutdown(getattr(loader, "_iterator", None))
        self._streams.clear()
        self._persistent.clear()


def _shutdown(iterator: Any) -> None:
    """End a DataLoader iterator's worker processes (none: nothing to do)."""
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()


class _Stream:
    """One DataLoader iterator over an :class:`~dmllab.data.feed.EpochStream`: :meth:`start` an epoch, then
    :meth:`take` its batches; the next epoch continues the same iterator."""

    def __init__(self, loader: DataLoader, epochs: EpochStream) -> None:
        self.epochs = epochs
        self.loader, self.iterator = loader, iter(loader)
        self.next_epoch = epochs.first
        self.pending = 0  # batches of the started epoch not taken yet

    def resumes(self, epoch: int) -> bool:
        """Whether ``epoch`` is the one this iterator serves next (the previous epoch taken whole)."""
        return epoch == self.next_epoch and self.pending == 0

    def start(self, epoch: int) -> int:
        """Start ``epoch`` (:meth:`resumes` it); returns its number of batches."""
        n = len(self.epochs.batches(epoch))
        self.pending, self.next_epoch = n, epoch + 1
        return n

    def take(self, n: int) -> Iterator[Any]:
        for _ in range(n):
            batch = next(self.iterator)
            self.pending -= 1
            yield batch

    def close(self) -> None:
        _shutdown(self.iterator)
