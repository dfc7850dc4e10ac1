from __future__ import annotations

import numpy as np
import pytest
import torch

from dmllab.training import schedules


def _torch_drops(values, patience):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1e40)  # far from torch's eps=1e-8 floor on lr changes
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", patience=patience, factor=0.1)
    drops = []
    for epoch, v in enumerate(values, start=1):
        before = opt.param_groups[0]["lr"]
        sched.step(v)
        if opt.param_groups[0]["lr"] < before:
            drops.append(epoch)
    return drops


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("patience", [0, 1, 4])
def test_plateau_matches_torch(seed, patience):
    rng = np.random.default_rng(seed)
    values = list(np.round(np.cumsum(rng.normal(0.01, 0.03, size=40)), 3))
    assert schedules.plateau_drop_epochs(values, patience=patience) == _torch_drops(values, patience)


def test_multipliers():
    assert schedules.lr_multiplier(3, scheduler="plateau", drops=[3], factor=0.1) == 1.0
    assert schedules.lr_multiplier(4, scheduler="plateau", drops=[3], factor=0.1) == pytest.approx(0.1)
    assert schedules.lr_multiplier(9, scheduler="multistep", milestones=[3, 6], factor=0.1) == pytest.approx(
        0.01
    )
    assert schedules.lr_multiplier(11, scheduler="step", step_size=10, gamma=0.5) == 0.5
    assert schedules.lr_multiplier(10, scheduler="step", step_size=10, gamma=0.5) == 1.0
    assert schedules.lr_multiplier(5, scheduler="none", heat_epoch=5, heat_lr_factor=0.1) == pytest.approx(
        0.1
    )
    assert schedules.loss_alpha(4, 16.0, heat_epoch=5, heat_alpha_factor=0.25) == 16.0
    assert schedules.loss_alpha(5, 16.0, heat_epoch=5, heat_alpha_factor=0.25) == 4.0
    with pytest.raises(ValueError, match="unknown scheduler"):
        schedules.lr_multiplier(1, scheduler="cosine")


def test_best_epoch_first_on_ties():
    assert schedules.best_epoch([0.1, 0.3, 0.3, 0.2]) == 2
