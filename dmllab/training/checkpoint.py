"""Reading a dmllab checkpoint file (an epoch checkpoint, a run's ``final.pt``, a fine-tune's parent model), with
a named error for a file that cannot be read. Below both the trainer and the protocol, which read checkpoints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from dmllab.fileio import CorruptFileError, check_sidecar, regular_file


class CorruptCheckpointError(CorruptFileError):
    """A checkpoint file cannot be read: truncated, not a torch file, a folder, not a dmllab checkpoint, or not
    the bytes its checksum sidecar was written for (:mod:`dmllab.fileio`)."""


def load_checkpoint(path: str | os.PathLike, what: str = "checkpoint") -> dict[str, Any]:
    """Read a dmllab checkpoint (a dict of tensors and plain Python values) on the CPU.

    ``weights_only=True``: dmllab's checkpoints hold nothing else, and no code in a file is ever run. A file
    written by :func:`dmllab.training.protocol.save_atomic` has a checksum sidecar (``<file>.sha256``), checked
    first: ``torch.load`` does not check the CRCs of its zip archive, so a damaged tensor would load silently.

    Raises:
        FileNotFoundError: no such file. CorruptCheckpointError: anything that makes it unreadable, naming it.
    """
    path = Path(path)
    if path.is_dir():
        raise CorruptCheckpointError(f"{what} {path} is a folder, not a checkpoint file")
    regular_file(path, what, "a checkpoint is a zip archive, read from a file it can seek in")
    try:
        check_sidecar(path, what)
    except CorruptFileError as err:
        raise CorruptCheckpointError(str(err)) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001  (torch raises many types for a damaged file)
        # torch's own text may advise weights_only=False (running code from the file): never repeated here
        raise CorruptCheckpointError(
            f"{what} {path} is corrupt or truncated and cannot be read ({type(err).__name__})"
        ) from err
    if not isinstance(state, dict):
        raise CorruptCheckpointError(f"{what} {path} holds a {type(state).__name__}, not a dmllab checkpoint")
    return state
