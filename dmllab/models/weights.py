"""Loading backbone weights: torchvision's ImageNet downloads and local state-dict files; the weights sources.

dmllab never falls back to random weights: when pre-trained weights were asked for and cannot be had, the
error says how to provide them.

What ``pretrained=True`` means is a *weights source* per backbone (:data:`WEIGHTS_SOURCES`): "imagenet"
(torchvision's ImageNet weights of the torchvision trunks) and "synthetic-pretrain" (SmallCNN pre-trained by
dmllab on the synthetic pre-training pool, the quick profile's stand-in for ImageNet). A source names its
provider and fingerprint as callables or as ``"module:function"`` strings imported when first called, so the
synthetic pre-training (which needs the trainer) is registered here without ``dmllab.models`` importing
``dmllab.training``. :func:`resolve_weights` gives what a model is built from; :func:`weights_fingerprint`
identifies those weights for the run store.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dmllab.fileio import regular_file
from dmllab.registry import Registry
from dmllab.rng import random_state_kept

# Keys of the classifier heads that a feature-map trunk drops (torchvision's fc, GoogLeNet's aux1/aux2,
# Inception-v3's AuxLogits); a file may hold them or not.
CLASSIFIER_HEAD_PREFIXES = ("fc.", "aux1.", "aux2.", "AuxLogits.")
_MAX_LISTED_KEYS = 8

# Why a weights path must be a file: torch.load reads a zip archive, which needs a file it can seek in.
_NO_STREAM = (
    "torch.load reads a zip archive and needs a file it can seek in, so a pipe, a process substitution or a device "
    "cannot be read: save the stream to a file and pass that"
)


def _strip_prefix(state: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}


class WeightsFileError(ValueError):
    """A weights file that cannot be used: a folder, empty, corrupt, or not a plain state dict."""


def read_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Read a state dict from ``path`` (``torch.load`` on the CPU, tensors only).

    Accepted layouts: a plain state dict (torchvision's classifier format, or a dmllab backbone's own
    ``state_dict()``); a dict holding it under "state_dict" or "model"; a DataParallel state dict
    ("module." prefixes); a whole ``EmbeddingNet`` state dict, of which the "backbone." entries are used.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        inside = sorted(p.name for p in path.iterdir() if p.suffix in (".pt", ".pth", ".bin"))[:3]
        hint = f" (it holds {', '.join(inside)})" if inside else ""
        raise WeightsFileError(
            f"weights file {str(path)!r} is a folder{hint}; pass the state-dict file itself"
        )
    regular_file(path, "weights file", _NO_STREAM)
    if path.stat().st_size == 0:
        raise WeightsFileError(
            f"weights file {str(path)!r} is empty (0 bytes): an interrupted download or copy; fetch it again"
        )
    from dmllab.fileio import CorruptFileError, check_sidecar

    try:  # a file dmllab wrote carries a checksum sidecar: torch.load checks no CRC
        check_sidecar(path, "weights file")
    except CorruptFileError as err:
        raise WeightsFileError(f"{err}; delete it (and its .sha256) to build it again") from None
    try:  # tensors only: no code in a weights file is ever run, whatever the file holds
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001  (torch raises many types for a damaged file)
        if "weights only load failed" in str(err).lower() and "unsupported global" in str(err).lower():
            raise WeightsFileError(
                f"weights file {str(path)!r} holds Python objects besides tensors; dmllab loads plain state "
                "dicts only: save one with torch.save(model.state_dict(), path)"
            ) from None
        raise WeightsFileError(
            f"weights file {str(path)!r} is corrupt or not a PyTorch state-dict file ({type(err).__name__}); "
            "download or copy it again"
        ) from None
    if not isinstance(loaded, Mapping):
        raise ValueError(f"weights file {str(path)!r} holds a {type(loaded).__name__}, not a state dict")
    for wrapper_key in ("state_dict", "model"):
        if isinstance(loaded.get(wrapper_key), Mapping):
            loaded = loaded[wrapper_key]
            break
    state = dict(loaded)
    if state and all(key.startswith("module.") for key in state):
        state = _strip_prefix(state, "module.")
    if any(key.startswith("backbone.") for key in state):
        state = _strip_prefix(state, "backbone.")
    return state


def _listed(keys: list[str]) -> str:
    shown = ", ".join(keys[:_MAX_LISTED_KEYS])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > _MAX_LISTED_KEYS else "")


def load_trunk_state_dict(trunk: nn.Module, state: Mapping[str, torch.Tensor], *, source: str) -> None:
    """Load ``state`` into ``trunk`` strictly, except for classifier-head keys (fc, aux), which are dropped.

    Raises:
        RuntimeError: keys missing from ``state`` or unexpected in it (other than the heads), or shape
            mismatches; the message names ``source``.
    """
    kept = {key: value for key, value in state.items() if not key.startswith(CLASSIFIER_HEAD_PREFIXES)}
    try:
        result = trunk.load_state_dict(kept, strict=False)
    except RuntimeError as err:  # shape mismatches
        raise RuntimeError(f"weights from {source} do not fit {type(trunk).__name__}: {err}") from err
    problems = []
    if result.missing_keys:
        problems.append(f"missing keys: {_listed(list(result.missing_keys))}")
    if result.unexpected_keys:
        problems.append(f"unexpected keys: {_listed(list(result.unexpected_keys))}")
    if problems:
        raise RuntimeError(
            f"weights from {source} do not match {type(trunk).__name__} ({'; '.join(problems)}); "
            "is it the state dict of the same architecture?"
        )


def hub_checkpoint_path(url: str) -> Path:
    """Where ``torch.hub`` (and so torchvision) caches the file downloaded from ``url``."""
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)


class MissingWeightsError(FileNotFoundError, RuntimeError):
    """Pre-trained ImageNet weights that are neither in torchvision's cache nor downloadable (an offline machine);
    the one-line message names the file, the cache folder to put it in and the alternatives."""


def _missing_weights_message(weights: Any, arch: str, err: BaseException) -> str:
    name = os.path.basename(weights.url)
    cache_path = hub_checkpoint_path(weights.url)
    reason = " ".join(f"{type(err).__name__}: {err}".split())
    return (
        f"the ImageNet weights {name} of backbone {arch!r} ({weights}) are not in torchvision's cache and could not "
        f"be downloaded ({reason}): download {weights.url} and put it at {cache_path} (the cache folder is "
        "$TORCH_HOME/hub/checkpoints, TORCH_HOME defaulting to ~/.cache/torch), or pass "
        f"--set model.weights_path=/path/to/{name} (weights_path= in Python); to check a study without weights, "
        "dmllab study --fast-dev-run --pretrained none trains from random initialisation (dmllab never falls "
        "back to random weights by itself)"
    )


def download_imagenet_state_dict(weights: Any, *, arch: str) -> dict[str, torch.Tensor]:
    """Fetch torchvision's pre-trained state dict for a ``WeightsEnum`` member (from the hub cache or the web).

    Raises:
        MissingWeightsError: the weights could not be obtained (e.g. offline); the one-line message gives the file,
            the cache path torchvision reads ($TORCH_HOME/hub/checkpoints/<file>), the download URL and the
            ``weights_path=`` alternative.
    """
    try:
        return weights.get_state_dict(progress=True, check_hash=True)
    except Exception as err:  # any download / cache / hash failure: the user needs the same instructions
        raise MissingWeightsError(_missing_weights_message(weights, arch, err)) from err


def check_imagenet_weights(backbone: str, backbone_kwargs: Mapping[str, Any] | None = None) -> Path:
    """The cached file of ``backbone``'s ImageNet weights (``imagenet_weights``, default V1), downloaded into
    torchvision's cache first when it is not there: what ``dmllab study`` checks once before training, instead of
    every run failing alike.

    Raises MissingWeightsError: not cached and not downloadable (:func:`download_imagenet_state_dict`)."""
    weights = provide_imagenet(backbone, dict(backbone_kwargs or {}))
    path = hub_checkpoint_path(weights.url)
    if not path.is_file():
        download_imagenet_state_dict(weights, arch=backbone)
    return path


# --------------------------------------------------------------------------------------------- weights sources
# A provider returns what the backbone is built from: a weights file (loaded through ``weights_path``) or a
# torchvision ``WeightsEnum`` member (the backbone's own ``pretrained=True`` download). Signatures:
#   provide(backbone: str, backbone_kwargs: Mapping[str, Any], *, progress: bool) -> str | PathLike | WeightsEnum
#   fingerprint(backbone: str, backbone_kwargs: Mapping[str, Any]) -> str
Provider = Callable[..., Any]


@dataclass(frozen=True)
class WeightsSource:
    """Where the ``pretrained=True`` weights of some backbones come from.

    Args:
        backbones: the backbone names this source serves (one source per backbone).
        provide: the provider (signature above): it reads or downloads weights, it never trains them.
        fingerprint: identity of the provided weights (changes when they would change).
        description: one line for error messages and documentation.
    """

    backbones: tuple[str, ...]
    provide: Provider
    fingerprint: Provider
    description: str = ""


@dataclass(frozen=True)
class TorchvisionSpec:
    """How to build one torchvision classifier and which of its children are the conv trunk."""

    make: Callable[[bool], tuple[nn.Module, type]]  # init_weights -> (classifier, weights enum class)
    out_channels: int
    drop: tuple[str, ...]  # children after the last conv block
    tf_ported_weights: bool  # expects [-1, 1] input with its ImageNet weights


def _make_resnet50(init_weights: bool) -> tuple[nn.Module, type]:
    from torchvision.models import ResNet50_Weights, resnet50

    return resnet50(weights=None), ResNet50_Weights


def _make_resnet18(init_weights: bool) -> tuple[nn.Module, type]:
    from torchvision.models import ResNet18_Weights, resnet18

    return resnet18(weights=None), ResNet18_Weights


def _make_googlenet(init_weights: bool) -> tuple[nn.Module, type]:
    from torchvision.models import GoogLeNet_Weights, googlenet

    model = googlenet(weights=None, aux_logits=False, transform_input=False, init_weights=init_weights)
    return model, GoogLeNet_Weights


def _make_inception_v3(init_weights: bool) -> tuple[nn.Module, type]:
    from torchvision.models import Inception_V3_Weights, inception_v3

    model = inception_v3(weights=None, aux_logits=False, transform_input=False, init_weights=init_weights)
    return model, Inception_V3_Weights


#: The torchvision trunks: how to build each classifier, its weights enum, and which children are the trunk.
TORCHVISION_SPECS: dict[str, TorchvisionSpec] = {
    "resnet50": TorchvisionSpec(_make_resnet50, 2048, ("avgpool", "fc"), tf_ported_weights=False),
    "resnet18": TorchvisionSpec(_make_resnet18, 512, ("avgpool", "fc"), tf_ported_weights=False),
    "googlenet": TorchvisionSpec(_make_googlenet, 1024, ("avgpool", "dropout", "fc"), tf_ported_weights=True),
    "inception_v3": TorchvisionSpec(
        _make_inception_v3, 2048, ("avgpool", "dropout", "fc"), tf_ported_weights=True
    ),
}


@functools.cache  # finding the enum builds the model once; run keys ask for it per run
def imagenet_weights_enum(arch: str) -> type:
    """torchvision's ``WeightsEnum`` class of a torchvision backbone name (e.g. ``ResNet50_Weights``)."""
    if arch not in TORCHVISION_SPECS:
        raise KeyError(
            f"{arch!r} is not a torchvision backbone; valid: {', '.join(sorted(TORCHVISION_SPECS))}"
        )
    return TORCHVISION_SPECS[arch].make(False)[1]


