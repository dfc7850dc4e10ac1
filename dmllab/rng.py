"""The process-wide random state (torch, numpy, ``random``): code that draws for itself leaves it as it found it."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import torch


@contextlib.contextmanager
def random_state_kept(numpy_seed: int | None = None) -> Iterator[None]:
    """Run the block with the caller's random state restored on exit: torch's CPU generator (and CUDA's, if
    initialised), numpy's global generator and ``random``'s. With ``numpy_seed``, numpy's global generator is
    seeded with it first, for code that draws from it unseeded (e.g. seaborn's strip-plot jitter)."""
    py, npy = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        try:
            if numpy_seed is not None:
                np.random.seed(numpy_seed)
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)
