"""Image transform presets of the papers (train: random crop + flip; test: resize + centre crop).

All presets take a PIL image (any mode; converted to RGB) and return a float32 tensor (3, S, S) normalised
with the ImageNet mean/std. The full-size presets run ``torchvision.transforms.v2`` on uint8 tensors; the
small-image presets (``quick``, ``smoke``) run ``torchvision.transforms`` (v1) on PIL images: the faster
choice for each at one torch thread (benchmarks/bench_data.py -> results/benchmarks/data.csv records decode +
transform).

``uint8=True`` (the trainer's DataLoader path): a v2 preset stops before its float conversion and returns the
cropped uint8 tensor (3, S, S), a quarter of the bytes to collate, pin and copy; :func:`normalise_uint8` then
makes the same float input of a whole batch, on the device (:class:`dmllab.data.feed.DevicePrefetcher`). The v1
presets return their float tensor either way.

Each preset is one function registered in :data:`TRANSFORMS`, its docstring giving its train and test geometry
(random-resized crops default to scale 0.08-1 and ratio 3/4-4/3); every train crop is followed by a random flip.

``mlrc`` follows the Proxy Synthesis paper's MLRC protocol (supplement, "MLRC Evaluation": shorter side to
256, a random crop of size 40-256 with aspect ratio 3/4-4/3 resized to 227, flip; test resize 256 + centre
crop 227); the crop-area range 0.16-1 is the MLRC benchmark's default for that crop and is our reading of
"size between 40 and 256".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dmllab.registry import Registry

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

TRANSFORMS: Registry[Callable[[bool], Callable[[Any], Any]]] = Registry("transform preset")


def _to_rgb(image: Any) -> Any:
    """PIL images of any mode (L, P, CMYK, RGBA) to RGB; tensors pass through."""
    return image.convert("RGB") if hasattr(image, "convert") and image.mode != "RGB" else image


def _module(backend: str) -> Any:
    from torchvision import transforms as v1
    from torchvision.transforms import v2

    return {"v1": v1, "v2": v2}[backend]


def _compose(steps: list[Any], backend: str, uint8: bool = False) -> Callable[[Any], Any]:
    """RGB -> ``steps`` -> float tensor normalised with the ImageNet mean/std.

    ``v2``: the image becomes a uint8 tensor first and the geometry runs on it (antialiased resize on uint8
    tensors is the fastest path for full-size photos); ``uint8``: it stays uint8 (:func:`normalise_uint8` does
    the rest). ``v1``: geometry on the PIL image, then ``ToTensor`` (the fastest for the small synthetic images,
    where v2's per-call overhead dominates).
    """
    import torch

    T = _module(backend)
    if backend == "v2":
        head = [T.Lambda(_to_rgb), T.ToImage()]
        tail = (
            [] if uint8 else [T.ToDtype(torch.float32, scale=True), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        )
    else:
        head, tail = [T.Lambda(_to_rgb)], [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    return T.Compose([*head, *steps, *tail])


def _crop_preset(
    train: bool,
    *,
    size: int,
    resize: int,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    train_resize: bool = False,
    backend: str = "v2",
    uint8: bool = False,
) -> Callable[[Any], Any]:
    """Train: [Resize(resize)] + RandomResizedCrop(size, scale, ratio) + flip; test: Resize(resize) + CenterCrop(size)."""
    T = _module(backend)
    if train:
        pre = [T.Resize(resize, antialias=True)] if train_resize else []
        steps = [
            *pre,
            T.RandomResizedCrop(size, scale=scale, ratio=ratio, antialias=True),
            T.RandomHorizontalFlip(),
        ]
    else:
        steps = [T.Resize(resize, antialias=True), T.CenterCrop(size)]
    return _compose(steps, backend, uint8)


@TRANSFORMS.register("proxynca++")
def proxynca_pp(train: bool, uint8: bool = False) -> Callable[[Any], Any]:
    """ProxyNCA++ (official code): 256 random-resized crops; test Resize(288) + CenterCrop(256)."""
    return _crop_preset(train, size=256, resize=288, uint8=uint8)


@TRANSFORMS.register("proxy_anchor")
def proxy_anchor(train: bool, uint8: bool = False) -> Callable[[Any], Any]:
    """Proxy Anchor: 224 random-resized crops; test Resize(256) + CenterCrop(224)."""
    return _crop_preset(train, size=224, resize=256, uint8=uint8)


@TRANSFORMS.register("heated")
def heated(train: bool, uint8: bool = False) -> Callable[[Any], Any]:
    """Heated-up Softmax (Zhang et al. Sec. 5.1): "the input images are all resized to 256x256" (both sides, the
    aspect ratio is not kept), then a random 224x224 crop (no scale or aspect jitter) + horizontal flip for
    training; "one single center crop" (224) at test."""
    T = _module("v2")
    resize = T.Resize((256, 256), antialias=True)
    steps = [resize, T.RandomCrop(224), T.RandomHorizontalFlip()] if train else [resize, T.CenterCrop(224)]
    return _compose(steps, "v2", uint8)


@TRANSFORMS.register("mlrc")
def mlrc(train: bool, uint8: bool = False) -> Callable[[Any], Any]:
    """MLRC protocol (Proxy Synthesis supplement): Resize(256) then 227 crops; test Resize(256) + CenterCrop(227)."""
    return _crop_preset(train, size=227, resize=256, scale=(0.16, 1.0), train_resize=True, uint8=uint8)


@TRANSFORMS.register("proxynca++227")
def proxynca_pp_227(train: bool, uint8: bool = False) -> Callable[[Any], Any]:
    """ProxyNCA++ Table 15 (appendix C): 227 random-resized crops; test Resize(256) + CenterCrop(227)."""
    return _crop_preset(train, size=227, resize=256, uint8=uint8)


@TRANSFORMS.register("quick227")
def quick_227(train: bool, uint8: bool = False) -> Callable[[Any], Any]:
    """The quick profile's analogue of Table 15's 227 crops: 50 crops (56 x 227/256); test Resize(57) + CenterCrop(50)."""
    return _crop_preset(train, size=50, resize=57, scale=(0.35, 1.0), backend="v1")


@TRANSFORMS.register("quick")
def quick(train: bool, uint8: bool = False) -> Callable[[Any], Any]:
    """Quick profile on the 64x64 offline benchmark: 56 crops (scale 0.35-1); test Resize(64) + CenterCrop(56)."""
    return _crop_preset(train, size=56, resize=64, scale=(0.35, 1.0), backend="v1")


@TRANSFORMS.register("smoke")
def smoke(train: bool, uint8: bool = False) -> Callable[[Any], Any]:
    """Smoke-test profile: 32 crops (scale 0.35-1); test Resize(36) + CenterCrop(32)."""
    return _crop_preset(train, size=32, resize=36, scale=(0.35, 1.0), backend="v1")


@TRANSFORMS.register("none")
def no_augmentation(train: bool, uint8: bool = False) -> Callable[[Any], Any]:
    """No geometry: RGB tensor normalised with the ImageNet mean/std (same for train and test)."""
    return _compose([], "v2", uint8)


class LazyTransform:
    """A preset's transform built on its first call: a quick run on cached features never needs
    torchvision, and a dataset held in memory (``data.in_memory``) is augmented a batch at a time by
    :mod:`dmllab.data.tensor`, so its per-image transform is never called."""

    def __init__(self, preset: str, train: bool, uint8: bool = False, size: int | None = None) -> None:
        TRANSFORMS.get(preset)  # an unknown preset raises now, listing the valid ones
        self.preset, self.train, self.uint8, self.size = preset, train, uint8, size
        self._fn: Callable[[Any], Any] | None = None

    def __call__(self, image: Any) -> Any:
        if self._fn is None:
            self._fn = _sized(TRANSFORMS.get(self.preset)(self.train, uint8=self.uint8), self.size)
        return self._fn(image)

    def __repr__(self) -> str:
        size = f", size={self.size}" if self.size else ""
        return f"LazyTransform({self.preset!r}, train={self.train}, uint8={self.uint8}{size})"


def _sized(fn: Callable[[Any], Any], size: int | None) -> Callable[[Any], Any]:
    """``fn``, its output (a (3, H, W) tensor) then resized to ``size`` x ``size`` (antialiased; None: as it is)."""
    if size is None:
        return fn
    from torchvision.transforms.v2 import functional as F

    def sized(image: Any) -> Any:
        return F.resize(fn(image), [size, size], antialias=True)  # (3, size, size)

    return sized


def build_transforms(
    preset: str, train: bool, *, lazy: bool = False, uint8: bool = False, size: int | None = None
) -> Callable[[Any], Any]:
    """The train (``train=True``) or test transform of a preset; unknown presets raise listing the valid ones.
    ``lazy``: a :class:`LazyTransform` (the same transform, built on its first call); ``uint8``: a v2 preset
    returns its uint8 crop, to be finished by :func:`normalise_uint8` (module docstring); ``size``: the preset's
    output resized to ``size`` x ``size`` (a fast dev run's small images: every step of the preset still runs)."""
    if lazy:
        return LazyTransform(preset, train, uint8, size)
    return _sized(TRANSFORMS.get(preset)(train, uint8=uint8), size)


def normalise_uint8(images: Any) -> Any:
    """uint8 images (..., 3, H, W) -> float32, exactly as a v2 preset's tail computes them (``ToDtype(float32,
    scale=True)``: ``x * (1 / 255)``, then ``Normalize``: ``(x - mean) / std``); float input passes through (a v1
    preset has normalised it already)."""
    import torch

    if images.is_floating_point():
        return images
    x = images.to(torch.float32).mul_(1.0 / 255)
    shape = (3, 1, 1)
    # built on the host and copied without waiting: no host sync on CUDA
    mean = torch.tensor(IMAGENET_MEAN, dtype=x.dtype).view(shape).to(x.device, non_blocking=True)
    std = torch.tensor(IMAGENET_STD, dtype=x.dtype).view(shape).to(x.device, non_blocking=True)
    return x.sub_(mean).div_(std)


def crop_size(transform: str) -> int:
    """The side of the square crop the transform preset ``transform`` feeds the network (its test transform applied
    to a CUB-sized image)."""
    from PIL import Image

    out = TRANSFORMS.get(transform)(train=False)(Image.new("RGB", (500, 375)))
    return int(out.shape[-1])
