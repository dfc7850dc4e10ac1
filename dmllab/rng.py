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


#: The stage names of a run, each with its own range of per-epoch seeds (:func:`epoch_seed`).
STAGE_IDS = {"stage1": 1, "stage2": 2, "single": 3, "pretrain": 4, "finetune": 5}


def epoch_seed(seed: int, stage: str, epoch: int) -> int:
    """A distinct 63-bit seed per (run seed, stage, epoch), the same on every machine."""
    return (seed * 1_000_003 + STAGE_IDS.get(stage, 9) * 10_007 + epoch) % (2**63 - 1)


def epoch_key(stage: str, epoch: int) -> int:
    """An epoch number unique within a run (a class-balanced sampler's ``set_epoch``)."""
    return STAGE_IDS.get(stage, 9) * 100_000 + epoch


def seed_everything(seed: int) -> torch.Generator:
    """Seed torch, numpy and random; return a fresh torch.Generator seeded the same (for the DataLoader)."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    return torch.Generator().manual_seed(seed)


def worker_init(worker_id: int) -> None:
    """A DataLoader worker's numpy and ``random`` seeds, derived from the torch seed the loader gave it."""
    s = torch.initial_seed() % 2**32
    np.random.seed(s)
    random.seed(s)
