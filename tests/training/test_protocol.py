from __future__ import annotations

import pytest

from dmllab.training import RunStore, Trainer, apply_overrides, run, run_protocol
from dmllab.training.export import result_rows

# Scripted stage-1 validation R@1 per schedule epoch. With patience 1 (torch's ReduceLROnPlateau rule):
# e1, e2 improve, e3 and e4 do not -> lr drops after epoch 4; e5 is the best epoch; e6 is worse.
SCRIPT = [0.10, 0.20, 0.15, 0.15, 0.30, 0.10]


@pytest.fixture
def scripted_val(monkeypatch):
    original = Trainer.evaluate

    def fake(self, split=None, **kw):
        if (
            self.state is not None
            and self.state.plan.name == "stage1"
            and split == self.state.plan.eval_split
        ):
            sched_epoch = len(self.state.rows) + 1 - self.state.plan.warmup_epochs
            return {"R@1": SCRIPT[sched_epoch - 1] if sched_epoch >= 1 else 0.0}
        return original(self, split, **kw)

    monkeypatch.setattr(Trainer, "evaluate", fake)


def test_two_stage_bookkeeping(smoke_cfg, scripted_val):
    cfg = apply_overrides(smoke_cfg, ["schedule.epochs=6", "schedule.patience=1", "schedule.warmup_epochs=1"])
    result = run_protocol(cfg, progress=False)
    assert result.lr_drop_epochs == [4] and result.best_epoch == 5
    s1 = [r for r in result.history if r["stage"] == "stage1"]
    s2 = [r for r in result.history if r["stage"] == "stage2"]
    assert len(s1) == 1 + 6 and len(s2) == 1 + 5  # warm-up + schedule epochs; stage 2 stops after epoch 5
    lr = cfg.optim.lr
    assert [r["lr_backbone"] for r in s1] == pytest.approx([0.0, lr, lr, lr, lr, 0.1 * lr, 0.1 * lr])
    assert [r["lr_backbone"] for r in s2] == pytest.approx([0.0, lr, lr, lr, lr, 0.1 * lr])
    assert [r["lr_proxies"] for r in s2] == pytest.approx(
        [cfg.optim.lr_proxies] * 5 + [0.1 * cfg.optim.lr_proxies]
    )
    assert all("val_R@1" not in r or r["val_R@1"] is None for r in s2)  # stage 2 never validates
    assert set(result.metrics) == {"R@1", "R@2", "R@4"}


class CrashAt:
    """A hook that interrupts the run at the end of ``epoch`` of ``stage``, as a crash would."""

    def __init__(self, stage: str, epoch: int):
        self.stage, self.epoch = stage, epoch

    def on_epoch_end(self, trainer, epoch, metrics):
        if trainer.state.plan.name == self.stage and epoch == self.epoch:
            raise KeyboardInterrupt("simulated crash")


class Count:
    """A hook that records the (stage, epoch) pairs actually trained."""

    def __init__(self):
        self.epochs = []

    def on_epoch_end(self, trainer, epoch, metrics):
        self.epochs.append((trainer.state.plan.name, epoch))


def test_resume_after_crash_matches_uninterrupted_run(smoke_cfg, tmp_path):
    cfg = apply_overrides(
        smoke_cfg, ["schedule.epochs=3", "schedule.warmup_epochs=1", "run.checkpoint_minutes=0"]
    )
    clean = run(cfg, seed=1, store=RunStore(tmp_path / "a"), progress=False)

    store = RunStore(tmp_path / "b")
    with pytest.raises(KeyboardInterrupt):
        run(cfg, seed=1, store=store, hooks=(CrashAt("stage1", 2),), progress=False)
    count = Count()
    resumed = run(cfg, seed=1, store=store, hooks=(count,), progress=False)
    assert count.epochs[0] == ("stage1", 3)  # resumed at k + 1
    assert resumed.metrics == clean.metrics
    strip = [{k: v for k, v in r.items() if k != "time_s"} for r in clean.history]
    assert [{k: v for k, v in r.items() if k != "time_s"} for r in resumed.history] == strip


def test_checkpoints_follow_the_interval_and_every_stage_end(smoke_cfg, tmp_path):
    """With the default interval (minutes) a short run writes its checkpoint at the end of each stage only: a
    crash inside stage 2 resumes at stage 2's start, from stage 1's end, and ends as the uninterrupted run."""
    from dmllab.training.callbacks import EpochCheckpoint

    cfg = apply_overrides(smoke_cfg, ["schedule.epochs=3", "schedule.warmup_epochs=1"])
    assert cfg.run.checkpoint_minutes == 10.0
    clean = run(cfg, seed=1, store=RunStore(tmp_path / "a"), progress=False)
    saved = []

    store = RunStore(tmp_path / "b")
    with pytest.raises(KeyboardInterrupt):
        run(cfg, seed=1, store=store, hooks=(CrashAt("stage2", 2),), progress=False)
    count = Count()
    resumed = run(cfg, seed=1, store=store, hooks=(count,), progress=False)
    assert count.epochs[0] == ("stage2", 1)  # stage 1's end was the last checkpoint
    assert resumed.metrics == clean.metrics

    class Plan:
        total_epochs = 5

    class FakeTrainer:
        state = type("S", (), {"plan": Plan})

    now = [0.0]
    hook = EpochCheckpoint(lambda tr: saved.append(now[0]), minutes=1.0, clock=lambda: now[0])
    hook.on_train_start(FakeTrainer)
    for epoch, t in enumerate([20.0, 50.0, 70.0, 100.0, 110.0], start=1):
        now[0] = t
        hook.on_epoch_end(FakeTrainer, epoch, {})
    assert saved == [70.0, 110.0]  # 60 s after the start, then the stage's last epoch


