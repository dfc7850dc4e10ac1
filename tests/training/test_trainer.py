from __future__ import annotations

import pytest
import torch

from dmllab.training import NonFiniteLossError, RunStore, StagePlan, Trainer, apply_overrides, presets, run
from dmllab.training.protocol import stage_plans

LOSS_METHODS = [
    "proxynca++",
    "proxynca",
    "normsoftmax",
    "proxy_anchor",
    "heated_softmax:HBN",
    "heated_softmax:SM",
    "proxy_synthesis",
    "proxy_synthesis:proxy_anchor",
    "margin",
    "multi_similarity",
]


@pytest.mark.parametrize("method", LOSS_METHODS)
def test_every_loss_parameter_is_in_an_optimizer_group(method):
    cfg = presets.get(method, "synthetic", "smoke")
    trainer = Trainer(cfg, progress=False)
    trainer.setup(stage_plans(cfg)[0])
    held = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert all(id(p) in held for p in trainer.loss.parameters())
    assert all(id(p) in held for p in trainer.model.parameters())
    names = [g["name"] for g in trainer.optimizer.param_groups]
    assert names[:2] == ["backbone", "embedding"]
    if any(True for _ in trainer.loss.parameters()):
        group = next(g for g in trainer.optimizer.param_groups if g["name"] == "proxies")
        assert group["base_lr"] == (cfg.optim.lr_proxies or cfg.optim.lr)


class _Recorder:
    def __init__(self):
        self.steps = []
        self.epochs = []

    def on_step_end(self, trainer, info):
        bb = [p for p in trainer.model.backbone.parameters()]
        lrs = {g["name"]: g["lr"] for g in trainer.optimizer.param_groups}
        proxy_grad = trainer.loss.proxies.grad
        self.steps.append(
            {
                "epoch": info["epoch"],
                "step": info["step"],
                "lr": lrs,
                "backbone_has_grad": any(p.grad is not None for p in bb),
                "backbone_requires_grad": any(p.requires_grad for p in bb),
                "proxy_grad_norm": None if proxy_grad is None else float(proxy_grad.norm()),
            }
        )

    def on_epoch_end(self, trainer, epoch, metrics):
        self.epochs.append(epoch)


def test_warmup_freezes_the_backbone(smoke_cfg):
    cfg = apply_overrides(smoke_cfg, ["schedule.warmup_epochs=1", "schedule.epochs=1"])
    rec = _Recorder()
    trainer = Trainer(cfg, hooks=[rec], progress=False)
    plan = StagePlan("single", "train", None, 1, 1, "none")
    trainer.setup(plan)
    before = [p.detach().clone() for p in trainer.model.backbone.parameters()]
    head_before = [p.detach().clone() for p in trainer.model.head.parameters()]
    # the warm-up epoch, then one schedule epoch, step by step
    trainer.apply_schedule(plan, 1)
    trainer.train_epoch(plan, 1)
    warm = [s for s in rec.steps if s["epoch"] == 1]
    assert warm and all(not s["backbone_has_grad"] and not s["backbone_requires_grad"] for s in warm)
    assert all(s["lr"]["backbone"] == 0.0 and s["lr"]["proxies"] == cfg.optim.lr_proxies for s in warm)
    assert all(s["proxy_grad_norm"] and s["proxy_grad_norm"] > 0 for s in warm)
    after = list(trainer.model.backbone.parameters())
    assert all(
        torch.equal(a.detach(), b) for a, b in zip(after, before) if a.dim() > 1
    )  # conv weights frozen
    assert any(not torch.equal(a.detach(), b) for a, b in zip(trainer.model.head.parameters(), head_before))
    trainer.apply_schedule(plan, 2)
    trainer.train_epoch(plan, 2)
    trained = [s for s in rec.steps if s["epoch"] == 2]
    assert all(s["backbone_has_grad"] and s["lr"]["backbone"] == cfg.optim.lr for s in trained)


