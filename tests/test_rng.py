"""dmllab.rng: a block that draws for itself leaves the caller's random state as it found it."""

from __future__ import annotations

import random

import numpy as np
import torch

from dmllab.rng import random_state_kept


def _draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random()


def test_the_callers_state_is_restored_and_numpy_seeded_inside():
    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    expected = _draws()
    torch.manual_seed(5), np.random.seed(5), random.seed(5)
    with random_state_kept(numpy_seed=0):
        inside = np.random.rand(2).tolist()
        torch.manual_seed(1), random.seed(1), torch.rand(9), random.random()
    assert inside == np.random.RandomState(0).rand(2).tolist()
    assert _draws() == expected