def test_same_seed_same_metrics_and_store_returns_cached(smoke_cfg, tmp_path):
    a = run_protocol(smoke_cfg, seed=3, progress=False)
    b = run_protocol(smoke_cfg, seed=3, progress=False)
    assert a.metrics == b.metrics
    store = RunStore(tmp_path / "runs")
    first = run(smoke_cfg, seed=3, store=store, progress=False)
    assert first.metrics == a.metrics and not first.cached

    class Fail:
        def on_step_end(self, trainer, info):
            raise AssertionError("trained although the run is stored")

    again = run(smoke_cfg, seed=3, store=store, hooks=(Fail(),), progress=False)
    assert again.cached and again.metrics == first.metrics and again.best_epoch == first.best_epoch
    run_dir = store.run_dir(smoke_cfg, 3)
    assert {p.name for p in run_dir.iterdir()} == {
        "metrics.json",
        "history.csv",
        "config.json",
        "provenance.json",
        "checksums.json",
        "curves.jsonl",  # the live curves of its training (dmllab.training.curves)
    }
    rows = result_rows(again, experiment="smoke", paper="proxynca++", artifact="test", cfg=smoke_cfg)
    assert {r["metric"] for r in rows} == set(first.metrics)
    assert all(r["value"] == pytest.approx(100 * first.metrics[r["metric"]]) for r in rows)


def test_run_key_changes_with_the_synthetic_renderer_and_pretrained_weights(monkeypatch):
    """A stored result is never reused across a changed renderer or pre-training recipe (implicit inputs)."""
    import dmllab.data.synthetic as synthetic
    from dmllab.training import presets, run_key, smallcnn_weights
    from dmllab.training.config import config_hash

    quick = presets.get("proxynca++", "synthetic", "quick")
    key = run_key(quick)
    assert key != config_hash(quick)  # synthetic data + pre-trained SmallCNN are implicit inputs
    monkeypatch.setattr(synthetic, "GENERATOR_VERSION", synthetic.GENERATOR_VERSION + 1)
    assert run_key(quick) != key
    monkeypatch.undo()
    monkeypatch.setattr(smallcnn_weights, "pretrain_fingerprint", lambda *a, **k: "other-weights")
    assert run_key(quick) != key
    monkeypatch.undo()
    assert run_key(quick) == key


def _script_val(monkeypatch, r1, nmi=None):
    """Scripted stage-1 validation: R@1 (and NMI, only when the trainer asks for it) per schedule epoch."""
    original = Trainer.evaluate

    def fake(self, split=None, **kw):
        if (
            self.state is not None
            and self.state.plan.name == "stage1"
            and split == self.state.plan.eval_split
        ):
            e = len(self.state.rows) + 1 - self.state.plan.warmup_epochs
            out = {"R@1": r1[e - 1] if e >= 1 else 0.0}
            if nmi is not None and "nmi" in kw.get("metrics", ()):
                out["NMI"] = nmi[e - 1] if e >= 1 else 0.0
            return out
        return original(self, split, **kw)

    monkeypatch.setattr(Trainer, "evaluate", fake)


def test_hmean_monitor_drives_plateau_and_best_epoch(smoke_cfg, monkeypatch):
    # R@1 alone: drop after epoch 4, best epoch 5 (test_two_stage_bookkeeping). The harmonic mean with NMI
    # (authors' code): h = [.167, .286, .231, .231, .086, .167] -> drops after 4 and 6, best epoch 2.
    nmi = [0.50, 0.50, 0.50, 0.50, 0.05, 0.50]
    _script_val(monkeypatch, SCRIPT, nmi)
    base = ["schedule.epochs=6", "schedule.patience=1", "schedule.warmup_epochs=1"]
    result = run_protocol(
        apply_overrides(smoke_cfg, [*base, "schedule.monitor=hmean_nmi_r1"]), progress=False
    )
    assert result.lr_drop_epochs == [4, 6] and result.best_epoch == 2
    s1 = [r for r in result.history if r["stage"] == "stage1" and not r["warmup"]]
    assert [r["val_NMI"] for r in s1] == nmi
    assert [r["val_monitor"] for r in s1] == pytest.approx([2 * n * r / (n + r) for r, n in zip(SCRIPT, nmi)])
    assert len([r for r in result.history if r["stage"] == "stage2"]) == 1 + 2
    paper_text = run_protocol(apply_overrides(smoke_cfg, base), progress=False)
    assert paper_text.lr_drop_epochs == [4] and paper_text.best_epoch == 5
    assert all("val_NMI" not in r for r in paper_text.history)  # R@1 monitor: no NMI per epoch


