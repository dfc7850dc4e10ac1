from __future__ import annotations

import urllib.error

import pytest
import torch
import torchvision.models as tvm

from dmllab.models import (
    ConvTrunk,
    InceptionInputTransform,
    build_backbone,
    hub_checkpoint_path,
    imagenet_weights_enum,
    list_backbones,
)
from dmllab.models import backbones as backbones_module

TORCHVISION_BACKBONES = ["resnet50", "resnet18", "googlenet", "inception_v3"]


def _image(size: int, seed: int = 0, batch: int = 1) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def test_registry_names():
    assert list_backbones() == ["googlenet", "inception_v3", "resnet18", "resnet50", "smallcnn"]


def test_unknown_backbone_lists_valid_names():
    with pytest.raises(KeyError, match="googlenet, inception_v3, resnet18, resnet50, smallcnn"):
        build_backbone("bn_inception")


def test_unknown_backbone_option_is_an_error():
    with pytest.raises(TypeError):
        build_backbone("resnet18", widht=3)


@pytest.mark.parametrize(
    ("name", "size", "channels", "spatial"),
    [
        ("resnet50", 64, 2048, 2),
        ("resnet18", 64, 512, 2),
        ("googlenet", 64, 1024, 2),
        ("inception_v3", 107, 2048, 2),  # inception needs >= 75 px; 107 px -> 2x2
        ("smallcnn", 56, 256, 7),
    ],
)
def test_feature_map_shape_and_out_channels(name, size, channels, spatial):
    trunk = build_backbone(name, pretrained=False).eval()
    assert trunk.out_channels == channels
    with torch.no_grad():
        out = trunk(_image(size))
    assert out.shape == (1, channels, spatial, spatial)


def test_trunk_drops_only_the_classifier():
    trunk = build_backbone("googlenet")
    names = [name for name, _ in trunk.named_children()]
    assert names[0] == "input_transform" and names[-1] == "inception5b"
    assert not {"avgpool", "dropout", "fc", "aux1", "aux2"} & set(names)


def test_torchvision_state_dict_round_trip_equals_the_classifier(tmp_path):
    """A torchvision classifier's state-dict file loads into the trunk; trunk + its pool/fc = the classifier."""
    torch.manual_seed(0)
    classifier = tvm.resnet18().eval()
    path = tmp_path / "resnet18-torchvision.pth"
    torch.save(classifier.state_dict(), path)
    trunk = build_backbone("resnet18", weights_path=path).eval()
    x = _image(64, batch=2)
    with torch.no_grad():
        rebuilt = classifier.fc(torch.flatten(classifier.avgpool(trunk(x)), 1))
        torch.testing.assert_close(rebuilt, classifier(x))


def test_inception_state_dict_with_aux_head_and_input_transform(tmp_path):
    """Aux-classifier keys are dropped; with loaded weights the input is transformed as torchvision does."""
    torch.manual_seed(0)
    classifier = tvm.inception_v3(aux_logits=True, transform_input=True, init_weights=False).eval()
    assert any(key.startswith("AuxLogits.") for key in classifier.state_dict())
    path = tmp_path / "inception.pth"
    torch.save(classifier.state_dict(), path)
    trunk = build_backbone("inception_v3", weights_path=path).eval()
    assert isinstance(trunk.input_transform, InceptionInputTransform)
    x = _image(80)
    with torch.no_grad():
        rebuilt = classifier.fc(torch.flatten(classifier.avgpool(trunk(x)), 1))
        torch.testing.assert_close(rebuilt, classifier(x))


def test_googlenet_transform_input_defaults():
    assert not isinstance(build_backbone("googlenet").input_transform, InceptionInputTransform)
    forced = build_backbone("googlenet", transform_input=True)
    assert isinstance(forced.input_transform, InceptionInputTransform)


def test_inception_input_transform_maps_imagenet_normalised_input_to_minus_one_one():
    u = torch.rand(2, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    mean = torch.tensor([0.485, 0.456, 0.406]).reshape(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).reshape(1, 3, 1, 1)
    torch.testing.assert_close(InceptionInputTransform()((u - mean) / std), (u - 0.5) / 0.5)
    assert InceptionInputTransform().state_dict() == {}


def test_own_state_dict_round_trip(tmp_path):
    trunk = build_backbone("resnet18").eval()
    path = tmp_path / "trunk.pt"
    torch.save(trunk.state_dict(), path)
    loaded = build_backbone("resnet18", weights_path=str(path)).eval()
    x = _image(64)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), trunk(x))


