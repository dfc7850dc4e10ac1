"""Evaluation-time input deformations of Proxy Synthesis Table 3 (supplement C.3), as test transforms.

The paper used imgaug (not a dmllab dependency); each deformation is re-implemented with torch /
torchvision from the C.3 description, on a float image (3, H, W) in [0, 1]:

============== =================================================================================
name           C.3 description -> dmllab
============== =================================================================================
cutout         two grey (0.5) squares, side 20% of the image size, at uniform random positions
dropout        p ~ U(0, 0.2); each pixel (all channels) set to 0 with probability p
zoom_in        affine scale 1.5 about the centre ("zoom-in ... at scale of 50%": the 50% more magnification
               reading; the text's percentages are ambiguous)
zoom_out       affine scale 0.5 about the centre, black border
rotation       rotation by an angle ~ U(-30, 30) degrees
shearing       x-shear by an angle ~ U(-30, 30) degrees
gaussian_noise s ~ U(0, 0.2) (0.2 x 255 in 8-bit units); per-pixel noise N(0, s), shared by the channels
gaussian_blur  Gaussian kernel, sigma 3.0 pixels (kernel 2 * ceil(3 sigma) + 1)
============== =================================================================================

Sizes are in pixels of the network input: on the quick profile's 56-pixel crops sigma 3 blurs 4x more of
the image than on 224-pixel crops; pass ``sigma=`` to :func:`build_deformation` to rescale.
Randomness uses torch's global generator (seed it before evaluating, e.g. ``torch.manual_seed``).
:class:`DeformedTransform` applies a deformation after any normalised test transform (un-normalise with the
ImageNet mean/std, deform, clamp to [0, 1], re-normalise).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from dmllab.data.transforms import IMAGENET_MEAN, IMAGENET_STD
from dmllab.registry import Registry

DEFORMATIONS: Registry = Registry("input deformation")


def _uniform(lo: float, hi: float) -> float:
    return lo + (hi - lo) * float(torch.rand(()))


def cutout(img: torch.Tensor, *, count: int = 2, size: float = 0.2, fill: float = 0.5) -> torch.Tensor:
    """``count`` squares of side ``size`` x image size filled with ``fill`` (grey), uniform positions."""
    out = img.clone()
    _, h, w = img.shape
    sh, sw = max(1, round(size * h)), max(1, round(size * w))
    for _ in range(count):
        y = int(torch.randint(0, h - sh + 1, ()))
        x = int(torch.randint(0, w - sw + 1, ()))
        out[:, y : y + sh, x : x + sw] = fill
    return out


def dropout(img: torch.Tensor, *, p_max: float = 0.2) -> torch.Tensor:
    """Each pixel zeroed (all channels) with probability p ~ U(0, p_max)."""
    p = _uniform(0.0, p_max)
    keep = (torch.rand(img.shape[1:]) >= p).to(img.dtype)  # (H, W)
    return img * keep


def _affine(img: torch.Tensor, *, angle: float = 0.0, scale: float = 1.0, shear: float = 0.0) -> torch.Tensor:
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    return TF.affine(
        img,
        angle=angle,
        translate=[0, 0],
        scale=scale,
        shear=[shear, 0.0],
        interpolation=InterpolationMode.BILINEAR,
        fill=0.0,
    )


def zoom(img: torch.Tensor, *, scale: float) -> torch.Tensor:
    """Affine scaling about the centre (> 1 zooms in, < 1 zooms out with a black border)."""
    return _affine(img, scale=scale)


def rotation(img: torch.Tensor, *, degrees: float = 30.0) -> torch.Tensor:
    """Rotation by an angle ~ U(-degrees, degrees)."""
    return _affine(img, angle=_uniform(-degrees, degrees))


def shearing(img: torch.Tensor, *, degrees: float = 30.0) -> torch.Tensor:
    """x-shear by an angle ~ U(-degrees, degrees)."""
    return _affine(img, shear=_uniform(-degrees, degrees))


def gaussian_noise(img: torch.Tensor, *, s_max: float = 0.2) -> torch.Tensor:
    """Additive N(0, s) per pixel (shared by the channels), s ~ U(0, s_max) per image."""
    s = _uniform(0.0, s_max)
    return img + s * torch.randn(img.shape[1:])  # broadcast over channels


def gaussian_blur(img: torch.Tensor, *, sigma: float = 3.0) -> torch.Tensor:
    """Gaussian blur with ``sigma`` pixels, kernel 2 * ceil(3 sigma) + 1 (reflect padding)."""
    from torchvision.transforms import functional as TF

    k = 2 * math.ceil(3 * sigma) + 1
    return TF.gaussian_blur(img, kernel_size=[k, k], sigma=[sigma, sigma])


DEFORMATIONS.register("cutout", cutout)
DEFORMATIONS.register("dropout", dropout)
DEFORMATIONS.register("zoom_in", partial(zoom, scale=1.5))
DEFORMATIONS.register("zoom_out", partial(zoom, scale=0.5))
DEFORMATIONS.register("rotation", rotation)
DEFORMATIONS.register("shearing", shearing)
DEFORMATIONS.register("gaussian_noise", gaussian_noise)
DEFORMATIONS.register("gaussian_blur", gaussian_blur)


def build_deformation(name: str, **kwargs: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """The deformation ``name`` (PS Table 3) with keyword overrides, as a function of a (3, H, W) image."""
    fn = DEFORMATIONS.get(name)
    return partial(fn, **kwargs) if kwargs else fn


class DeformedTransform:
    """``transform`` (ending in ImageNet normalisation) followed by a deformation in [0, 1] pixel space."""

    def __init__(self, transform: Callable[[Any], torch.Tensor], deformation: str, **kwargs: Any) -> None:
        self.transform = transform
        self.name = deformation
        self.deform = build_deformation(deformation, **kwargs)
        self.mean = torch.tensor(IMAGENET_MEAN)[:, None, None]
        self.std = torch.tensor(IMAGENET_STD)[:, None, None]

    def __call__(self, image: Any) -> torch.Tensor:
        return self.apply(self.transform(image))

    def apply(self, view: torch.Tensor) -> torch.Tensor:
        """Deform an already transformed (normalised) view (3, H, W): what ``__call__`` does after ``transform``."""
        x = view * self.std + self.mean  # (3, H, W) in [0, 1]
        x = self.deform(x).clamp(0.0, 1.0)
        return (x - self.mean) / self.std

    def __repr__(self) -> str:
        return f"DeformedTransform({self.name}, {self.transform!r})"