@pytest.mark.parametrize("lag", [0, 1])
def test_stage2_drop_lag(smoke_cfg, monkeypatch, lag):
    _script_val(monkeypatch, [0.10, 0.20, 0.15, 0.15, 0.30, 0.40])  # drop after epoch 4, best epoch 6
    cfg = apply_overrides(
        smoke_cfg,
        [
            "schedule.epochs=6",
            "schedule.patience=1",
            "schedule.warmup_epochs=1",
            f"schedule.stage2_drop_lag={lag}",
        ],
    )
    result = run_protocol(cfg, progress=False)
    assert result.lr_drop_epochs == [4] and result.best_epoch == 6
    lr = cfg.optim.lr
    s1 = [r["lr_backbone"] for r in result.history if r["stage"] == "stage1"]
    s2 = [r["lr_backbone"] for r in result.history if r["stage"] == "stage2"]
    assert s1 == pytest.approx([0.0] + [lr] * 4 + [0.1 * lr] * 2)
    # paper (lag 0): the same epochs as stage 1; authors' code (lag 1): each drop one epoch later
    assert s2 == pytest.approx([0.0] + [lr] * (4 + lag) + [0.1 * lr] * (2 - lag))


def _single_with_val(smoke_cfg, epochs: int = 4):
    return apply_overrides(
        smoke_cfg,
        [
            f"schedule.epochs={epochs}",
            "run.two_stage=false",
            "data.train_split=train",
            "schedule.scheduler=none",
            "run.keep_best=true",
        ],
    )


def _script_validation(monkeypatch, script: list[float]) -> None:
    """The stage's validation R@1 of epoch ``i`` is ``script[i - 1]`` (other evaluations run for real)."""
    original = Trainer.evaluate

    def fake(self, split=None, **kw):
        if (
            self.state is not None
            and split == self.state.plan.eval_split
            and len(self.state.rows) < len(script)
        ):
            return {"R@1": script[len(self.state.rows)]}
        return original(self, split, **kw)

    monkeypatch.setattr(Trainer, "evaluate", fake)


def test_keep_best_tests_and_saves_the_best_validation_epoch(smoke_cfg, tmp_path, monkeypatch):
    import torch

    from dmllab.training.protocol import load_checkpoint

    script = [0.10, 0.40, 0.20, 0.30]  # schedule epoch 2 is the best
    _script_validation(monkeypatch, script)
    snapshots = {}

    class Snap:
        def on_epoch_end(self, trainer, epoch, row):
            snapshots[epoch] = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}

    cfg = _single_with_val(smoke_cfg)
    res = run_protocol(cfg, seed=0, hooks=(Snap(),), progress=False, final_model=tmp_path / "final.pt")
    assert res.best_epoch == 2
    final = load_checkpoint(tmp_path / "final.pt")["model"]
    assert all(torch.equal(final[k], snapshots[2][k]) for k in final)
    assert not all(torch.equal(final[k], snapshots[4][k]) for k in final)  # not the last epoch's weights
    last = run_protocol(
        cfg.replace("run.keep_best", False), seed=0, progress=False, final_model=tmp_path / "l.pt"
    )
    assert last.best_epoch is None


def test_keep_best_survives_a_resume(smoke_cfg, tmp_path, monkeypatch):
    import torch

    from dmllab.training.protocol import load_checkpoint

    script = [0.10, 0.40, 0.20, 0.30]  # the best epoch (2) is the one the crash follows
    _script_validation(monkeypatch, script)
    snapshots = {}

    class SnapThenCrash:
        def on_epoch_end(self, trainer, epoch, row):
            snapshots[epoch] = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
            if epoch == 2 and not getattr(self, "resumed", False):
                raise KeyboardInterrupt("simulated crash after epoch 2's checkpoint")

    cfg = _single_with_val(smoke_cfg).replace("run.checkpoint_minutes", 0)  # a checkpoint after every epoch
    kw = dict(seed=0, progress=False, checkpoint=tmp_path / "last.pt", final_model=tmp_path / "final.pt")
    hook = SnapThenCrash()
    with pytest.raises(KeyboardInterrupt):
        run_protocol(cfg, hooks=(hook,), **kw)
    hook.resumed = True
    res = run_protocol(cfg, hooks=(hook,), **kw)
    assert res.best_epoch == 2
    final = load_checkpoint(tmp_path / "final.pt")["model"]
    assert all(torch.equal(final[k], snapshots[2][k]) for k in final)


def test_keep_best_needs_a_single_stage_with_validation(smoke_cfg):
    from dmllab.training.config import ConfigValueError

    with pytest.raises(ConfigValueError, match="keep_best"):
        apply_overrides(smoke_cfg, ["run.keep_best=true"])  # two-stage preset
    no_val = apply_overrides(
        smoke_cfg, ["run.two_stage=false", "run.keep_best=true", "data.train_split=trainval"]
    )
    with pytest.raises(ValueError, match="keep_best needs a single stage"):
        run_protocol(no_val, progress=False)