def test_wrong_architecture_weights_raise_naming_the_file(tmp_path):
    path = tmp_path / "smallcnn.pt"
    torch.save(build_backbone("smallcnn").state_dict(), path)
    with pytest.raises(RuntimeError, match=r"smallcnn\.pt.*missing keys"):
        build_backbone("resnet18", weights_path=path)


def test_missing_keys_are_not_ignored(tmp_path):
    state = build_backbone("resnet18").state_dict()
    del state["layer4.1.bn2.weight"]
    path = tmp_path / "partial.pt"
    torch.save(state, path)
    with pytest.raises(RuntimeError, match=r"missing keys: layer4\.1\.bn2\.weight"):
        build_backbone("resnet18", weights_path=path)


def test_missing_weights_file():
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_backbone("resnet18", weights_path="/nonexistent/weights.pth")


@pytest.mark.parametrize("name", TORCHVISION_BACKBONES)
def test_offline_pretrained_raises_with_instructions(name, isolated_caches, monkeypatch):
    def no_network(url, dst, *args, **kwargs):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    weights = imagenet_weights_enum(name).IMAGENET1K_V1  # the papers' weights, dmllab's default
    with pytest.raises(RuntimeError) as info:
        build_backbone(name, pretrained=True)
    message = str(info.value)
    assert weights.url in message
    expected_cache = hub_checkpoint_path(weights.url)
    assert str(expected_cache) in message and str(isolated_caches) in str(expected_cache)
    assert "weights_path=" in message and "random" in message
    assert isinstance(info.value.__cause__, urllib.error.URLError)


def test_pretrained_loads_torchvision_weights(monkeypatch):
    """pretrained=True loads the state dict torchvision provides for the requested weights enum member."""
    source = tvm.googlenet(aux_logits=False, init_weights=True)
    requested = []

    def fake_download(weights, *, arch):
        requested.append((weights, arch))
        return source.state_dict()

    monkeypatch.setattr(backbones_module, "download_imagenet_state_dict", fake_download)
    trunk = build_backbone("googlenet", pretrained=True)
    assert requested == [(tvm.GoogLeNet_Weights.IMAGENET1K_V1, "googlenet")]
    torch.testing.assert_close(
        trunk.state_dict()["conv1.conv.weight"], source.state_dict()["conv1.conv.weight"]
    )
    assert isinstance(trunk.input_transform, InceptionInputTransform)  # as torchvision does with its weights


def test_imagenet_weights_choice(monkeypatch):
    requested = []
    state = build_backbone("resnet50").state_dict()
    monkeypatch.setattr(
        backbones_module, "download_imagenet_state_dict", lambda w, *, arch: requested.append(w) or state
    )
    build_backbone("resnet50", pretrained=True, imagenet_weights="IMAGENET1K_V2")
    build_backbone("resnet50", pretrained=True)
    build_backbone("resnet50", pretrained=True, imagenet_weights="DEFAULT")
    # The default is the weights the papers' code got from torchvision in 2020 (pretrained=True, now
    # IMAGENET1K_V1), not torchvision's current DEFAULT (V2, a newer training recipe: ~5 points more top-1).
    assert requested == [
        tvm.ResNet50_Weights.IMAGENET1K_V2,
        tvm.ResNet50_Weights.IMAGENET1K_V1,
        tvm.ResNet50_Weights.IMAGENET1K_V2,
    ]
    with pytest.raises(ValueError, match="IMAGENET1K_V1, IMAGENET1K_V2"):
        build_backbone("resnet50", pretrained=True, imagenet_weights="V3")


def test_trunk_is_a_conv_trunk_with_torchvision_keys():
    trunk = build_backbone("resnet18")
    assert isinstance(trunk, ConvTrunk)
    assert set(trunk.state_dict()) == {k for k in tvm.resnet18().state_dict() if not k.startswith("fc.")}