def test_nan_loss_names_epoch_and_step_and_keeps_checkpoint(smoke_cfg, tmp_path):
    cfg = apply_overrides(
        smoke_cfg,
        ["run.two_stage=false", "schedule.scheduler=none", "schedule.epochs=3", "run.checkpoint_minutes=0"],
    )

    class Poison:
        def on_step_end(self, trainer, info):
            if info["epoch"] == 2 and info["step"] == 1:
                with torch.no_grad():
                    trainer.model.head.linear.weight.fill_(float("nan"))

    store = RunStore(tmp_path / "runs")
    with pytest.raises(NonFiniteLossError, match=r"epoch 2 .*step 2"):
        run(cfg, seed=0, store=store, hooks=(Poison(),), progress=False)
    ckpt = store.checkpoint_dir(cfg.replace("run.seed", 0), 0) / "last.pt"
    state = torch.load(ckpt, weights_only=False)
    assert state["trainer"]["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in state["trainer"]["model"].values() if v.is_floating_point())
    assert store.load(cfg, 0) is None  # nothing stored for a failed run


class _InflateGrads:
    """on_step_end hook: multiply every gradient by 1e4 so that it exceeds the clip value 10."""

    def on_step_end(self, trainer, info):
        for module in (trainer.model, trainer.loss):
            for p in module.parameters():
                if p.grad is not None:
                    p.grad.mul_(1e4)


@pytest.mark.parametrize(("method", "proxies_clipped"), [("proxynca++", False), ("proxy_anchor", True)])
def test_grad_clip_by_value_on_model_and_only_pa_proxies(method, proxies_clipped):
    """ProxyNCA++ code: clip_grad_value_(model, 10), proxies not clipped; Proxy Anchor code clips both."""
    cfg = presets.get(method, "synthetic", "smoke")
    if proxies_clipped:  # the paper preset's clip setting on the smoke scale
        cfg = cfg.replace("optim.clip_proxies", presets.get(method, "cub", "paper").optim.clip_proxies)
    trainer = Trainer(cfg, hooks=[_InflateGrads()], progress=False)
    plan = StagePlan("single", "train", None, 1, 0, "none")
    trainer.setup(plan)
    seen = []
    step = trainer.optimizer.step

    def recording_step(*a, **kw):
        g = lambda m: max(float(p.grad.abs().max()) for p in m.parameters() if p.grad is not None)  # noqa: E731
        seen.append((g(trainer.model), g(trainer.loss)))
        return step(*a, **kw)

    trainer.optimizer.step = recording_step
    trainer.apply_schedule(plan, 1)
    trainer.train_epoch(plan, 1)
    assert seen and all(model_max <= 10.0 for model_max, _ in seen)
    if proxies_clipped:
        assert all(proxy_max <= 10.0 for _, proxy_max in seen)
    else:
        assert any(proxy_max > 10.0 for _, proxy_max in seen)


class _OptimState:
    """Records, at the first step of every epoch (before ``optimizer.step()``), how many parameters have
    optimiser state and the largest Adam step count."""

    def __init__(self):
        self.first_step = {}

    def on_step_end(self, trainer, info):
        if info["step"] == 1:
            st = trainer.optimizer.state
            steps = [int(s["step"]) for s in st.values() if "step" in s]
            self.first_step[info["epoch"]] = (len(st), max(steps, default=0))


@pytest.mark.parametrize("fresh", [False, True])
def test_fresh_optimizer_after_warmup(smoke_cfg, fresh):
    cfg = apply_overrides(
        smoke_cfg,
        [
            "schedule.warmup_epochs=2",
            "schedule.epochs=2",
            "run.two_stage=false",
            "schedule.scheduler=none",
            f"optim.fresh_after_warmup={str(fresh).lower()}",
        ],
    )
    rec = _OptimState()
    trainer = Trainer(cfg, hooks=[rec], progress=False)
    trainer.setup(stage_plans(cfg)[0])
    trainer.fit()
    n_warm, steps_warm = rec.first_step[2]
    assert n_warm > 0 and steps_warm > 0  # the warm-up optimiser is used across the warm-up epochs
    n_first, steps_first = rec.first_step[3]  # first schedule epoch
    if fresh:  # authors' code: a new Adam, empty moments and step counts
        assert (n_first, steps_first) == (0, 0)
    else:  # one optimiser: the warm-up moments carry over
        assert n_first >= n_warm and steps_first > steps_warm
    assert rec.first_step[4][0] > 0 and rec.first_step[4][1] > 0  # reset once, not every epoch
    assert [g["name"] for g in trainer.optimizer.param_groups][:2] == ["backbone", "embedding"]


@pytest.mark.parametrize("crash_epoch", [1, 2])
def test_fresh_after_warmup_resume_is_exact(smoke_cfg, tmp_path, crash_epoch):
    """Crash after the last warm-up epoch (the resume must reset) or after the first schedule epoch (the
    resume must keep the checkpointed post-warm-up state): both match the uninterrupted run."""
    cfg = apply_overrides(
        smoke_cfg,
        [
            "schedule.epochs=3",
            "schedule.warmup_epochs=1",
            "optim.fresh_after_warmup=true",
            "run.two_stage=false",
            "schedule.scheduler=none",
            "run.checkpoint_minutes=0",  # a checkpoint after every epoch: the resume starts after the crash
        ],
    )
    clean = run(cfg, seed=1, store=RunStore(tmp_path / "a"), progress=False)

    class Crash:
        def on_epoch_end(self, trainer, epoch, metrics):
            if epoch == crash_epoch:
                raise KeyboardInterrupt("simulated crash")

    store = RunStore(tmp_path / "b")
    with pytest.raises(KeyboardInterrupt):
        run(cfg, seed=1, store=store, hooks=(Crash(),), progress=False)
    resumed = run(cfg, seed=1, store=store, progress=False)
    assert resumed.metrics == clean.metrics
    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in clean.history]
