"""The three profiles every artifact, preset and notebook knows, and where a run executes.

``smoke`` (seconds, for tests), ``quick`` (the offline benchmark on 2 CPU cores: the embedded default) and
``paper`` (the real datasets and the authors' hyper-parameters, on a GPU). This is the only definition.
"""

from __future__ import annotations

PROFILES: tuple[str, ...] = ("smoke", "quick", "paper")


def resolve_device(device: str) -> str:
    """``"auto"`` -> cuda if available, else mps, else cpu; any other name is returned unchanged."""
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"
