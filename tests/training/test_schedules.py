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
    # heating: the schedule's multiplier is unchanged; the Heating callback scales the epoch's lrs (lr_scale,
    # multiplied in by the trainer) and the loss's alpha from its epoch on
    from types import SimpleNamespace

    from dmllab.training.callbacks import Heating

    assert schedules.lr_multiplier(5, scheduler="none") == 1.0
    assert schedules.heated(5, 5) and not schedules.heated(4, 5) and not schedules.heated(5, None)
    heating = Heating(5, alpha_factor=0.25, lr_factor=0.1)
    trainer = SimpleNamespace(loss=SimpleNamespace(alpha=16.0), lr_scale=1.0)
    heating.on_build(trainer)
    heating.on_epoch_start(trainer, 4, 4)
    assert (trainer.lr_scale, trainer.loss.alpha) == (1.0, 16.0)
    heating.on_epoch_start(trainer, 5, 5)
    assert trainer.lr_scale == pytest.approx(0.1) and trainer.loss.alpha == 4.0
    assert schedules.loss_alpha(4, 16.0, heat_epoch=5, heat_alpha_factor=0.25) == 16.0
    assert schedules.loss_alpha(5, 16.0, heat_epoch=5, heat_alpha_factor=0.25) == 4.0
    with pytest.raises(ValueError, match="unknown scheduler"):
        schedules.lr_multiplier(1, scheduler="cosine")


def test_best_epoch_first_on_ties():
    assert schedules.best_epoch([0.1, 0.3, 0.3, 0.2]) == 2


def test_hmean_nmi_r1_and_monitored_value():
    assert schedules.hmean_nmi_r1(0.5, 0.25) == pytest.approx(2 * 0.5 * 0.25 / 0.75)
    assert schedules.hmean_nmi_r1(0.0, 0.0) == 0.0
    row = {"val_R@1": 0.3, "val_NMI": 0.6}
    assert schedules.monitored_value(row, "R@1") == 0.3
    assert schedules.monitored_value(row, "hmean_nmi_r1") == pytest.approx(0.4)
    with pytest.raises(ValueError, match="val_NMI"):
        schedules.monitored_value({"val_R@1": 0.3}, "hmean_nmi_r1")
    with pytest.raises(ValueError, match="unknown monitor"):
        schedules.monitored_value(row, "R@2")


def test_plateau_and_best_epoch_follow_the_monitor_when_r1_and_hmean_disagree():
    r1 = [0.10, 0.20, 0.15, 0.15, 0.30, 0.10]
    nmi = [0.50, 0.50, 0.50, 0.50, 0.05, 0.50]  # epoch 5: best R@1, poor clustering
    rows = [{"val_R@1": r, "val_NMI": n} for r, n in zip(r1, nmi)]
    hm = [schedules.monitored_value(row, "hmean_nmi_r1") for row in rows]
    assert hm == pytest.approx([2 * n * r / (n + r) for r, n in zip(r1, nmi)])
    assert schedules.plateau_drop_epochs(r1, patience=1) == _torch_drops(r1, 1) == [4]
    assert schedules.plateau_drop_epochs(hm, patience=1) == _torch_drops(hm, 1) == [4, 6]
    assert schedules.best_epoch(r1) == 5 and schedules.best_epoch(hm) == 2


def _authors_stage2_lrs(stage1_drops, epochs):
    """Naive reference of the authors' stage 2: MultiStepLR with the first stage-1 epochs at the lower lr as
    milestones, ``step(e)`` called at the end of epoch ``e``; returns the lr multiplier of epochs 1..epochs."""
    import warnings

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[d + 1 for d in stage1_drops], gamma=0.1)
    lrs = []
    for e in range(1, epochs + 1):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # step(epoch) is deprecated but is what the authors call
            sched.step(e)
    return lrs


def test_stage2_drop_lag_replays_the_authors_multisteplr():
    drops, epochs = [4, 7], 10
    stage1 = [schedules.lr_multiplier(e, scheduler="plateau", drops=drops, factor=0.1) for e in range(1, 11)]
    assert stage1 == pytest.approx([1.0] * 4 + [0.1] * 3 + [0.01] * 3)
    for lag, expected in [(0, stage1), (1, _authors_stage2_lrs(drops, epochs))]:
        ms = schedules.lagged_milestones(drops, lag)
        got = [
            schedules.lr_multiplier(e, scheduler="multistep", milestones=ms, factor=0.1) for e in range(1, 11)
        ]
        assert got == pytest.approx(expected)
    assert _authors_stage2_lrs(drops, epochs) == pytest.approx([1.0] * 5 + [0.1] * 3 + [0.01] * 2)
    with pytest.raises(ValueError, match="stage2_drop_lag"):
        schedules.lagged_milestones(drops, -1)
