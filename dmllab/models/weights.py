"""Loading backbone weights: torchvision's ImageNet downloads and local state-dict files.

dmllab never falls back to random weights: when pre-trained weights were asked for and cannot be had, the
error says how to provide them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = [
    "CLASSIFIER_HEAD_PREFIXES",
    "read_state_dict",
    "load_trunk_state_dict",
    "download_imagenet_state_dict",
    "hub_checkpoint_path",
]

# Keys of the classifier heads that a feature-map trunk drops (torchvision's fc, GoogLeNet's aux1/aux2,
# Inception-v3's AuxLogits); a file may hold them or not.
CLASSIFIER_HEAD_PREFIXES = ("fc.", "aux1.", "aux2.", "AuxLogits.")
_MAX_LISTED_KEYS = 8


def _strip_prefix(state: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}


def read_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Read a state dict from ``path`` (``torch.load`` on the CPU, tensors only).

    Accepted layouts: a plain state dict (torchvision's classifier format, or a dmllab backbone's own
    ``state_dict()``); a dict holding it under "state_dict" or "model"; a DataParallel state dict
    ("module." prefixes); a whole ``EmbeddingNet`` state dict, of which the "backbone." entries are used.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"weights file {str(path)!r} does not exist")
    loaded = torch.load(path, map_location="cpu", weights_only=True)
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


def download_imagenet_state_dict(weights: Any, *, arch: str) -> dict[str, torch.Tensor]:
    """Fetch torchvision's pre-trained state dict for a ``WeightsEnum`` member (from the hub cache or the web).

    Raises:
        RuntimeError: the weights could not be obtained (e.g. offline); the message gives the download URL,
            the cache path torchvision reads, and the ``weights_path=`` alternative.
    """
    try:
        return weights.get_state_dict(progress=True, check_hash=True)
    except Exception as err:  # any download / cache / hash failure: the user needs the same instructions
        cache_path = hub_checkpoint_path(weights.url)
        raise RuntimeError(
            f"could not obtain the pre-trained ImageNet weights {weights} for backbone {arch!r} "
            f"({type(err).__name__}: {err}). dmllab does not fall back to random weights. Provide them in one of "
            f"these ways: (1) download {weights.url} (on a machine with internet access) and put the file at "
            f"{cache_path} - torchvision reads it from there (the folder moves with $TORCH_HOME); "
            f"(2) pass weights_path='/path/to/{os.path.basename(weights.url)}' (a torchvision state-dict file); "
            "(3) or build it with pretrained=False to train from random initialisation on purpose."
        ) from err
