"""Shared fixtures of the toy tests: a small slice of the bundled digits (no training-engine dependency)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def small_digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train, y_train, x_test, y_test): 300 / 200 digits from dmllab.data.Digits' own split."""
    from dmllab.toys.heated import digits_tensors

    x_tr, y_tr = digits_tensors("train")
    x_te, y_te = digits_tensors("test")
    return x_tr[:300], y_tr[:300], x_te[:200], y_te[:200]
