"""Evaluation-time deformations of PS Table 3 (input) and Fig. 5 / Table B (embedding)."""

from __future__ import annotations

import pytest
import torch

from dmllab.data.deform import DEFORMATIONS, DeformedTransform, build_deformation
from dmllab.metrics.deform import embedding_deformation, embedding_deformation_recall


def test_every_input_deformation_keeps_shape_and_range():
    assert set(DEFORMATIONS.names()) == {
        "cutout",
        "dropout",
        "zoom_in",
        "zoom_out",
        "rotation",
        "shearing",
        "gaussian_noise",
        "gaussian_blur",
    }
    torch.manual_seed(0)
    img = torch.rand(3, 20, 20)
    for name in DEFORMATIONS.names():
        out = build_deformation(name)(img)
        assert out.shape == img.shape and torch.isfinite(out).all(), name
        assert not torch.equal(out, img), name


def test_input_deformations_follow_c3():
    torch.manual_seed(1)
    img = torch.rand(3, 20, 20)
    cut = build_deformation("cutout")(img)
    assert (
        int(((cut == 0.5).all(0)).sum()) <= 2 * 16 and int(((cut == 0.5).all(0)).sum()) >= 16
    )  # 2 squares 4x4
    drop = build_deformation("dropout", p_max=1.0)(img)
    zeroed = (drop == 0).all(0)
    assert torch.equal(drop[:, ~zeroed], img[:, ~zeroed])
    flat = torch.full((3, 21, 21), 0.3)
    flat[:, 10, 10] = 1.0  # a point: blur spreads it, the sum is (almost) kept away from the border
    blurred = build_deformation("gaussian_blur", sigma=1.0)(flat)
    assert blurred[:, 10, 10].max() < 0.5 and blurred.sum().item() == pytest.approx(
        flat.sum().item(), rel=1e-4
    )
    out = build_deformation("zoom_out")(torch.ones(3, 20, 20))
    assert out[:, 0, 0].eq(0).all() and out[:, 10, 10].eq(1).all()  # black border, centre kept


def test_deformed_transform_round_trips_identity():
    from dmllab.data.transforms import build_transforms

    base = build_transforms("none", train=False)
    from PIL import Image

    pil = Image.new("RGB", (8, 8), (30, 120, 200))
    torch.manual_seed(0)
    t = DeformedTransform(base, "gaussian_noise", s_max=0.0)
    torch.testing.assert_close(t(pil), base(pil), atol=1e-5, rtol=0)


def _clusters(n_classes=6, per_class=8, dim=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(n_classes, dim, generator=g) * 3
    labels = torch.arange(n_classes).repeat_interleave(per_class)
    emb = centers[labels] + 0.1 * torch.randn(len(labels), dim, generator=g)
    return emb, labels


def test_embedding_deformation_sets_match_definition():
    emb, labels = _clusters()
    d = embedding_deformation(emb, labels, 0.3, num_pairs=4, per_pair=3, normalize=False)
    assert d.query.shape == (12, 5) and d.gallery.shape == (12 + len(emb), 5)
    assert set(d.query_labels.tolist()) == set(range(6, 10))
    assert torch.equal(d.gallery[12:], emb) and torch.equal(d.gallery_labels[12:], labels)
    # every synthetic is 0.3 x (a member of class a) + 0.7 x (a member of class b), a < b, a != b
    mixes = 0.3 * emb[:, None] + 0.7 * emb[None, :]  # (N, N, D): every x_i, x_j combination
    for q in d.query:
        i, j = torch.nonzero(((mixes - q).abs() < 1e-5).all(-1), as_tuple=True)
        assert len(i) and (labels[i] < labels[j]).all()
    with pytest.raises(ValueError, match="num_pairs"):
        embedding_deformation(emb, labels, 0.5, num_pairs=16)


def test_embedding_deformation_recall_is_easiest_at_half():
    emb, labels = _clusters(n_classes=8)
    res = embedding_deformation_recall(
        emb, labels, [0.02, 0.5], num_pairs=10, per_pair=4, normalize=False, distance="euclidean"
    )
    # at lambda ~ 0 the synthetic sits on its class-b original (a negative): recall collapses
    assert res[0.5]["R@1"] == 1.0 and res[0.02]["R@1"] < 0.8
