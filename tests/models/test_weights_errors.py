"""Weights files: a folder, an empty, a corrupt or a pickled-objects file each get their own message, never
advising ``weights_only=False``; the missing-ImageNet message gives the CLI spelling."""

from __future__ import annotations

import pytest
import torch

from dmllab.models.weights import WeightsFileError, download_imagenet_state_dict, read_state_dict


class _Opaque:
    pass


def test_each_bad_weights_file_has_its_own_message(tmp_path):
    folder = tmp_path / "resnet50"
    folder.mkdir()
    torch.save({"w": torch.ones(1)}, folder / "resnet50-0676ba61.pth")
    empty = tmp_path / "empty.pth"
    empty.write_bytes(b"")
    corrupt = tmp_path / "corrupt.pth"
    torch.save({"w": torch.ones(100)}, corrupt)
    corrupt.write_bytes(corrupt.read_bytes()[:60])
    objects = tmp_path / "objects.pth"
    torch.save({"w": _Opaque()}, objects)
    cases = {
        folder: "is a folder (it holds resnet50-0676ba61.pth); pass the state-dict file itself",
        empty: "is empty (0 bytes)",
        corrupt: "is corrupt or not a PyTorch state-dict file",
        objects: "holds Python objects besides tensors",
    }
    for path, expected in cases.items():
        with pytest.raises(WeightsFileError) as info:
            read_state_dict(path)
        assert expected in str(info.value) and "weights_only" not in str(info.value)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_state_dict(tmp_path / "missing.pth")


def test_missing_imagenet_weights_message_gives_the_cli_spelling():
    class Offline:
        url = "https://download.example/models/resnet50-0676ba61.pth"

        def get_state_dict(self, **kwargs):
            raise OSError("network unreachable")

        def __str__(self):
            return "ResNet50_Weights.IMAGENET1K_V1"

    with pytest.raises(RuntimeError) as info:
        download_imagenet_state_dict(Offline(), arch="resnet50")
    msg = str(info.value)
    assert "--set model.weights_path=/path/to/resnet50-0676ba61.pth" in msg and "weights_only" not in msg
