"""An offline, procedurally generated fine-grained benchmark that behaves like CUB200-2011 for this study.

No dataset can be downloaded on the study's machines, so the quick profile trains and evaluates on synthetic
"birds". Every class is a *species*: a vector of subtle attributes (body shape and part layout, part colours,
a body pattern, a marking) drawn as a small perturbation of its *genus* (5 species per genus), so that most
classes differ only slightly from their nearest neighbours - the fine-grained setting. Every image is a new
individual in a new scene: pose (rotation, flip, head/tail/wing angles), scale (object 25-80% of the image),
position, cluttered background (gradients, texture, distractor blobs, a perch), lighting (brightness, contrast,
colour cast), noise and partial occlusion, with the object's bounding box recorded like CUB's.

Splits follow CUB (official-code.md): classes ``0..C/2-1`` are the training side (``train`` its first half,
``val`` its second half, ``trainval`` all of it) and ``C/2..C-1`` are ``test``. A second, disjoint pool of
species (its own random stream and its own genera) gives ``pretrain``/``pretrain_val`` (80/20 of every class's
images) for pre-training the small CNN once, standing in for ImageNet pre-training. Its classes are *genera*
(every image a random species of the genus, :func:`render_genus`): coarse labels, like ImageNet's for CUB.

Difficulty (generator version 3, chosen on validation numbers only): objects fill 45-85% of the image, mild
rotation, 3 distractor blobs, 15% occlusion and moderate lighting changes; species spread 2.5 x the attribute
sigmas. Raw pixels and colour histograms stay weak (R@1 about 4-6% on ``test``).

Images are rendered with vectorised numpy (one class's images at once), deterministically from the seed, and
cached as ``.npy`` files under ``dmllab.paths.cache_dir()/synthetic/<pool>-<params hash>/``. ``meta.json``
records a fingerprint of every array file (:func:`dmllab.fileio.content_fingerprint`), checked when the cache is
opened (once per process while the files are unchanged: about 0.1 s for the quick profile's 120 MB of images): a
cache damaged or edited in place (an array zeroed, same shape) is set aside and generated again, never trained on.
A cache written by an older dmllab (no fingerprints) gets them recorded the first time it is opened.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from dmllab.data.base import DATASETS, RetrievalDataset, contiguous_labels
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
from dmllab.validation import IMAGES_PER_CLASS, check_int, check_path

#: Bump when the renderer changes: it is part of the cache key, so stale caches are never reused.
GENERATOR_VERSION = 3
#: Species per genus; classes ``g*5 .. g*5+4`` share genus ``g``.
SPECIES_PER_GENUS = 5
#: Fraction of every pretrain-pool class's images in the ``pretrain`` split (the rest is ``pretrain_val``).
PRETRAIN_FRACTION = 0.8
POOLS = ("main", "pretrain")
_POOL_TAG = {"main": 0, "pretrain": 1}
_ARRAYS = ("images", "class_ids", "boxes")


# ------------------------------------------------------------------------ Class parameters: genus -> species


@dataclass(frozen=True)
class Species:
    """The attribute vector of one class (lengths in object units, where the bird is about 2 units long).

    Hues are in [0, 1) (wrapping), saturations/values in [0, 1]; angles in radians, y pointing down.
    """

    body_len: float  # semi-major axis of the body ellipse
    body_aspect: float  # semi-minor / semi-major
    body_tilt: float
    head_angle: float  # where the head sits on the body outline (0 = straight ahead, >0 = higher)
    head_radius: float
    beak_len: float
    beak_width: float
    tail_angle: float
    tail_len: float
    tail_width: float
    wing_len: float  # relative to body_len
    wing_width: float  # relative to the body's semi-minor axis
    wing_angle: float
    wing_offset: float  # wing centre along the body axis, relative to body_len
    body_h: float
    body_s: float
    body_v: float
    head_h: float
    head_s: float
    head_v: float
    wing_h: float
    wing_s: float
    wing_v: float
    tail_h: float
    tail_s: float
    tail_v: float
    beak_h: float
    beak_v: float
    pattern_type: int  # 0 none, 1 stripes, 2 spots, 3 bars
    pattern_freq: float  # cycles across the body length
    pattern_angle: float
    pattern_contrast: float
    pattern_on_wing: int
    pattern_h: float
    pattern_v: float
    marking_type: int  # 0 none, 1 eye stripe, 2 crown, 3 wing bar, 4 breast patch
    marking_h: float
    marking_s: float
    marking_v: float

    def vector(self) -> np.ndarray:
        """The attributes as a float64 vector (for comparing classes)."""
        return np.asarray(astuple(self), dtype=np.float64)


# (low, high) of every continuous attribute for a genus, and the species' spread around its genus (sigma).
_RANGES: dict[str, tuple[float, float, float]] = {
    "body_len": (0.42, 0.60, 0.03),
    "body_aspect": (0.45, 0.80, 0.05),
    "body_tilt": (-0.35, 0.35, 0.08),
    "head_angle": (0.20, 0.90, 0.10),
    "head_radius": (0.16, 0.28, 0.02),
    "beak_len": (0.08, 0.30, 0.04),
    "beak_width": (0.03, 0.07, 0.008),
    "tail_angle": (-0.50, 0.40, 0.10),
    "tail_len": (0.25, 0.60, 0.06),
    "tail_width": (0.06, 0.18, 0.02),
    "wing_len": (0.50, 0.85, 0.06),
    "wing_width": (0.35, 0.65, 0.05),
    "wing_angle": (-0.50, 0.20, 0.10),
    "wing_offset": (-0.25, 0.10, 0.05),
    "pattern_freq": (3.0, 9.0, 0.8),
    "pattern_angle": (0.0, math.pi, 0.25),
    "pattern_contrast": (0.35, 0.80, 0.08),
}
_HUE_SIGMA = 0.06  # species hue spread around the genus: small, so neighbouring species look alike
_SV_SIGMA = 0.10
_SPECIES_SPREAD = 2.5  # multiplies the per-attribute sigmas of _RANGES


def _seed_rng(seed: int, pool: str, stream: int, index: int) -> np.random.Generator:
    """An independent generator for (pool, stream, index); the pools never share a stream."""
    return np.random.default_rng(np.random.SeedSequence([seed, _POOL_TAG[pool], stream, index]))


def genus_params(seed: int, pool: str, genus: int) -> Species:
    """Draw the prototype attribute vector of one genus."""
    rng = _seed_rng(seed, pool, 0, genus)
    cont = {k: float(rng.uniform(lo, hi)) for k, (lo, hi, _) in _RANGES.items()}
    base_hue = float(rng.uniform())
    colours: dict[str, float] = {}
    for part, spread in (("body", 0.0), ("head", 0.25), ("wing", 0.2), ("tail", 0.2)):
        colours[f"{part}_h"] = (base_hue + float(rng.uniform(-spread, spread))) % 1.0
        colours[f"{part}_s"] = float(rng.uniform(0.25, 0.9))
        colours[f"{part}_v"] = float(rng.uniform(0.3, 0.95))
    colours["beak_h"] = float(rng.uniform(0.0, 0.18))  # yellow-orange-brown beaks
    colours["beak_v"] = float(rng.uniform(0.15, 0.9))
    colours["pattern_h"] = float(rng.uniform())
    colours["pattern_v"] = float(rng.uniform(0.1, 0.9))
    colours["marking_h"] = float(rng.uniform())
    colours["marking_s"] = float(rng.uniform(0.3, 1.0))
    colours["marking_v"] = float(rng.uniform(0.2, 1.0))
    return Species(
        **cont,
        **colours,
        pattern_type=int(rng.integers(0, 4)),
        pattern_on_wing=int(rng.integers(0, 2)),
        marking_type=int(rng.integers(0, 5)),
    )


def species_params(seed: int, pool: str, class_id: int) -> Species:
    """Draw the attribute vector of class ``class_id``: its genus's prototype plus a small perturbation.

    Continuous attributes move by a fraction of their genus range, hues by a few hundredths, and with some
    probability the species has its own marking or pattern type, so species of one genus differ subtly.
    """
    g = genus_params(seed, pool, class_id // SPECIES_PER_GENUS)
    rng = _seed_rng(seed, pool, 1, class_id)
    values = {f.name: getattr(g, f.name) for f in fields(Species)}
    for k, (lo, hi, sigma) in _RANGES.items():
        span = hi - lo
        values[k] = float(
            np.clip(values[k] + rng.normal(0.0, _SPECIES_SPREAD * sigma), lo - 0.1 * span, hi + 0.1 * span)
        )
    for k in ("body_h", "head_h", "wing_h", "tail_h", "beak_h", "pattern_h"):
        values[k] = (values[k] + float(rng.normal(0.0, _HUE_SIGMA))) % 1.0
    saturations = ("body_s", "head_s", "wing_s", "tail_s", "marking_s")
    for k in saturations + ("body_v", "head_v", "wing_v", "tail_v", "beak_v", "pattern_v", "marking_v"):
        values[k] = float(np.clip(values[k] + rng.normal(0.0, _SV_SIGMA), 0.1, 1.0))
    if rng.uniform() < 0.7:  # most species carry their own marking
        values["marking_type"] = int(rng.integers(0, 5))
        values["marking_h"] = float(rng.uniform())
    if rng.uniform() < 0.3:
        values["pattern_type"] = int(rng.integers(0, 4))
    return Species(**values)


# ------------------------------------------------------- Rendering (vectorised over the images of one class)


def _hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectorised HSV -> RGB; inputs of one shape (...), output (..., 3) float32 in [0, 1]."""
    h = np.asarray(h, dtype=np.float32) % 1.0
    s = np.clip(np.asarray(s, dtype=np.float32), 0, 1)
    v = np.clip(np.asarray(v, dtype=np.float32), 0, 1)
    k = (np.array([5.0, 3.0, 1.0], dtype=np.float32) + h[..., None] * 6.0) % 6.0
    return v[..., None] - v[..., None] * s[..., None] * np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0)


