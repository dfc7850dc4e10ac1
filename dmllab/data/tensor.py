"""In-memory tensor data path: uint8 images as one tensor, batched torch augmentation, cached trunk features.

The small-image profiles (``quick``, ``smoke``) spend most of a run in per-image PIL transforms. A dataset that
holds its images in memory as a uint8 array ``images`` (N, S, S, 3) (the synthetic benchmark) can instead be
augmented a whole batch at a time with tensor operations (``data.in_memory``):

* train: RandomResizedCrop(size, scale, ratio) + horizontal flip, with torchvision's ``get_params`` rule
  (10 tries of area and log-uniform aspect ratio, else the central crop) drawn for the whole batch from one
  ``torch.Generator``; every crop is resampled to ``size`` x ``size`` by ``torchvision.ops.roi_align``
  (bilinear, 2 x 2 samples per output pixel, i.e. a mild box filter when shrinking, like an antialiased resize);
* test: Resize(resize) (bilinear, antialiased; a no-op when the images already have that side) + CenterCrop(size);
* both: ``/255`` then the ImageNet mean/std, as the PIL presets.

The random draws differ from the PIL path (one generator per batch instead of Python's ``random``), so runs are
equally valid but not bit-identical to ``data.in_memory=false``; the test transform is identical when no resize is
needed (64-pixel synthetic images, ``quick``).

:class:`FeatureCache` goes one step further for a trunk whose first blocks are frozen (``model.frozen_blocks``):
the frozen blocks' output is computed once per image for ``views`` random augmented views (training) and for the
test view (evaluation), stored on disk as float16 under ``cache_dir()/features/<key>/``, and reused by every run
whose key matches: the frozen weights (a digest of their tensors), the dataset identity (its ``fingerprint`` or a
digest of its images), split, transform preset, view count, cache seed and storage dtype. Training then runs only the
trainable blocks and the head. Views are drawn from a fixed cache seed (not the run seed): all seeds of a study
share the same augmented views; a run picks, per image and epoch, view ``(offset_i + epoch) % views`` with a
per-run, per-stage random offset, so consecutive epochs see different views.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dmllab.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from dmllab.fileio import (
    CorruptFileError,
    check_fingerprints,
    content_fingerprint,
    first_use,
    naming,
    new_folder,
    set_aside,
    write_text_atomic,
)
from dmllab.paths import cache_dir

#: Bump when the tensor transforms or the cache layout change: part of the feature-cache key.
FEATURE_CACHE_VERSION = 1


@dataclass(frozen=True)
class CropSpec:
    """Geometry of a crop preset: train RandomResizedCrop(size, scale, ratio) + flip, test Resize(resize) +
    CenterCrop(size) (the presets of :mod:`dmllab.data.transforms`)."""

    size: int
    resize: int
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)


#: The presets with a tensor implementation (the small-image ones; the full-size presets read files).
TENSOR_PRESETS: dict[str, CropSpec | None] = {
    "quick": CropSpec(56, 64, (0.35, 1.0)),
    "quick227": CropSpec(50, 57, (0.35, 1.0)),
    "smoke": CropSpec(32, 36, (0.35, 1.0)),
    "none": None,
}


def crop_spec(preset: str) -> CropSpec | None:
    """The geometry of a transform preset that has a tensor implementation (None: no geometry)."""
    if preset not in TENSOR_PRESETS:
        raise ValueError(
            f"transform preset {preset!r} has no in-memory tensor implementation (data.in_memory); "
            f"valid: {', '.join(TENSOR_PRESETS)}"
        )
    return TENSOR_PRESETS[preset]


def images_tensor(dataset: Any) -> Tensor:
    """The dataset's images as a uint8 tensor (N, 3, S, S); needs an ``images`` array (N, S, S, 3)."""
    images = getattr(dataset, "images", None)
    if images is None or getattr(images, "ndim", 0) != 4:
        raise ValueError(
            f"data.in_memory needs a dataset holding its images as a uint8 array 'images' (N, H, W, 3); "
            f"{type(dataset).__name__} has none (use data.in_memory=false)"
        )
    x = torch.from_numpy(np.ascontiguousarray(images))
    if x.dtype != torch.uint8:
        raise ValueError(f"data.in_memory needs uint8 images, got {x.dtype}")
    return x.permute(0, 3, 1, 2).contiguous()  # (N, 3, S, S)


