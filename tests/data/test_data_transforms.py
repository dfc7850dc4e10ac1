"""Transform presets: output sizes, normalisation, determinism of the test transforms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from dmllab.data import TRANSFORMS, build_transforms
from dmllab.data.transforms import IMAGENET_MEAN, IMAGENET_STD

SIZES = {
    "proxynca++": 256,
    "proxy_anchor": 224,
    "heated": 224,
    "mlrc": 227,
    "proxynca++227": 227,
    "quick": 56,
    "quick227": 50,
    "smoke": 32,
}


def _image(w: int, h: int, mode: str = "RGB") -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).convert(mode)


def test_registry_lists_every_preset() -> None:
    assert set(TRANSFORMS.names()) == {*SIZES, "none"}
    with pytest.raises(KeyError, match="valid transform preset names"):
        build_transforms("imagenet", train=True)


@pytest.mark.parametrize("preset", sorted(SIZES))
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize(("w", "h", "mode"), [(500, 375, "RGB"), (300, 450, "L"), (64, 64, "RGBA")])
def test_output_is_normalised_square_crop(preset: str, train: bool, w: int, h: int, mode: str) -> None:
    out = build_transforms(preset, train)(_image(w, h, mode))
    s = SIZES[preset]
    assert out.shape == (3, s, s) and out.dtype == torch.float32


def test_test_transform_is_resize_then_center_crop() -> None:
    img = _image(500, 375)
    tf = build_transforms("proxynca++", train=False)
    a, b = tf(img), tf(img)
    assert torch.equal(a, b)
    # reference: shorter side 288 (384x288), centre 256 crop, computed with PIL directly
    ref = img.resize((384, 288), Image.BILINEAR)
    left, top = (384 - 256) // 2, (288 - 256) // 2
    ref = np.asarray(ref.crop((left, top, left + 256, top + 256)), dtype=np.float32) / 255
    ref = (ref - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    np.testing.assert_allclose(a.permute(1, 2, 0).numpy(), ref, atol=0.02)


def test_normalisation_uses_imagenet_statistics() -> None:
    mean_rgb = tuple(round(255 * m) for m in IMAGENET_MEAN)
    out = build_transforms("none", train=False)(Image.new("RGB", (10, 7), mean_rgb))
    assert out.shape == (3, 7, 10)
    assert out.abs().max() < 0.01


def test_train_transform_is_random_and_flips() -> None:
    torch.manual_seed(0)
    tf = build_transforms("quick", train=True)
    img = _image(64, 64)
    outs = [tf(img) for _ in range(4)]
    assert any(not torch.equal(outs[0], o) for o in outs[1:])


def test_lazy_transform_is_the_same_transform() -> None:
    img = _image(80, 70)
    eager, lazy = build_transforms("quick", train=False), build_transforms("quick", train=False, lazy=True)
    assert torch.equal(lazy(img), eager(img))
    assert "quick" in repr(lazy)
    with pytest.raises(KeyError, match="valid transform preset names"):
        build_transforms(
            "imagenet", train=True, lazy=True
        )  # an unknown preset fails at once, not on first use


V2_PRESETS = ["proxynca++", "proxy_anchor", "heated", "mlrc", "proxynca++227", "none"]


@pytest.mark.parametrize("preset", V2_PRESETS)
@pytest.mark.parametrize("train", [True, False])
def test_uint8_crop_then_normalise_equals_the_float_preset(preset: str, train: bool) -> None:
    """A full-size preset's uint8 crop (the DataLoader workers' output), normalised as a batch (on the device),
    equals the preset's float output bit for bit, for the same random draws."""
    from dmllab.data.transforms import normalise_uint8

    img = _image(320, 250)
    torch.manual_seed(3)
    ref = build_transforms(preset, train)(img)
    torch.manual_seed(3)
    crop = build_transforms(preset, train, uint8=True)(img)
    assert crop.dtype == torch.uint8 and crop.shape == ref.shape
    batch = torch.stack([crop, crop])
    assert torch.equal(normalise_uint8(batch)[1], ref)


@pytest.mark.parametrize("preset", ["quick", "quick227", "smoke"])
def test_pil_presets_stay_float_and_pass_through(preset: str) -> None:
    from dmllab.data.transforms import normalise_uint8

    out = build_transforms(preset, False, uint8=True)(_image(80, 70))
    assert out.dtype == torch.float32 and normalise_uint8(out) is out