def _col(x: np.ndarray) -> np.ndarray:
    """Per-image scalars (n,) -> (n, 1, 1) for broadcasting against (n, H, W) fields."""
    return np.asarray(x, dtype=np.float32)[:, None, None]


def _ellipse_alpha(
    ux: np.ndarray,
    uy: np.ndarray,
    cx: np.ndarray,
    cy: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    theta: np.ndarray,
    pix: np.ndarray,
) -> np.ndarray:
    """Anti-aliased coverage (n, H, W) of ellipses with centre (cx, cy), semi-axes (a, b), major axis at theta.

    ``pix`` is the pixel size in the same units; coverage ramps over one pixel around the (approximate)
    signed distance ``(r - 1) * min(a, b)`` with ``r`` the normalised elliptic radius.
    """
    c, s = _col(np.cos(theta)), _col(np.sin(theta))
    dx, dy = ux - _col(cx), uy - _col(cy)
    lx, ly = (c * dx + s * dy) / _col(a), (-s * dx + c * dy) / _col(b)
    sdf = (np.sqrt(lx * lx + ly * ly) - 1.0) * _col(np.minimum(a, b))
    return np.clip(0.5 - sdf / _col(pix), 0.0, 1.0)


def _over(canvas: np.ndarray, colour: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Alpha-composite ``colour`` ((n, 3) or (n, H, W, 3)) over ``canvas`` (n, H, W, 3) in place."""
    if colour.ndim == 2:
        colour = colour[:, None, None, :]
    diff = np.subtract(colour, canvas)  # canvas + a * (colour - canvas), with a single temporary
    diff *= alpha[..., None]
    canvas += diff
    return canvas


def _upsample(grid: np.ndarray, size: int) -> np.ndarray:
    """Bilinear upsampling of (n, g, g, c) to (n, size, size, c) (smooth low-frequency noise)."""
    g = grid.shape[1]
    pos = (np.arange(size, dtype=np.float32) + 0.5) / size * (g - 1)
    i0 = np.clip(np.floor(pos).astype(np.int64), 0, g - 2)
    t = (pos - i0).astype(np.float32)
    rows = grid[:, i0] * (1 - t)[None, :, None, None] + grid[:, i0 + 1] * t[None, :, None, None]
    return rows[:, :, i0] * (1 - t)[None, None, :, None] + rows[:, :, i0 + 1] * t[None, None, :, None]


def _background(rng: np.random.Generator, n: int, xs: np.ndarray, ys: np.ndarray, size: int) -> np.ndarray:
    """Cluttered scenes (n, H, W, 3): a colour gradient, low-frequency noise, a texture and distractor blobs."""
    pix = np.full(n, 2.0 / size, dtype=np.float32)
    c1 = _hsv_to_rgb(rng.uniform(size=n), rng.uniform(0.05, 0.55, n), rng.uniform(0.2, 0.95, n))
    c2 = _hsv_to_rgb(rng.uniform(size=n), rng.uniform(0.05, 0.55, n), rng.uniform(0.2, 0.95, n))
    beta = rng.uniform(0, 2 * np.pi, n)
    t = np.clip(
        0.5 + (xs * _col(np.cos(beta)) + ys * _col(np.sin(beta))) * _col(rng.uniform(0.2, 0.7, n)), 0, 1
    )
    bg = c1[:, None, None, :] * (1 - t[..., None]) + c2[:, None, None, :] * t[..., None]
    bg += _upsample(rng.normal(0, 0.08, (n, 5, 5, 3)).astype(np.float32), size)
    gamma = rng.uniform(0, np.pi, n)
    wave = np.sin(
        2 * np.pi * _col(rng.uniform(2, 10, n)) * (xs * _col(np.cos(gamma)) + ys * _col(np.sin(gamma)))
        + _col(rng.uniform(0, 2 * np.pi, n))
    )
    bg += (wave * _col(rng.uniform(0.0, 0.1, n)))[..., None]
    # Distractor blobs: half of them in bird-like colours, so colour statistics alone do not name a class.
    for _ in range(3):
        active = rng.uniform(size=n) < 0.4
        birdlike = rng.uniform(size=n) < 0.5
        colour = np.where(
            birdlike[:, None],
            _hsv_to_rgb(rng.uniform(size=n), rng.uniform(0.25, 0.9, n), rng.uniform(0.3, 0.95, n)),
            _hsv_to_rgb(rng.uniform(size=n), rng.uniform(0.05, 0.6, n), rng.uniform(0.15, 0.9, n)),
        )
        shape = ((-1, 1), (-1, 1), (0.05, 0.35), (0.03, 0.2), (0, np.pi))  # ranges of cx, cy, a, b, theta
        alpha = _ellipse_alpha(xs, ys, *(rng.uniform(lo, hi, n) for lo, hi in shape), pix)
        _over(bg, colour, alpha * _col(active))
    # A perch (long thin branch) in most scenes.
    has_perch = rng.uniform(size=n) < 0.6
    perch = _hsv_to_rgb(rng.uniform(0.03, 0.12, n), rng.uniform(0.3, 0.7, n), rng.uniform(0.2, 0.6, n))
    shape = ((-0.5, 0.5), (0.0, 0.8), (0.8, 1.5), (0.02, 0.05), (-0.4, 0.4))  # ranges of cx, cy, a, b, theta
    alpha = _ellipse_alpha(xs, ys, *(rng.uniform(lo, hi, n) for lo, hi in shape), pix)
    return _over(bg, perch, alpha * _col(has_perch))


def _jitter(rng: np.random.Generator, value: float, sigma: float, n: int, rel: bool = False) -> np.ndarray:
    """Individual variation around a species value: additive, or multiplicative (log-normal) if ``rel``."""
    if rel:
        return (value * np.exp(rng.normal(0.0, sigma, n))).astype(np.float32)
    return (value + rng.normal(0.0, sigma, n)).astype(np.float32)


def _draw_individuals(sp: Species, n: int, rng: np.random.Generator) -> SimpleNamespace:
    """Every per-image parameter of ``n`` images of species ``sp``, drawn from ``rng`` in a fixed order before any
    per-pixel noise: pose and placement, individual variation of the parts, size and colour, and the scene."""
    d = SimpleNamespace()
    # --- per-image pose and placement -------------------------------------------------------------------
    d.extent = rng.uniform(0.45, 0.85, n).astype(np.float32)  # object size as a fraction of the image side
    # The bird's tight box spans about 1.5 object units and the image 2 units: box side ~ extent * image side.
    d.scale = d.extent * 1.33
    margin = 1.0 - 0.75 * d.extent
    d.cx, d.cy = (rng.uniform(-margin, margin).astype(np.float32) for _ in range(2))
    d.rot = rng.uniform(-0.35, 0.35, n).astype(np.float32)
    d.flip = rng.uniform(size=n) < 0.5
    # --- per-image individual variation (pose of the parts, size, colour) ------------------------------------
    d.body_len = _jitter(rng, sp.body_len, 0.04, n, rel=True)
    d.body_b = d.body_len * _jitter(rng, sp.body_aspect, 0.04, n, rel=True)
    d.body_tilt = _jitter(rng, sp.body_tilt, 0.08, n)
    d.head_angle = _jitter(rng, sp.head_angle, 0.15, n)
    d.head_r = _jitter(rng, sp.head_radius, 0.05, n, rel=True)
    d.beak_len = _jitter(rng, sp.beak_len, 0.08, n, rel=True)
    d.beak_tilt = _jitter(rng, 0.0, 0.15, n)
    d.tail_angle = _jitter(rng, sp.tail_angle, 0.12, n)
    d.tail_len = _jitter(rng, sp.tail_len, 0.08, n, rel=True)
    d.wing_angle = _jitter(rng, sp.wing_angle, 0.15, n)
    d.hue_j = rng.normal(0.0, 0.012, (n, 7)).astype(np.float32)
    d.val_j = rng.normal(0.0, 0.04, (n, 7)).astype(np.float32)
    d.pattern_phase = rng.uniform(0, 2 * np.pi, (n, 2)).astype(np.float32)
    d.pattern_angle = _jitter(rng, sp.pattern_angle, 0.1, n)
    # --- scene -------------------------------------------------------------------------------------------------
    d.occluded = rng.uniform(size=n) < 0.15
    d.occ_dir = rng.uniform(0, 2 * np.pi, n)
    d.occ_dist = rng.uniform(0.3, 0.9, n) * d.scale
    d.occ_a, d.occ_b = rng.uniform(0.2, 0.45, n) * d.scale, rng.uniform(0.1, 0.3, n) * d.scale
    d.occ_theta = rng.uniform(0, np.pi, n)
    d.occ_col = _hsv_to_rgb(rng.uniform(0.15, 0.45, n), rng.uniform(0.2, 0.8, n), rng.uniform(0.15, 0.7, n))
    d.brightness = rng.uniform(0.75, 1.25, n).astype(np.float32)
    d.contrast = rng.uniform(0.8, 1.2, n).astype(np.float32)
    d.cast = rng.uniform(0.92, 1.08, (n, 3)).astype(np.float32)
    d.noise_sigma = rng.uniform(0.005, 0.05, n).astype(np.float32)
    return d


class _Bird:
    """The painting of one batch of individuals in their object frame: ``obj`` (premultiplied colour, (n, S, S, 3))
    and ``cover`` (its coverage, (n, S, S)), painted part by part, back to front (:func:`render_class`)."""

    def __init__(self, sp: Species, d: SimpleNamespace, ux: np.ndarray, uy: np.ndarray, size: int) -> None:
        n = len(d.extent)
        self.sp, self.d, self.ux, self.uy, self.n = sp, d, ux, uy, n
        self.pix = (2.0 / size) / d.scale  # one pixel in object units, (n,)
        self.obj = np.zeros((n, size, size, 3), dtype=np.float32)
        self.cover = np.zeros((n, size, size), dtype=np.float32)
        self.pat_col = self.colour(sp.pattern_h, 0.6, sp.pattern_v, 2)  # the pattern's colour, body and wing

    def body_frame(self, px: np.ndarray, py: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Body-frame point -> object-frame point (the body is tilted by body_tilt)."""
        ct, st = np.cos(self.d.body_tilt), np.sin(self.d.body_tilt)
        return ct * px - st * py, st * px + ct * py

    def colour(self, h: float, s_: float, v: float, j: int) -> np.ndarray:
        d = self.d
        return _hsv_to_rgb(h + d.hue_j[:, j], np.full(self.n, s_, np.float32), v + d.val_j[:, j])  # (n, 3)

    def ellipse(self, x: Any, y: Any, a: Any, b: Any, theta: Any) -> np.ndarray:
        return _ellipse_alpha(self.ux, self.uy, x, y, a, b, theta, self.pix)

    def paint(self, col: np.ndarray, alpha: np.ndarray) -> None:
        _over(self.obj, col, alpha)
        self.cover = 1.0 - (1.0 - self.cover) * (1.0 - alpha)

    def pattern(self, px: np.ndarray, py: np.ndarray, phase: np.ndarray) -> np.ndarray:
        """Pattern coverage (n, H, W) in part coordinates; frequency in cycles per body length."""
        sp, d = self.sp, self.d
        k = 2 * np.pi * sp.pattern_freq / (2 * _col(d.body_len))
        pa, pb = _col(np.cos(d.pattern_angle)), _col(np.sin(d.pattern_angle))
        along, across = pa * px + pb * py, -pb * px + pa * py
        if sp.pattern_type == 1:  # thin stripes
            field = np.sin(k * along + _col(phase)) - 0.4
        elif sp.pattern_type == 2:  # spots
            field = np.sin(k * along + _col(phase)) * np.sin(k * across) - 0.45
        elif sp.pattern_type == 3:  # broad bars
            field = np.sin(0.5 * k * along + _col(phase)) + 0.1
        else:
            return np.zeros_like(px)
        return np.clip(field * 4.0, 0.0, 1.0) * sp.pattern_contrast

    def tail_and_body(self) -> np.ndarray:
        """The tail (behind the body, pointing backwards), the body with its pattern and a breast patch; returns
        the body's coverage."""
        sp, d, n = self.sp, self.d, self.n
        tail_dir = np.pi - d.tail_angle  # y down: positive tail_angle lifts the tail
        tx, ty = self.body_frame(
            (d.body_len * 0.8 + d.tail_len * 0.45) * np.cos(tail_dir), (d.body_b * 0.5) * np.sin(tail_dir)
        )
        tail_a = self.ellipse(tx, ty, d.tail_len * 0.55, np.full(n, sp.tail_width), tail_dir + d.body_tilt)
        self.paint(self.colour(sp.tail_h, sp.tail_s, sp.tail_v, 0), tail_a)
        body_a = self.ellipse(np.zeros(n), np.zeros(n), d.body_len, d.body_b, d.body_tilt)
        ct, st = _col(np.cos(d.body_tilt)), _col(np.sin(d.body_tilt))
        bx, by = ct * self.ux + st * self.uy, -st * self.ux + ct * self.uy  # body-frame coordinates
        body_col = self.colour(sp.body_h, sp.body_s, sp.body_v, 1)
        body_fill = (
            body_col[:, None, None, :]
            + self.pattern(bx, by, d.pattern_phase[:, 0])[..., None]
            * (self.pat_col - body_col)[:, None, None, :]
        )
        self.paint(body_fill, body_a)
        if sp.marking_type == 4:  # breast patch: lower front of the body
            mx, my = self.body_frame(d.body_len * 0.45, d.body_b * 0.45)
            mark = self.ellipse(mx, my, d.body_len * 0.4, d.body_b * 0.4, d.body_tilt) * body_a
            self.paint(self.colour(sp.marking_h, sp.marking_s, sp.marking_v, 3), mark)
        return body_a

    def wing(self) -> None:
        """The wing, on the body (its angle is the most variable part of the pose), with its pattern and bar."""
        sp, d, ux, uy, pix = self.sp, self.d, self.ux, self.uy, self.pix
        wx, wy = self.body_frame(sp.wing_offset * d.body_len, -0.15 * d.body_b)
        wing_len, wing_wid = sp.wing_len * d.body_len, sp.wing_width * d.body_b
        wing_dir = np.pi + d.wing_angle + d.body_tilt
        wing_a = self.ellipse(wx, wy, wing_len, wing_wid, wing_dir)
        wing_col = self.colour(sp.wing_h, sp.wing_s, sp.wing_v, 4)
        wc, ws = _col(np.cos(wing_dir)), _col(np.sin(wing_dir))
        w_along = wc * (ux - _col(wx)) + ws * (uy - _col(wy))
        w_across = -ws * (ux - _col(wx)) + wc * (uy - _col(wy))
        wing_fill = np.broadcast_to(wing_col[:, None, None, :], self.obj.shape)
        if sp.pattern_on_wing:
            wing_fill = (
                wing_fill
                + self.pattern(w_along, w_across, d.pattern_phase[:, 1])[..., None]
                * (self.pat_col - wing_col)[:, None, None, :]
            )
        self.paint(wing_fill, wing_a)
        if sp.marking_type == 3:  # wing bar across the wing
            bar = np.clip(
                0.5 - (np.abs(w_along - 0.1 * _col(wing_len)) - 0.12 * _col(wing_len)) / _col(pix), 0, 1
            )
            self.paint(self.colour(sp.marking_h, sp.marking_s, sp.marking_v, 3), bar * wing_a)

    def head(self) -> None:
        """Head, beak and eye, with an eye stripe or a crown."""
        sp, d, n, ux, uy, pix = self.sp, self.d, self.n, self.ux, self.uy, self.pix
        hdir = -d.head_angle  # y down: "up" is negative
        head_r = d.head_r
        hx, hy = self.body_frame(
            d.body_len * 0.85 * np.cos(hdir) + head_r * 0.5 * np.cos(hdir),
            d.body_b * 0.85 * np.sin(hdir) + head_r * 0.5 * np.sin(hdir),
        )
        beak_dir = d.body_tilt + 0.3 * hdir + d.beak_tilt
        kx = hx + (head_r + d.beak_len * 0.4) * np.cos(beak_dir)
        ky = hy + (head_r + d.beak_len * 0.4) * np.sin(beak_dir)
        beak_a = self.ellipse(kx, ky, d.beak_len * 0.6, np.full(n, sp.beak_width), beak_dir)
        self.paint(self.colour(sp.beak_h, 0.7, sp.beak_v, 5), beak_a)
        head_a = self.ellipse(hx, hy, head_r, head_r, np.zeros(n))
        self.paint(self.colour(sp.head_h, sp.head_s, sp.head_v, 6), head_a)
        marking = self.colour(sp.marking_h, sp.marking_s, sp.marking_v, 3)
        ex, ey = hx + head_r * 0.45 * np.cos(beak_dir - 0.5), hy + head_r * 0.45 * np.sin(beak_dir - 0.5)
        if sp.marking_type == 1:  # eye stripe through the eye, along the beak
            self.paint(marking, self.ellipse(ex, ey, head_r * 0.95, head_r * 0.22, beak_dir) * head_a)
        elif sp.marking_type == 2:  # crown: the top of the head
            up_x, up_y = np.cos(d.body_tilt - np.pi / 2), np.sin(d.body_tilt - np.pi / 2)
            height = _col(up_x) * (ux - _col(hx)) + _col(up_y) * (uy - _col(hy))
            self.paint(marking, np.clip(0.5 + (height - 0.3 * _col(head_r)) / _col(pix), 0, 1) * head_a)
        eye = self.ellipse(ex, ey, head_r * 0.2, head_r * 0.2, np.zeros(n))
        self.paint(np.tile(np.array([[0.05, 0.05, 0.05]], np.float32), (n, 1)), eye)


def _tight_boxes(cover: np.ndarray, size: int) -> np.ndarray:
    """The tight box ``(x, y, w, h)`` of each image's object (coverage above one half), (n, 4); zero where none."""
    inside = cover > 0.5
    cols_any, rows_any = inside.any(axis=1), inside.any(axis=2)  # (n, W), (n, H)
    x0 = cols_any.argmax(axis=1)
    x1 = size - cols_any[:, ::-1].argmax(axis=1)
    y0 = rows_any.argmax(axis=1)
    y1 = size - rows_any[:, ::-1].argmax(axis=1)
    visible = cols_any.any(axis=1)
    return np.stack([x0, y0, x1 - x0, y1 - y0], axis=1).astype(np.float32) * visible[:, None]


def _composite(
    bg: np.ndarray, bird: _Bird, d: SimpleNamespace, xs: np.ndarray, ys: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Scene, object, occluder (a leaf in front of part of the bird), lighting and sensor noise: uint8 images."""
    n, size = len(d.extent), bg.shape[1]
    img = bg * (1.0 - bird.cover[..., None]) + bird.obj
    pix_img = np.full(n, 2.0 / size, np.float32)
    ox, oy = d.cx + d.occ_dist * np.cos(d.occ_dir), d.cy + d.occ_dist * np.sin(d.occ_dir)  # the leaf's centre
    occ = _ellipse_alpha(xs, ys, ox, oy, d.occ_a, d.occ_b, d.occ_theta, pix_img)
    _over(img, d.occ_col, occ * _col(d.occluded))
    img *= (d.brightness[:, None] * d.cast)[:, None, None, :]
    mean = img.mean(axis=(1, 2, 3), keepdims=True)
    img = (img - mean) * _col(d.contrast)[..., None] + mean
    img += rng.normal(0.0, 1.0, img.shape).astype(np.float32) * _col(d.noise_sigma)[..., None]
    return (np.clip(img, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def render_class(
    species: Species, n: int, size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Render ``n`` images of one species, each a new individual, pose and scene.

    Args:
        species: the class's attribute vector.
        n: number of images.
        size: image side in pixels.
        rng: the class's image stream (all per-image parameters are drawn before any per-pixel noise, so
            the scene parameters do not depend on ``size``).

    Returns:
        ``(images, boxes)``: uint8 (n, size, size, 3) and float32 (n, 4) boxes ``(x, y, w, h)`` in pixels,
        the tight box of the whole object before occlusion (as CUB's boxes include occluded parts).
    """
    d = _draw_individuals(species, n, rng)
    coords = (np.arange(size, dtype=np.float32) + 0.5) / size * 2.0 - 1.0
    xs, ys = coords[None, None, :], coords[None, :, None]  # image coordinates in [-1, 1], y down
    bg = _background(rng, n, xs, ys, size)
    # Object frame: undo translation, rotation and scale; mirror for flipped individuals.
    c, s = _col(np.cos(d.rot)), _col(np.sin(d.rot))
    dx, dy = xs - _col(d.cx), ys - _col(d.cy)
    ux = (c * dx + s * dy) / _col(d.scale)
    uy = (-s * dx + c * dy) / _col(d.scale)
    ux = np.where(_col(d.flip) > 0, -ux, ux)
    bird = _Bird(species, d, ux, uy, size)
    bird.tail_and_body()
    bird.wing()
    bird.head()
    boxes = _tight_boxes(bird.cover, size)  # before occlusion, like CUB's annotation
    return _composite(bg, bird, d, xs, ys, rng), boxes


# -------------------------------------------------------------------------- Generation and the on-disk cache


def _per_class_range(images_per_class: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(images_per_class, int):
        lo = hi = images_per_class
    else:
        lo, hi = (int(v) for v in images_per_class)
    if not 1 <= lo <= hi:
        raise ValueError(
            f"images_per_class must be a positive int or (low, high) with low <= high, got {images_per_class!r}"
        )
    return lo, hi


def class_name(pool: str, class_id: int) -> str:
    """Readable class name: ``genus03_species07`` in the main pool; ``pre_genus003`` in the pre-training pool,
    whose classes are genera (:func:`render_genus`)."""
    if pool == "pretrain":
        return f"pre_genus{class_id:03d}"
    return f"genus{class_id // SPECIES_PER_GENUS:02d}_species{class_id % SPECIES_PER_GENUS:02d}"


def render_genus(
    seed: int, genus: int, n: int, size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Render ``n`` images of pre-training class ``genus``: every image shows a random one of the genus's
    ``SPECIES_PER_GENUS`` species (pre-training pool species ``genus * SPECIES_PER_GENUS + j``).

    The pre-training pool is labelled at the genus level, like ImageNet's coarse classes for CUB: a classifier
    trained on it learns what a bird is and what separates genera, but is trained to be *invariant* to the
    species-level differences, which only the metric-learning fine-tuning can then learn. (With species
    labels the pre-training pool is the same task as the benchmark with more classes, and fine-tuning on its
    50 training classes cannot add anything: the pre-trained-only network already matched it.)
    """
    which = rng.integers(0, SPECIES_PER_GENUS, n)
    images = np.empty((n, size, size, 3), dtype=np.uint8)
    boxes = np.empty((n, 4), dtype=np.float32)
    for j in np.unique(which):
        idx = np.flatnonzero(which == j)
        sp = species_params(seed, "pretrain", genus * SPECIES_PER_GENUS + int(j))
        images[idx], boxes[idx] = render_class(sp, len(idx), size, rng)
    return images, boxes


def generate(
    pool: str,
    *,
    seed: int = 0,
    image_size: int = 64,
    num_classes: int = 200,
    images_per_class: int | Sequence[int] = (40, 60),
    progress: bool = True,
    estimate: Callable[[float], None] | None = None,
) -> dict[str, np.ndarray]:
    """Render a whole pool in memory (no disk access).

    Class ``c`` of a pool has the same attributes and images whatever ``num_classes`` is, so a smaller
    configuration is a prefix of a larger one (with the same ``image_size`` and ``images_per_class``).
    ``estimate(seconds)`` is called once, after the first class, with the time the whole pool will take at that
    pace.

    Returns:
        ``{"images": uint8 (N, S, S, 3), "class_ids": int64 (N,), "boxes": float32 (N, 4) as (x, y, w, h)}``,
        images grouped by class in class order.
    """
    if pool not in POOLS:
        raise ValueError(f"unknown synthetic pool {pool!r}; valid pools: {', '.join(POOLS)}")
    if num_classes < 1 or image_size < 8:
        raise ValueError(f"need num_classes >= 1 and image_size >= 8, got {num_classes} and {image_size}")
    lo, hi = _per_class_range(images_per_class)
    from tqdm.auto import tqdm

    images, class_ids, boxes = [], [], []
    start = time.perf_counter()
    for c in tqdm(range(num_classes), desc=f"synthetic {pool} pool", unit="class", disable=not progress):
        if c == 1 and estimate is not None:
            estimate((time.perf_counter() - start) * num_classes)
        rng = _seed_rng(seed, pool, 2, c)
        n = int(rng.integers(lo, hi + 1))
        if pool == "pretrain":
            im, bx = render_genus(seed, c, n, image_size, rng)
        else:
            im, bx = render_class(species_params(seed, pool, c), n, image_size, rng)
        images.append(im)
        boxes.append(bx)
        class_ids.append(np.full(n, c, dtype=np.int64))
    return {
        "images": np.concatenate(images),
        "class_ids": np.concatenate(class_ids),
        "boxes": np.concatenate(boxes),
    }


def _cache_key(
    pool: str, seed: int, image_size: int, num_classes: int, images_per_class: tuple[int, int]
) -> dict:
    return {
        "version": GENERATOR_VERSION,
        "pool": pool,
        "seed": int(seed),
        "image_size": int(image_size),
        "num_classes": int(num_classes),
        "images_per_class": list(images_per_class),
    }


def ensure_cached(
    pool: str,
    *,
    seed: int = 0,
    image_size: int = 64,
    num_classes: int = 200,
    images_per_class: int | Sequence[int] = (40, 60),
    root: str | os.PathLike | None = None,
    progress: bool = True,
) -> Path:
    """Generate a pool once and cache it; return its folder (``images.npy``, ``class_ids.npy``, ``boxes.npy``).

    The folder is ``<root or cache_dir()/synthetic>/<pool>-<hash of the parameters>/``. It is written to a
    temporary sibling and renamed into place, so readers never see a partial cache; when two processes generate
    at once, the first rename wins and the other discards its copy.
    """
    key = _cache_key(pool, seed, image_size, num_classes, _per_class_range(images_per_class))
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    base = check_path("synthetic cache root", root) if root is not None else cache_dir() / "synthetic"
    final = base / f"{pool}-{digest}"
    if (final / "meta.json").is_file():
        try:
            verify_cache(final)
            return final
        except CorruptFileError as err:
            set_aside(final, str(err), then="generating it again")
    with naming(base, "writing"):
        base.mkdir(parents=True, exist_ok=True)

    def say(seconds: float) -> None:
        what = f"rendering the synthetic benchmark's {pool} pool ({num_classes} classes, {image_size} px, seed {seed})"
        first_use(f"{what} into {final}", seconds)

    data = generate(
        pool,
        seed=seed,
        image_size=image_size,
        num_classes=num_classes,
        images_per_class=images_per_class,
        progress=progress,
        estimate=say,
    )
    with new_folder(final, "meta.json") as tmp:
        for name in _ARRAYS:
            with naming(tmp / f"{name}.npy", "writing"):
                np.save(tmp / f"{name}.npy", data[name])
        meta = {
            **key,
            "num_images": len(data["class_ids"]),
            "fingerprints": {f"{n}.npy": content_fingerprint(tmp / f"{n}.npy") for n in _ARRAYS},
        }
        with naming(tmp / "meta.json", "writing"):
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    return final


def load_cached(folder: str | os.PathLike, mmap: bool = True) -> dict[str, np.ndarray]:
    """Load a cache folder written by :func:`ensure_cached` (images memory-mapped unless ``mmap=False``).

    Raises:
        FileNotFoundError: an array file is missing. CorruptFileError: one cannot be read as an array (naming it).
    """
    folder = Path(folder)
    missing = [n for n in _ARRAYS if not (folder / f"{n}.npy").is_file()]
    if missing:
        raise FileNotFoundError(
            f"synthetic cache {folder} lacks {missing}; delete the folder to regenerate it"
        )
    out = {}
    for n in _ARRAYS:
        path = folder / f"{n}.npy"
        try:
            with naming(path, "reading"):
                out[n] = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except (ValueError, EOFError) as err:  # numpy's errors for a truncated or damaged .npy file
            raise CorruptFileError(
                f"synthetic cache file {path} is damaged ({err}); delete {folder} to generate it again"
            ) from None
    return out


def verify_cache(folder: str | os.PathLike) -> None:
    """Check a cache folder of :func:`ensure_cached` against the fingerprints in its ``meta.json`` and that its
    arrays load with matching lengths; a folder written before fingerprints were recorded gets them now.

    Raises CorruptFileError: naming the file that fails."""
    folder = Path(folder)
    meta_path = folder / "meta.json"
    try:
        with naming(meta_path, "reading"):
            meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError) as err:
        raise CorruptFileError(f"synthetic cache file {meta_path} is damaged ({err})") from None
    expected = meta.get("fingerprints")
    if isinstance(expected, dict):
        check_fingerprints(folder, expected, f"synthetic cache {folder}")
    try:
        arrays = load_cached(folder)
    except FileNotFoundError as err:
        raise CorruptFileError(str(err)) from None
    n = {len(a) for a in arrays.values()}
    if len(n) != 1 or n != {meta.get("num_images", len(arrays["class_ids"]))}:
        raise CorruptFileError(f"synthetic cache {folder}: its arrays disagree on the number of images")
    if not isinstance(expected, dict):  # written by an older dmllab: record the fingerprints now
        meta["fingerprints"] = {f"{a}.npy": content_fingerprint(folder / f"{a}.npy") for a in _ARRAYS}
        try:
            write_text_atomic(meta_path, json.dumps(meta, indent=1))
        except OSError:  # a read-only cache stays as it is
            pass


# ----------------------------------------------------------------------------------------------- The dataset


def split_classes(split: str, num_classes: int) -> list[int]:
    """The class ids of a main-pool split (CUB-style halves; see the module docstring)."""
    half = num_classes // 2
    quarter = half // 2
    main = {
        "train": list(range(0, quarter)),
        "val": list(range(quarter, half)),
        "trainval": list(range(0, half)),
        "test": list(range(half, num_classes)),
    }
    if split not in main:
        raise ValueError(f"unknown main-pool split {split!r}; valid: {', '.join(main)}")
    return main[split]


@DATASETS.register("synthetic")
class SyntheticFineGrained(RetrievalDataset):
    """The procedurally generated fine-grained benchmark (CUB-like), generated on first use and cached.

    Args:
        root: cache folder; default ``dmllab.paths.cache_dir()/synthetic``.
        split: ``train`` (first quarter of the classes), ``val`` (second quarter), ``trainval`` (first half),
            ``test`` (second half), or ``pretrain``/``pretrain_val`` (80/20 of every class of the disjoint
            pre-training pool), or ``heldout_train``/``heldout_test`` (80/20 of every ``test`` class's images: a
            same-class split for classification accuracy, Heated-up Table 4, on classes that no retrieval run trains
            on and that ``dmllab tune`` never scores, so the recipes' tuning and the classification are disjoint).
        seed: generator seed; everything is a deterministic function of it.
        image_size: image side in pixels (64 default; 32 for the smoke profile).
        num_classes: classes in the main pool (>= 4, even: the train/val/test structure needs it).
        images_per_class: an int, or the inclusive (low, high) range of images per class.
        num_pretrain_classes: classes in the pre-training pool (only generated for the pretrain splits).
        transform: applied to the PIL image.
        progress: show a tqdm bar while generating.

    Attributes:
        images: uint8 (N, S, S, 3) in memory; boxes: float32 (N, 4) ``(x, y, w, h)`` in pixels;
        labels, class_ids (original ids in the pool), class_names, num_classes.
    """

    @classmethod
    def inputs(cls, root: str | None, **kwargs: Any) -> str:
        """What a run key needs beyond the config: the renderer's version (:data:`GENERATOR_VERSION`)."""
        return f"synthetic renderer {GENERATOR_VERSION}"

    splits = ("train", "val", "trainval", "test", "pretrain", "pretrain_val", "heldout_train", "heldout_test")

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        split: str = "train",
        seed: int = 0,
        image_size: int = 64,
        num_classes: int = 200,
        images_per_class: int | Sequence[int] = (40, 60),
        num_pretrain_classes: int = 100,
        transform: Callable[[Any], Any] | None = None,
        progress: bool = True,
    ) -> None:
        super().__init__(split, transform)
        check_int("seed", seed, low=0)
        check_int("image_size", image_size, low=8)
        check_int("num_classes", num_classes)
        check_int("num_pretrain_classes", num_pretrain_classes)
        if not IMAGES_PER_CLASS(images_per_class):
            raise ValueError(f"images_per_class must be {IMAGES_PER_CLASS.what}, got {images_per_class!r}")
        if num_classes < 4 or num_classes % 2:
            raise ValueError(
                f"num_classes must be an even number >= 4 (train/val/test halves), got {num_classes}"
            )
        if split.startswith("pretrain"):
            pool, n_pool = "pretrain", num_pretrain_classes
        else:
            pool, n_pool = "main", num_classes
        folder = ensure_cached(
            pool,
            seed=seed,
            image_size=image_size,
            num_classes=n_pool,
            images_per_class=images_per_class,
            root=root,
            progress=progress,
        )
        data = load_cached(folder)
        all_ids = np.asarray(data["class_ids"])
        if split.startswith("heldout"):  # both sides: test's classes (Heated-up Table 4), 80/20 of its images
            classes = split_classes("test", num_classes)
            keep = np.isin(all_ids, classes) & _pretrain_mask(all_ids, split == "heldout_train")
        elif pool == "main":
            classes = split_classes(split, num_classes)
            keep = np.isin(all_ids, classes)
        else:  # pretrain and pretrain_val share all classes of the pool, hence one label map
            classes = list(range(num_pretrain_classes))
            keep = _pretrain_mask(all_ids, split == "pretrain")
        index = np.flatnonzero(keep)
        self.pool = pool
        self.images: np.ndarray = np.array(data["images"][index])  # in memory: __getitem__ reads no disk
        self.boxes: np.ndarray = np.array(data["boxes"][index], dtype=np.float32)
        self.labels, self.class_ids = contiguous_labels([int(c) for c in all_ids[index]], classes)
        self.class_names = [class_name(pool, c) for c in self.class_ids]
        self.image_size = image_size
        self.seed = seed
        # Identity of these images for caches built from them (dmllab.data.tensor.FeatureCache): the pool folder
        # name holds the generator version and a hash of every generation parameter.
        self.fingerprint = f"synthetic:{folder.name}:{split}:{num_classes}"

    def _load(self, index: int) -> Any:
        from PIL import Image

        return Image.fromarray(self.images[index])


def _pretrain_mask(class_ids: np.ndarray, train: bool) -> np.ndarray:
    """The first ``PRETRAIN_FRACTION`` of every class's images (``train``) or the rest.

    Each side gets at least one image of every class that has two or more; a single image goes to ``train``.
    """
    mask = np.zeros(len(class_ids), dtype=bool)
    for c in np.unique(class_ids):
        idx = np.flatnonzero(class_ids == c)
        cut = max(1, min(len(idx) - 1, round(PRETRAIN_FRACTION * len(idx))))
        mask[idx[:cut] if train else idx[cut:]] = True
    return mask


# -------------------------------------------------------------------------------- A picture of the benchmark


def sample_grid(
    dataset: Any, n_classes: int = 8, per_class: int = 6, pad: int = 2, seed: int = 0
) -> np.ndarray:
    """A uint8 image grid: one row per class (the first ``n_classes`` labels), ``per_class`` random images each.

    Works on any dataset with ``labels`` and either an ``images`` array (N, H, W[, 3]) or PIL items.
    The first classes of the synthetic benchmark share a genus, so the rows show how subtle the differences are.
    """
    labels = np.asarray(dataset.labels)
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)[:n_classes]
    tiles: list[list[np.ndarray]] = []
    for c in classes:
        idx = np.flatnonzero(labels == c)
        chosen = np.sort(rng.choice(idx, size=min(per_class, len(idx)), replace=False))
        row = []
        for i in chosen:
            if hasattr(dataset, "images"):
                tile = np.asarray(dataset.images[i])
            else:
                tile = np.asarray(dataset[int(i)][0].convert("RGB"))
            if tile.ndim == 2:
                tile = np.repeat(tile[..., None], 3, axis=2)
            row.append(tile.astype(np.uint8))
        tiles.append(row)
    h, w = tiles[0][0].shape[:2]
    grid = np.full((len(tiles) * (h + pad) + pad, per_class * (w + pad) + pad, 3), 255, dtype=np.uint8)
    for r, row in enumerate(tiles):
        for k, tile in enumerate(row):
            y, x = pad + r * (h + pad), pad + k * (w + pad)
            grid[y : y + h, x : x + w] = tile
    return grid