def _normalise(x: Tensor) -> Tensor:
    """``(x / 255 - mean) / std`` as one in-place multiply-add on a float tensor (B, 3, h, w) the caller owns."""
    std = torch.tensor(IMAGENET_STD, dtype=x.dtype).view(1, 3, 1, 1)
    mean = torch.tensor(IMAGENET_MEAN, dtype=x.dtype).view(1, 3, 1, 1)
    scale, shift = (t.to(x.device, non_blocking=True) for t in (1.0 / (255.0 * std), -mean / std))
    return x.mul_(scale).add_(shift)


def crop_boxes(
    n: int, height: int, width: int, spec: CropSpec, generator: torch.Generator | None = None, tries: int = 10
) -> Tensor:
    """RandomResizedCrop parameters for ``n`` images, torchvision's rule vectorised: (n, 4) ``(x1, y1, w, h)``.

    Each image tries ``tries`` (area ~ U(scale) * H * W, log aspect ~ U(log ratio)) and keeps the first crop
    that fits; images without one get the central crop with the aspect ratio clamped to ``ratio``.
    """
    area = height * width
    s = torch.empty(n, tries).uniform_(spec.scale[0], spec.scale[1], generator=generator) * area
    logr = torch.empty(n, tries).uniform_(
        math.log(spec.ratio[0]), math.log(spec.ratio[1]), generator=generator
    )
    r = torch.exp(logr)
    w = torch.round(torch.sqrt(s * r))  # (n, tries)
    h = torch.round(torch.sqrt(s / r))
    ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = torch.argmax(ok.to(torch.int8), dim=1)  # first valid try (0 when none: handled below)
    rows = torch.arange(n)
    w, h, found = w[rows, first], h[rows, first], ok.any(dim=1)
    u = torch.rand(n, 2, generator=generator)
    # torch.randint(0, H - h + 1) per image, from uniforms (exact for these small ranges)
    y = torch.floor(u[:, 0] * (height - h + 1)).clamp(max=height - h)
    x = torch.floor(u[:, 1] * (width - w + 1)).clamp(max=width - w)
    if not bool(found.all()):  # fallback: central crop, aspect clamped (torchvision)
        in_ratio = width / height
        if in_ratio < spec.ratio[0]:
            fw, fh = width, round(width / spec.ratio[0])
        elif in_ratio > spec.ratio[1]:
            fh, fw = height, round(height * spec.ratio[1])
        else:
            fw, fh = width, height
        miss = ~found
        w[miss], h[miss] = float(fw), float(fh)
        y[miss], x[miss] = float((height - fh) // 2), float((width - fw) // 2)
    return torch.stack([x, y, w, h], dim=1)


def augment_batch(
    images: Tensor, preset: str, *, train: bool, generator: torch.Generator | None = None
) -> Tensor:
    """uint8 images (B, 3, S, S) -> normalised float32 (B, 3, size, size) with ``preset``'s train or test geometry."""
    from torchvision.ops import roi_align

    spec = crop_spec(preset)
    x = images.float()
    if spec is None:
        return _normalise(x)
    b, _, height, width = x.shape
    if not train:
        if min(height, width) != spec.resize:  # Resize(resize): the shorter side to ``resize``
            scale = spec.resize / min(height, width)
            size = (max(1, round(height * scale)), max(1, round(width * scale)))
            x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
            height, width = size
        top, left = int(round((height - spec.size) / 2.0)), int(round((width - spec.size) / 2.0))
        return _normalise(x[:, :, top : top + spec.size, left : left + spec.size].contiguous())
    box = crop_boxes(b, height, width, spec, generator)  # (B, 4) x, y, w, h
    flip = torch.rand(b, generator=generator) < 0.5
    x1, x2 = box[:, 0], box[:, 0] + box[:, 2]
    # A flipped crop is the same box read right to left: with aligned=True roi_align accepts x1 > x2 and
    # samples mirrored positions, so the flip costs nothing.
    x1, x2 = torch.where(flip, x2, x1), torch.where(flip, x1, x2)
    # (B, 5): batch index, x1, y1, x2, y2 in pixel-edge coordinates (drawn on the host)
    rois = torch.stack([torch.arange(b, dtype=x.dtype), x1, box[:, 1], x2, box[:, 1] + box[:, 3]], dim=1)
    rois = rois.to(x.device, non_blocking=True)
    out = roi_align(x, rois, output_size=spec.size, spatial_scale=1.0, sampling_ratio=2, aligned=True)
    return _normalise(out)  # (B, 3, size, size)


_Source = TypeVar("_Source", bound="_OnDevice")


class _OnDevice:
    """A source whose tensors may live on a device (:meth:`to`): ``labels`` stay on the host for the samplers, a
    copy on the device serves the batches; indices are drawn on the host and copied without waiting."""

    labels: Tensor
    _held: str  # the attribute holding the batches' tensor

    def to(self: _Source, device: torch.device | str) -> _Source:
        """Keep the batches' tensor (and a copy of the labels) on ``device``; returns self."""
        setattr(self, self._held, getattr(self, self._held).to(device))
        self._device_labels = self.labels.to(device)
        return self

    def __len__(self) -> int:
        return len(self.labels)

    def _indices(self, indices: Sequence[int] | Tensor, device: torch.device) -> Tensor:
        return torch.as_tensor(indices, dtype=torch.long).to(device, non_blocking=True)

    def _labels_of(self, idx: Tensor) -> Tensor:
        return getattr(self, "_device_labels", self.labels)[idx]


class InMemoryImages(_OnDevice):
    """A split's images as one uint8 tensor with batched augmentation (``data.in_memory``).

    Args:
        dataset: a dataset with ``images`` (N, S, S, 3) uint8 and ``labels``.
        preset: a transform preset from :data:`TENSOR_PRESETS`.
        train: the preset's train (random) or test geometry.

    :meth:`to` moves the images to a device, where the batches are then augmented (the crops and flips are still
    drawn on the host from the caller's generator: the same draws on every device).
    """

    _held = "images"

    def __init__(self, dataset: Any, preset: str, *, train: bool) -> None:
        crop_spec(preset)  # validate early
        self.images = images_tensor(dataset)  # (N, 3, S, S) uint8
        self.labels = torch.as_tensor(list(dataset.labels), dtype=torch.long)
        self.num_classes = dataset.num_classes
        self.preset = preset
        self.train = train

    def batch(
        self, indices: Sequence[int] | Tensor, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        idx = self._indices(indices, self.images.device)
        x = augment_batch(self.images[idx], self.preset, train=self.train, generator=generator)
        return x, self._labels_of(idx)

    def batches(
        self, batches: Sequence[Sequence[int]], generator: torch.Generator | None = None
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """(inputs, labels) for each index list of ``batches``."""
        for idx in batches:
            yield self.batch(idx, generator)

    def ordered(self, batch_size: int, every: int = 1) -> Iterator[tuple[Tensor, Tensor]]:
        """The whole split in order (every ``every``-th image), ``batch_size`` at a time (evaluation)."""
        order = list(range(0, len(self), every))
        return self.batches([order[i : i + batch_size] for i in range(0, len(order), batch_size)])


# ------------------------------------------------------------------------------------------- feature cache
def tensor_digest(tensors: Sequence[Tensor]) -> str:
    """sha256 of the tensors' shapes, dtypes and bytes (the identity of frozen weights)."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes())
    return h.hexdigest()


def dataset_fingerprint(dataset: Any) -> str:
    """The dataset's ``fingerprint`` attribute, else a digest of its class, split, images and labels."""
    fp = getattr(dataset, "fingerprint", None)
    if fp:
        return str(fp)
    h = hashlib.sha256(f"{type(dataset).__name__}:{getattr(dataset, 'split', '')}".encode())
    h.update(np.ascontiguousarray(dataset.images).tobytes())
    h.update(np.asarray(list(dataset.labels), dtype=np.int64).tobytes())
    return h.hexdigest()


def feature_cache_key(
    *,
    weights_digest: str,
    dataset_fp: str,
    preset: str,
    train: bool,
    views: int,
    seed: int,
    dtype: str,
    computed_on: str,
) -> str:
    """The folder name of a cached feature set: a digest of everything that determines its contents, the device
    kind it is computed on included, with the torch thread count on the CPU (``computed_on``: ``"cpu:1"``,
    ``"cuda"``; :func:`computed_on`)."""
    key = {
        "computed_on": computed_on,
        "version": FEATURE_CACHE_VERSION,
        "weights": weights_digest,
        "dataset": dataset_fp,
        "preset": preset,
        "train": bool(train),
        "views": int(views) if train else 1,
        "seed": int(seed),
        "dtype": dtype,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def computed_on(device: torch.device | str) -> str:
    """Where features computed now on ``device`` come from, as far as their bits go: the device kind, and on the CPU
    the torch thread count (its kernels reduce in a thread-count-dependent order)."""
    kind = torch.device(device).type
    return f"cpu:{torch.get_num_threads()}" if kind == "cpu" else kind


@torch.no_grad()
def compute_features(
    prefix: Callable[[Tensor], Tensor],
    source: InMemoryImages,
    *,
    views: int,
    seed: int = 0,
    batch_size: int = 256,
    dtype: torch.dtype = torch.float16,
    device: torch.device | str = "cpu",
    estimate: Callable[[float], None] | None = None,
) -> Tensor:
    """``prefix`` applied to ``views`` augmented views (train source) or the one test view of every image:
    (V, N, C, h, w) in ``dtype`` on the CPU. View ``v`` of batch ``b`` uses a generator seeded ``(seed, v, b)``.
    ``estimate(seconds)`` is called once, after the first batch, with the time all batches take at that pace."""
    n = len(source)
    v_count = views if source.train else 1
    batches = v_count * -(-n // batch_size)
    out: Tensor | None = None
    start_s = time.perf_counter()
    for v in range(v_count):
        for b, start in enumerate(range(0, n, batch_size)):
            if (v, b) == (0, 1) and estimate is not None:
                estimate((time.perf_counter() - start_s) * batches)
            gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + v * 10_007 + b)
            x, _ = source.batch(torch.arange(start, min(start + batch_size, n)), gen)
            f = prefix(x.to(device)).to("cpu", dtype)
            if out is None:
                out = torch.empty((v_count, n, *f.shape[1:]), dtype=dtype)
            out[v, start : start + len(f)] = f
    return out


class FeatureCache(_OnDevice):
    """Frozen-prefix features of a split (training views or the test view), computed once and stored on disk;
    :meth:`to` holds them on a device (a quick run on CUDA: no copy per batch).

    Args:
        prefix: the frozen blocks (in eval mode), (B, 3, s, s) -> (B, C, h, w).
        weights_digest: :func:`tensor_digest` of the prefix's state (part of the key).
        dataset: the split (with ``images``, ``labels``).
        preset: transform preset; ``train`` picks its random (``views`` views) or test geometry.
        root: folder of the cache; default ``cache_dir()/features``.

    Attributes:
        features: (V, N, C, h, w) float16 tensor (memory-mapped file); labels (N,) long.
        build_seconds: time spent computing (0 when read from disk).
    """

    _held = "features"

    def __init__(
        self,
        prefix: Callable[[Tensor], Tensor],
        weights_digest: str,
        dataset: Any,
        preset: str,
        *,
        train: bool,
        views: int = 1,
        seed: int = 0,
        root: str | os.PathLike | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if train and views < 1:
            raise ValueError(f"views must be >= 1, got {views}")
        self.views = views if train else 1
        self.train = train
        self.labels = torch.as_tensor(list(dataset.labels), dtype=torch.long)
        self.num_classes = dataset.num_classes
        key = feature_cache_key(
            weights_digest=weights_digest,
            dataset_fp=dataset_fingerprint(dataset),
            preset=preset,
            train=train,
            views=views,
            seed=seed,
            dtype="float16",
            computed_on=computed_on(device),
        )
        base = Path(root) if root is not None else cache_dir() / "features"
        self.folder = base / key
        file = self.folder / "features.npy"
        self.build_seconds = 0.0
        features = _open_features(self.folder, (self.views, len(self.labels))) if file.is_file() else None
        if features is None:
            t0 = time.perf_counter()
            source = InMemoryImages(dataset, preset, train=train)
            what = (
                f"computing the frozen trunk's features of {len(self.labels)} images ({self.views} view(s)) into "
                f"{self.folder}"
            )
            feats = compute_features(
                prefix,
                source,
                views=self.views,
                seed=seed,
                device=device,
                estimate=lambda seconds: first_use(what, seconds),
            )
            _write_atomic(self.folder, feats.numpy())
            self.build_seconds = time.perf_counter() - t0
            features = _open_features(self.folder, (self.views, len(self.labels)), repair=False)
        self.features = features  # (V, N, C, h, w) float16, a read-only memory map

    def batch(self, indices: Sequence[int] | Tensor, views: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """float32 features (B, C, h, w) of ``indices`` (view ``views[i]``, default 0) and their labels."""
        idx = self._indices(indices, self.features.device)
        v = torch.zeros_like(idx) if views is None else self._indices(views, self.features.device)
        return self.features[v, idx].float(), self._labels_of(idx)

    def ordered(self, batch_size: int, every: int = 1) -> Iterator[tuple[Tensor, Tensor]]:
        """The whole split in order (view 0; every ``every``-th image), ``batch_size`` at a time (evaluation)."""
        order = torch.arange(0, len(self), every)
        for i in range(0, len(order), batch_size):
            yield self.batch(order[i : i + batch_size])


_FINGERPRINT_FILE = "fingerprint.json"


def _open_features(folder: Path, leading: tuple[int, int], *, repair: bool = True) -> Tensor | None:
    """The memory-mapped ``features.npy`` of ``folder`` after checking it against its fingerprint
    (:func:`dmllab.fileio.content_fingerprint`; a folder written before fingerprints were recorded gets one now)
    and its leading shape ``(views, images)``. A damaged folder is set aside (``repair``: the caller builds it
    again, None is returned) or raises CorruptFileError naming it."""
    file = folder / "features.npy"
    try:
        record = folder / _FINGERPRINT_FILE
        if record.is_file():
            try:
                expected = json.loads(record.read_text())
            except ValueError as err:
                raise CorruptFileError(f"feature cache file {record} is damaged ({err})") from None
            check_fingerprints(folder, expected, f"feature cache {folder}")
        try:
            with warnings.catch_warnings():  # read-only memory map: batches are copies, never written to
                warnings.simplefilter("ignore", UserWarning)
                with naming(file, "reading"):
                    features = torch.from_numpy(np.load(file, mmap_mode="r", allow_pickle=False))
        except (ValueError, EOFError) as err:
            raise CorruptFileError(f"feature cache file {file} is damaged ({err})") from None
        if tuple(features.shape[:2]) != leading:
            raise CorruptFileError(
                f"feature cache {folder} does not match the dataset (shape {tuple(features.shape)})"
            )
        if not record.is_file():
            _write_fingerprint(folder)
        return features
    except CorruptFileError as err:
        if not repair:
            raise
        set_aside(folder, str(err), then="computing it again")
        return None


def _write_fingerprint(folder: Path) -> None:
    try:
        text = json.dumps({"features.npy": content_fingerprint(folder / "features.npy")})
        write_text_atomic(folder / _FINGERPRINT_FILE, text)
    except OSError:  # a read-only cache stays as it is
        pass


def _write_atomic(folder: Path, array: np.ndarray) -> None:
    """Write ``features.npy`` (and its fingerprint) into ``folder`` through a temporary sibling folder renamed into
    place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with new_folder(folder, "features.npy") as tmp:
        with naming(folder / "features.npy", "writing"):
            np.save(tmp / "features.npy", array)
            _write_fingerprint(tmp)