DEFAULT_IMAGENET_WEIGHTS = "IMAGENET1K_V1"  # the torchvision backbones' default ``imagenet_weights``


def weights_member(enum_cls: type, name: str, arch: str) -> Any:
    """The member ``name`` of ``arch``'s torchvision ``WeightsEnum`` class; ValueError listing the valid ones."""
    try:
        return enum_cls[name]
    except KeyError:
        valid = ["DEFAULT", *(member.name for member in enum_cls)]
        raise ValueError(
            f"unknown imagenet_weights {name!r} for {arch!r}; valid: {', '.join(valid)}"
        ) from None


def provide_imagenet(backbone: str, backbone_kwargs: Mapping[str, Any], *, progress: bool = True) -> Any:
    """The "imagenet" source: torchvision's ``WeightsEnum`` member (``imagenet_weights``, default V1); the
    backbone downloads it (or reads torch's hub cache) when built with ``pretrained=True``."""
    name = str(backbone_kwargs.get("imagenet_weights", DEFAULT_IMAGENET_WEIGHTS))
    return weights_member(imagenet_weights_enum(backbone), name, backbone)


def imagenet_fingerprint(backbone: str, backbone_kwargs: Mapping[str, Any]) -> str:
    """``"<WeightsEnum member>:<file name>"``; torchvision's file names carry the first digits of the sha256."""
    member = provide_imagenet(backbone, backbone_kwargs)
    return f"{member}:{os.path.basename(member.url)}"


