"""The Heated-up Softmax transform (Zhang et al. Sec. 5.1): resize to 256x256, random 224 crop + flip; test
resize to 256x256 + centre crop 224."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from dmllab.data import build_transforms
from dmllab.data.transforms import IMAGENET_MEAN, IMAGENET_STD


def _image(width=400, height=200):
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def test_heated_test_transform_is_a_square_resize_then_centre_crop():
    from torchvision.transforms import v2

    img = _image()
    out = build_transforms("heated", train=False)(img)
    assert out.shape == (3, 224, 224) and out.dtype == torch.float32
    t = v2.functional.to_image(img)
    t = v2.functional.resize(t, [256, 256], antialias=True)  # both sides: the aspect ratio is not kept
    t = v2.functional.center_crop(t, [224, 224]).float() / 255
    expected = (t - torch.tensor(IMAGENET_MEAN)[:, None, None]) / torch.tensor(IMAGENET_STD)[:, None, None]
    torch.testing.assert_close(out, expected)


def test_heated_train_transform_crops_224_from_the_256_square_without_rescaling():
    torch.manual_seed(0)
    square = build_transforms("heated", train=False)
    train = build_transforms("heated", train=True)
    img = _image()
    outs = [train(img) for _ in range(4)]
    assert all(o.shape == (3, 224, 224) for o in outs)
    assert not all(torch.equal(outs[0], o) for o in outs[1:])  # random crops / flips
    # a 224 crop of the 256x256 image, no RandomResizedCrop rescaling: pixel statistics stay those of the image
    assert abs(float(outs[0].mean()) - float(square(img).mean())) < 0.05
