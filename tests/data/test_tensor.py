"""The in-memory tensor data path: batched crops match the presets' geometry, the feature cache is keyed and
reused, and training on cached frozen-block features equals training through the frozen blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dmllab.data import build_transforms
from dmllab.data.tensor import (
    CropSpec,
    FeatureCache,
    InMemoryImages,
    augment_batch,
    compute_features,
    crop_boxes,
    crop_spec,
    tensor_digest,
)
from dmllab.models.smallcnn import SmallCNN


class _Tiny:
    """A dataset with an in-memory uint8 ``images`` array (like the synthetic benchmark)."""

    def __init__(self, n: int = 12, size: int = 64, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)
        self.labels = [i % 3 for i in range(n)]
        self.num_classes = 3
        self.split = "train"


def test_test_view_equals_pil_quick_transform():
    from PIL import Image

    ds = _Tiny(4)
    x = augment_batch(torch.from_numpy(ds.images).permute(0, 3, 1, 2), "quick", train=False)  # (4, 3, 56, 56)
    pil = build_transforms("quick", train=False)
    ref = torch.stack([pil(Image.fromarray(im)) for im in ds.images])
    assert x.shape == ref.shape == (4, 3, 56, 56)
    assert torch.allclose(x, ref, atol=1e-5)


def test_crop_boxes_follow_random_resized_crop_rule():
    spec = CropSpec(56, 64, (0.35, 1.0))
    box = crop_boxes(2000, 64, 64, spec, torch.Generator().manual_seed(0))
    x, y, w, h = box.unbind(1)
    assert (x >= 0).all() and (y >= 0).all() and (x + w <= 64).all() and (y + h <= 64).all()
    area = w * h / 64**2
    assert area.min() >= 0.33 and area.max() <= 1.0
    assert (w / h).min() >= 0.7 and (w / h).max() <= 1.4
    fallback = crop_boxes(5, 64, 64, CropSpec(56, 64, (2.0, 3.0), (3 / 4, 4 / 3)))  # no crop can fit
    assert torch.equal(fallback, torch.tensor([[0.0, 0.0, 64.0, 64.0]] * 5))


def test_train_augmentation_is_seeded_and_shaped():
    src = InMemoryImages(_Tiny(8), "quick", train=True)
    a, la = src.batch(range(8), torch.Generator().manual_seed(3))
    b, _ = src.batch(range(8), torch.Generator().manual_seed(3))
    c, _ = src.batch(range(8), torch.Generator().manual_seed(4))
    assert a.shape == (8, 3, 56, 56) and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert la.tolist() == [i % 3 for i in range(8)]
    with pytest.raises(ValueError, match="no in-memory"):
        crop_spec("proxynca++")


def test_flip_by_reversed_box_equals_flipped_crop():
    from torchvision.ops import roi_align

    x = torch.rand(2, 3, 64, 64)
    rois = torch.tensor([[0, 5.0, 7.0, 50.0, 60.0], [1, 0.0, 0.0, 64.0, 64.0]])
    mirrored = rois[:, [0, 3, 2, 1, 4]]
    a = roi_align(x, rois, output_size=56, spatial_scale=1.0, sampling_ratio=2, aligned=True)
    b = roi_align(x, mirrored, output_size=56, spatial_scale=1.0, sampling_ratio=2, aligned=True)
    assert torch.allclose(a.flip(-1), b, atol=1e-5)


def _prefix(model: SmallCNN, n: int):
    model.freeze_blocks(n)
    return lambda x: model.forward_blocks(x, 0, n)


def test_cached_features_give_the_same_loss_and_gradients():
    from dmllab.losses import build_loss
    from dmllab.models import build_model

    torch.manual_seed(0)
    net = build_model(backbone="smallcnn", embedding_dim=8, pooling="max", norm="layernorm", width=4)
    loss_fn = build_loss("proxynca", num_classes=3, embedding_dim=8, temperature=1 / 9, prob=True)
    net.backbone.freeze_blocks(4)
    net.train()
    src = InMemoryImages(_Tiny(6), "quick", train=True)
    feats = compute_features(
        _prefix(net.backbone, 4), src, views=2, seed=1, dtype=torch.float32
    )  # (2, 6, ...)
    x, y = src.batch(range(6), torch.Generator().manual_seed(1 * 1_000_003 + 1 * 10_007))  # view 1, batch 0
    grads = []
    for inputs, forward in ((x, net), (feats[1], lambda f: net.head(net.backbone.forward_blocks(f, 4)))):
        net.zero_grad(set_to_none=True)
        loss_fn.zero_grad(set_to_none=True)
        loss = loss_fn(forward(inputs), y)
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in net.parameters() if p.requires_grad]))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads[0][1], grads[1][1], strict=True))
    assert all(p.grad is None for b in net.backbone.blocks()[:4] for p in b.parameters())


def test_feature_cache_is_reused_and_keyed(tmp_path):
    torch.manual_seed(0)
    model = SmallCNN(width=4).eval()
    prefix = _prefix(model, 3)
    digest = tensor_digest([t for b in model.blocks()[:3] for t in b.state_dict().values()])
    ds = _Tiny(5)
    a = FeatureCache(prefix, digest, ds, "quick", train=True, views=2, root=tmp_path)
    assert a.features.shape == (2, 5, 8, 14, 14) and a.features.dtype == torch.float16
    b = FeatureCache(prefix, digest, ds, "quick", train=True, views=2, root=tmp_path)
    assert b.folder == a.folder and b.build_seconds == 0.0
    assert FeatureCache(prefix, digest, ds, "quick", train=True, views=3, root=tmp_path).folder != a.folder
    assert FeatureCache(prefix, "other", ds, "quick", train=True, views=2, root=tmp_path).folder != a.folder
    test_view = FeatureCache(prefix, digest, ds, "quick", train=False, root=tmp_path)
    f, lab = test_view.batch([0, 4])
    ref = prefix(InMemoryImages(ds, "quick", train=False).batch([0, 4])[0])
    assert torch.allclose(f, ref, atol=1e-2, rtol=1e-2) and lab.tolist() == [0, 1]


def test_sources_compute_on_their_device(tmp_path):
    """``.to(device)`` keeps the images (features) and the batches' labels on the device: batches come out there,
    augmented there (the meta device: shapes only), while the samplers' labels stay on the host."""
    ds = _Tiny(6)
    train = InMemoryImages(ds, "quick", train=True).to("meta")
    x, y = train.batch([0, 2, 5], torch.Generator().manual_seed(0))
    assert x.device.type == y.device.type == "meta" and x.shape == (3, 3, 56, 56)
    assert train.labels.device.type == "cpu"
    x, _ = next(InMemoryImages(ds, "quick", train=False).to("meta").ordered(4))
    assert x.device.type == "meta" and x.shape == (4, 3, 56, 56)
    model = SmallCNN(width=4).eval()
    cache = FeatureCache(_prefix(model, 3), "d", ds, "quick", train=True, views=2, root=tmp_path).to("meta")
    f, lab = cache.batch([1, 3], torch.tensor([1, 0]))
    assert f.device.type == lab.device.type == "meta" and f.dtype == torch.float32 and f.shape[0] == 2
    assert cache.labels.device.type == "cpu"