WEIGHTS_SOURCES: Registry[WeightsSource] = Registry("weights source")
WEIGHTS_SOURCES.register(
    "imagenet",
    WeightsSource(
        backbones=("resnet50", "resnet18", "googlenet", "inception_v3"),
        provide=provide_imagenet,
        fingerprint=imagenet_fingerprint,
        description="torchvision's ImageNet weights (backbone keyword imagenet_weights, default IMAGENET1K_V1)",
    ),
)
# The SmallCNN's "synthetic-pretrain" source is registered by the layer that owns its pre-training recipe
# (dmllab.training.smallcnn_weights): building a model reads weights, it never trains them.


def weights_source(backbone: str) -> tuple[str, WeightsSource]:
    """``(name, source)`` of the source serving ``backbone``'s ``pretrained=True`` weights.

    Raises KeyError: no source serves ``backbone``; the message lists the sources and their backbones."""
    for name in WEIGHTS_SOURCES:
        source = WEIGHTS_SOURCES.get(name)
        if backbone in source.backbones:
            return name, source
    served = "; ".join(f"{n}: {', '.join(WEIGHTS_SOURCES.get(n).backbones)}" for n in WEIGHTS_SOURCES)
    raise KeyError(f"no pre-trained weights source for backbone {backbone!r} (sources: {served})")


