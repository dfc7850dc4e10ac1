from __future__ import annotations

import pytest
import torch

from dmllab.models import SmallCNN, build_backbone, default_smallcnn_weights_path


@pytest.mark.parametrize(("size", "spatial"), [(56, 7), (64, 8)])
def test_smallcnn_feature_map(size, spatial):
    net = SmallCNN().eval()
    assert net.out_channels == 256
    with torch.no_grad():
        out = net(torch.randn(2, 3, size, size))
    assert out.shape == (2, 256, spatial, spatial)


def test_smallcnn_width_and_channels_last():
    net = build_backbone("smallcnn", width=8).eval()
    assert net.out_channels == 64
    x = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = net(x)
        channels_last = net.to(memory_format=torch.channels_last)(x.to(memory_format=torch.channels_last))
    torch.testing.assert_close(channels_last, expected, atol=1e-5, rtol=1e-5)


def test_pretrained_without_weights_file_explains_how_to_make_it(isolated_caches):
    expected_path = default_smallcnn_weights_path()
    assert expected_path == isolated_caches / "dmllab-cache" / "weights" / "smallcnn-synthetic.pt"
    with pytest.raises(FileNotFoundError) as info:
        build_backbone("smallcnn", pretrained=True)
    message = str(info.value)
    assert str(expected_path) in message and "dmllab pretrain" in message and "weights_path" in message


def test_pretrained_loads_the_default_weights_file(isolated_caches):
    source = SmallCNN().eval()
    path = default_smallcnn_weights_path()
    path.parent.mkdir(parents=True)
    # A pre-training run may save the classifier too, under "fc."; the trunk drops it.
    torch.save({"state_dict": {**source.state_dict(), "fc.weight": torch.zeros(10, 256)}}, path)
    loaded = build_backbone("smallcnn", pretrained=True).eval()
    x = torch.randn(1, 3, 56, 56)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), source(x))


def test_weights_path_round_trip(tmp_path):
    source = SmallCNN(width=8).eval()
    path = tmp_path / "small.pt"
    torch.save(source.state_dict(), path)
    loaded = build_backbone("smallcnn", width=8, weights_path=path).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), source(x))


def test_weights_of_another_width_are_rejected(tmp_path):
    path = tmp_path / "small.pt"
    torch.save(SmallCNN(width=8).state_dict(), path)
    with pytest.raises(RuntimeError, match="do not fit SmallCNN"):
        build_backbone("smallcnn", weights_path=path)


def test_embedding_net_checkpoint_loads_into_the_backbone(tmp_path):
    from dmllab.models import build_model

    net = build_model(backbone="smallcnn", embedding_dim=8, width=4).eval()
    path = tmp_path / "net.pt"
    torch.save(net.state_dict(), path)  # keys "backbone.*" and "head.*"
    trunk = build_backbone("smallcnn", width=4, weights_path=path).eval()
    x = torch.randn(1, 3, 56, 56)
    with torch.no_grad():
        torch.testing.assert_close(trunk(x), net.backbone(x))