def resolve_weights(
    backbone: str,
    *,
    pretrained: bool,
    weights_path: str | os.PathLike[str] | None = None,
    backbone_kwargs: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> str | os.PathLike[str] | Any | None:
    """What ``backbone`` is built from: ``weights_path`` if given; else, with ``pretrained``, the provider of
    the backbone's source (a file path, e.g. the pre-trained SmallCNN, or a torchvision ``WeightsEnum``
    member); else None (random initialisation).

    A path is passed to the backbone as ``weights_path`` (with ``pretrained=False``); an enum member means
    "build with ``pretrained=True``".

    The provider runs with the caller's random state kept (torch, numpy, ``random``): reading or downloading
    the weights must not change what the caller draws next, e.g. the head's and the proxies' initialisation.
    """
    if weights_path is not None:
        return weights_path
    if not pretrained:
        return None
    _, source = weights_source(backbone)
    with random_state_kept():
        return source.provide(backbone, dict(backbone_kwargs or {}), progress=progress)


def weights_fingerprint(
    backbone: str,
    *,
    pretrained: bool,
    weights_path: str | os.PathLike[str] | None = None,
    backbone_kwargs: Mapping[str, Any] | None = None,
) -> str | None:
    """Identity of the weights :func:`resolve_weights` gives for ``pretrained=True`` without ``weights_path``
    (``"<source>:<fingerprint>"``; nothing is downloaded or trained); None for random initialisation and for an
    explicit ``weights_path`` (the config names that file itself)."""
    if weights_path is not None or not pretrained:
        return None
    name, source = weights_source(backbone)
    return f"{name}:{source.fingerprint(backbone, dict(backbone_kwargs or {}))}"
