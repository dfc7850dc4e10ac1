"""The paper presets against the authors' released code: one test per fact, the fact cited in its docstring.

Releases read (file:line at these commits):

* ProxyNCA++: euwern/proxynca_pp @ 217233d29a89a89766658396a598b896d17a5814
* Proxy Anchor: tjddus9597/Proxy-Anchor-CVPR2020 @ 51db57031e38f75c03f69bbdfad1a3233afd9787
* Proxy Synthesis: navervision/proxy-synthesis @ 20dfe490580ae2befa4e345b470d80b1b35343e1
* Heated-up Softmax: ColumbiaDVMM/Heated_Up_Softmax_Embedding @ cb62d28e5faaf7fdb134b31c461125e3fef50d06
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from dmllab.training import presets


# --------------------------------------------------------------------------- ProxyNCA++: the epoch selection
def _release_stage1(values: list[float]) -> tuple[list[int], int]:
    """The release's stage-1 bookkeeping on validation R@1 ``values`` (fractions), with torch's own
    ReduceLROnPlateau: ``lr_steps`` (0-based epochs that first ran at a lower lr) and the best 0-based epoch."""
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=4e-3)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="max", patience=4)  # config/cub.json
    prev, steps, best, best_epoch = opt.param_groups[0]["lr"], [], 0.0, 0
    for e, r1 in enumerate(values):
        if opt.param_groups[0]["lr"] != prev:  # train.py:424-429
            prev = opt.param_groups[0]["lr"]
            steps.append(e)
        nmi = 1  # utils.py:119-120 (eval_nmi off)
        chmean = (2 * nmi * r1) / (nmi + r1)  # train.py:484
        scheduler.step(chmean)  # train.py:486
        if chmean > best:  # train.py:488-495
            best, best_epoch = chmean, e
    return steps, best_epoch


def test_proxynca_pp_paper_preset_selects_epochs_as_the_release_does():
    """ProxyNCA++ release: ``--eval_nmi`` defaults to False (train.py:34) and is switched on only in the
    trainval/test modes (train.py:73-77); ``utils.evaluate`` then sets ``nmi = 1`` (utils.py:111-120), and the
    train mode steps ``ReduceLROnPlateau(mode='max', patience=4)`` (config/cub.json:10-16, torch's default
    threshold 1e-4 relative) on ``chmean = 2*nmi*R/(nmi+R)`` (train.py:484-486) and keeps the best chmean
    (train.py:488-495). So it monitors 2R/(1+R): the paper preset's drops and best epoch equal torch's on a made-up
    curve, where monitoring R@1 itself would drop one epoch later (a 3-query gain at R@1 = 0.75 on 29,000 queries
    passes the threshold for R@1, not for 2R/(1+R))."""
    from dmllab.training import schedules
    from dmllab.training.protocol import stage1_summary

    correct = [20000, 21000, 21500, 21750] + [21753] * 12 + [21900, 21900]
    values = [k / 29000 for k in correct]
    rows = [{"stage": "stage1", "warmup": False, "val_R@1": v} for v in values]
    release_steps, release_best = _release_stage1(values)
    for dataset in ("cub", "cars", "sop"):
        cfg = presets.get("proxynca++", dataset, "paper")
        assert cfg.schedule.monitor == "hmean_r1" and not schedules.monitor_needs_nmi(cfg.schedule.monitor)
        best, drops = stage1_summary(cfg, rows)
        # a release lr_step e (first 0-based epoch at the lower lr) is dmllab's drop "after schedule epoch e"
        assert drops == release_steps == [9, 14] and best == release_best + 1
    r1_best, r1_drops = stage1_summary(cfg.replace("schedule.monitor", "R@1"), rows)
    assert r1_drops == [10, 15] and r1_best == best  # the option: same ranking, other drops
    assert presets.get("proxynca++", "cub", "quick").schedule.monitor == "R@1"  # quick/smoke: the paper text


# --------------------------------------------------------------------------- Proxy Synthesis: the Proxy-NCA base
def _released_proxy_nca(x: torch.Tensor, y: torch.Tensor, p: torch.Tensor, scale: float) -> torch.Tensor:
    """PS release, loss/proxy_losses.py:92-102, written out."""
    x, p = torch.nn.functional.normalize(x, dim=1), torch.nn.functional.normalize(p, dim=1)
    dist = torch.cdist(x, p) ** 2 * scale
    target = torch.nn.functional.one_hot(y, dist.shape[1]).float()
    return torch.mean(torch.sum(-target * torch.nn.functional.log_softmax(-dist, -1), -1))


def _ps_loss(base: str, dataset: str = "cars", **options):
    """The base loss of the preset, as built under its Proxy Synthesis wrapper."""
    from dmllab.losses import ProxySynthesis, build_loss

    cfg = presets.get(f"proxy_synthesis:{base}", dataset, "paper", **options)
    loss = build_loss(cfg.loss, num_classes=98, embedding_dim=512)
    assert isinstance(loss, ProxySynthesis)
    return loss.base


def test_ps_proxy_nca_base_is_the_released_log_softmax_over_all_proxies():
    """PS release: ``Proxy_NCA`` L2-normalises embeddings and proxies (loss/proxy_losses.py:92-93) and returns
    ``mean(sum(-one_hot * log_softmax(-scale * cdist(x, p)**2)))`` over all proxies, the positive included
    (loss/proxy_losses.py:99-102), with ``--scale=12.0`` (README.md:130-137). The preset's base "proxynca" equals
    it; ``nca_prob=False`` (classic ProxyNCA, the positive left out of the denominator) does not."""
    g = torch.Generator().manual_seed(0)
    x, p = torch.randn(16, 512, generator=g), 3 * torch.randn(98, 512, generator=g)
    y = torch.randint(0, 98, (16,), generator=g)
    loss = _ps_loss("proxynca")
    expected = _released_proxy_nca(x, y, p, scale=12.0)
    torch.testing.assert_close(loss.loss_from_proxies(x, y, p), expected, rtol=1e-5, atol=1e-5)
    assert _ps_loss("proxynca++").loss_from_proxies(x, y, p) == loss.loss_from_proxies(x, y, p)
    classic = _ps_loss("proxynca", nca_prob=False)
    assert not classic.prob and not torch.allclose(classic.loss_from_proxies(x, y, p), expected)
    with pytest.raises(ValueError, match="nca_prob"):
        presets.get("proxy_synthesis:normsoftmax", "cars", "paper", nca_prob=False)
    # Norm_SoftMax (loss/proxy_losses.py:62-76): cross-entropy of scale * cos, --scale=23.0 (README.md:103-109)
    ns = _ps_loss("normsoftmax")
    cos = torch.nn.functional.normalize(x, dim=1) @ torch.nn.functional.normalize(p, dim=1).t()
    torch.testing.assert_close(
        ns.loss_from_proxies(x, y, p), torch.nn.functional.cross_entropy(23.0 * cos, y)
    )


@pytest.mark.parametrize("base", ["normsoftmax", "proxynca", "proxynca++"])
def test_ps_proxies_start_as_the_release_initialises_them(base):
    """PS release: ``Norm_SoftMax`` and ``Proxy_NCA`` draw ``init.kaiming_uniform_(self.proxy, a=math.sqrt(5))``
    (loss/proxy_losses.py:57-59, 86-88): U(-1/sqrt(D), 1/sqrt(D)), norm about 1/sqrt(3) = 0.58 at 512-d. The
    preset's losses draw exactly that (same seed, same tensor); the other bases keep their own init, the
    ProxyNCA++ presets randn/8 (ProxyNCA++ release loss.py:55, norm about sqrt(512)/8 = 2.8)."""
    torch.manual_seed(0)
    loss = _ps_loss(base)
    torch.manual_seed(0)
    expected = torch.nn.init.kaiming_uniform_(torch.empty(98, 512), a=math.sqrt(5))
    assert torch.equal(loss.proxies.detach(), expected)
    assert loss.proxies.detach().norm(dim=1).mean().item() == pytest.approx(1 / math.sqrt(3), rel=0.03)
    for profile in ("quick", "smoke"):  # the same init at every scale
        loss = presets.get(f"proxy_synthesis:{base}", "synthetic", profile).loss
        assert loss.name == "proxy_synthesis" and loss.leaf.get("proxy_init") == "linear"
    pnpp = presets.get("proxynca++", "cub", "paper")
    assert "proxy_init" not in pnpp.loss.kw  # the loss's default: randn/8
    from dmllab.losses import build_loss

    torch.manual_seed(0)
    randn8 = build_loss("proxynca", num_classes=98, embedding_dim=512).proxies.detach().norm(dim=1).mean()
    assert randn8.item() == pytest.approx(math.sqrt(512) / 8, rel=0.03)


# --------------------------------------------------------------------------- BatchNorm affine parameters
def _bn_layers(model) -> list[_BatchNorm]:
    return [m for m in model.backbone.modules() if isinstance(m, _BatchNorm)]


def _bn_trajectory(paper_cfg, *, warmup: int, epochs: int = 1, affine: bool | None = None):
    """Train ``paper_cfg``'s BatchNorm settings on the smoke scale (``warmup`` + ``epochs`` epochs): per epoch,
    whether every trunk BN affine parameter required grad during it, whether BN ran in eval mode, whether the BN
    weights moved and whether the running statistics moved."""
    from dmllab.training import Trainer
    from dmllab.training.protocol import stage_plans

    m = paper_cfg.model
    cfg = presets.get("proxy_anchor", "synthetic", "smoke")
    cfg = cfg.replace("model.freeze_bn", m.freeze_bn).replace(
        "model.freeze_bn_affine", m.freeze_bn_affine if affine is None else affine
    )
    cfg = cfg.replace("schedule.warmup_epochs", warmup).replace("schedule.epochs", epochs)
    cfg = cfg.replace("schedule.scheduler", "none").replace("schedule.milestones", ())
    seen = []

    class Watch:
        grad = evals = None

        def on_step_end(self, trainer, info):
            if info["step"] == 1:
                bns = _bn_layers(trainer.model)
                self.grad = all(p.requires_grad and p.grad is not None for b in bns for p in b.parameters())
                self.evals = all(not b.training for b in bns)

        def on_epoch_end(self, trainer, epoch, row):
            bns = _bn_layers(trainer.model)
            weights = torch.cat([b.weight.detach().flatten() for b in bns]).clone()
            stats = torch.cat([b.running_mean.flatten() for b in bns]).clone()
            seen.append((self.grad, self.evals, weights, stats))

    trainer = Trainer(cfg, hooks=(Watch(),), progress=False)
    trainer.setup(stage_plans(cfg)[0])
    prev = torch.cat([b.weight.detach().flatten() for b in _bn_layers(trainer.model)]).clone()
    trainer.fit()
    stats0 = torch.zeros_like(seen[0][3])  # a fresh BatchNorm's running mean (smoke: no pre-training)
    out = []
    for grad, evals, weights, stats in seen:
        out.append({"grad": grad, "eval": evals, "moved": not torch.equal(weights, prev)})
        out[-1]["stats_moved"] = not torch.equal(stats, stats0)
        prev = weights
    return out


def test_proxy_anchor_bn_affine_trains_after_the_warmup_with_frozen_statistics():
    """Proxy Anchor release: the ResNet-50 constructor with ``bn_freeze`` puts every BatchNorm2d in eval mode and
    sets its weight/bias ``requires_grad_(False)`` (code/net/resnet.py:150-155); every epoch train.py calls
    ``model.train()`` and then ``m.eval()`` on each BatchNorm2d (code/train.py:264-271); with ``--warm`` it sets
    ``requires_grad = False`` on every parameter outside the embedding and the proxies at epoch 0 and ``True``
    at ``epoch == args.warm`` (code/train.py:276-287), BN weight and bias included; the ResNet-50 CUB/Cars
    commands pass ``--warm 5 --bn-freeze 1`` (README.md:65-74, 102-111). So: statistics frozen throughout, affine
    frozen during the warm-up and trained after it. ``model.freeze_bn_affine=true`` is the old behaviour."""
    for dataset in ("cub", "cars"):
        m = presets.get("proxy_anchor", dataset, "paper").model
        assert m.freeze_bn and m.freeze_bn_affine is False
    warm, trained = _bn_trajectory(presets.get("proxy_anchor", "cub", "paper"), warmup=1)
    assert not warm["grad"] and warm["eval"] and not warm["moved"]
    assert trained["grad"] and trained["eval"] and trained["moved"]
    assert not warm["stats_moved"] and not trained["stats_moved"]
    _, frozen = _bn_trajectory(presets.get("proxy_anchor", "cub", "paper"), warmup=1, affine=True)
    assert not frozen["grad"] and frozen["eval"] and not frozen["moved"]


def test_proxy_synthesis_bn_affine_always_trains_with_frozen_statistics():
    """Proxy Synthesis release: ``--freeze_BN`` only calls ``m.eval()`` on every BatchNorm2d after
    ``model.train()`` (main.py:388-396) and never changes ``requires_grad`` (the README commands use no
    ``--warmup``, main.py:85 defaults to 0): statistics frozen, affine parameters trained from the first step."""
    cfg = presets.get("proxy_synthesis", "cars", "paper")
    assert cfg.model.freeze_bn and cfg.model.freeze_bn_affine is False and cfg.schedule.warmup_epochs == 0
    (first,) = _bn_trajectory(cfg, warmup=0)
    assert first["grad"] and first["eval"] and first["moved"] and not first["stats_moved"]


# --------------------------------------------------------------------------- precision
def test_paper_presets_use_the_releases_precision_and_runs_record_it(tmp_path, monkeypatch):
    """ProxyNCA++ release: every README command passes ``--apex`` (README.md:14-26), which runs
    ``amp.initialize([model, criterion], [opt, opt_warmup], opt_level='O1')`` (train.py:314-315) and scales the
    loss (train.py:411-413, 445-447): fp16 autocast with dynamic loss scaling. Proxy Anchor: train.py has no
    autocast or loss scaling (fp32). Proxy Synthesis: ``--use_amp`` defaults to False (main.py:95) and no README
    command sets it (fp32). Heated-up: a float32 TensorFlow graph (deep_metric_learning_Inception.py:193-196),
    no mixed precision (fp32). Quick and smoke keep the default; the stored run says what it used."""
    from dmllab.training.evaluation import resolve_amp
    from dmllab.training.store import RunStore, run

    fp16 = ["proxynca++", "proxynca", "normsoftmax"]
    fp32 = ["proxy_anchor", "proxy_synthesis", "proxy_synthesis:proxynca", "proxy_synthesis:proxy_anchor"]
    fp32 += [f"heated_softmax:{v}" for v in presets.HEATED_VARIANTS]
    for method in fp16 + fp32:
        for dataset in ("cub", "sop"):
            assert presets.get(method, dataset, "paper").run.amp == ("fp16" if method in fp16 else "off")
        for profile in ("quick", "smoke"):
            assert presets.get(method, "synthetic", profile).run.amp == "auto"
    assert resolve_amp("fp16", torch.device("cuda")) == torch.float16  # the trainer then builds a GradScaler
    assert (
        resolve_amp("off", torch.device("cuda")) is None and resolve_amp("fp16", torch.device("cpu")) is None
    )
    cfg = presets.get("proxynca++", "synthetic", "smoke").replace("schedule.epochs", 1)
    store = RunStore(tmp_path / "runs")
    result = run(cfg, seed=0, store=store, progress=False)
    assert result.precision == "fp32"
    metrics = json.loads((store.run_dir(cfg, 0) / "metrics.json").read_text())
    provenance = json.loads((store.run_dir(cfg, 0) / "provenance.json").read_text())
    assert metrics["precision"] == provenance["precision"] == "fp32"
    assert store.load(cfg, 0).precision == "fp32"


# --------------------------------------------------------------------------- Heated-up: heating by fine-tuning
def _count_trainings(monkeypatch) -> dict[str, int]:
    """Count :func:`run_protocol` calls of the run store per config hash."""
    from dmllab.training import store as store_mod
    from dmllab.training.config import config_hash

    counts: dict[str, int] = {}
    real = store_mod.run_protocol

    def counting(cfg, **kw):
        counts[config_hash(cfg)] = counts.get(config_hash(cfg), 0) + 1
        return real(cfg, **kw)

    monkeypatch.setattr(store_mod, "run_protocol", counting)
    return counts


def test_heated_compressed_profiles_fine_tune_the_converged_ln_bn_model():
    """Heated-up paper: heating fine-tunes the model trained at the starting temperature (Sec. 3.4 (ii); Sec.
    5.2: "HLN: Heated-up model using alpha = 4 to fine-tune LN"), alpha 16 -> 4 and lr x 0.1 (Sec. 5.1). The
    quick and smoke presets do that (at their scale the release's in-run heating at 76 % of training heats an
    unconverged model): HLN/HBN = LN/BN fine-tuned for a quarter of its epochs, rounded up, at alpha x 1/4, lr
    x 0.1; on the paper profile the option ``heating="finetune"`` gives 20 epochs after LN/BN's 80
    (run_Inception.py:31-35, 88)."""
    from dmllab.training.config import parent_config

    for variant, parent in (("HLN", "LN"), ("HBN", "BN")):
        for profile, epochs, hot in (("quick", 8, 2), ("smoke", 2, 1)):
            cfg = presets.get(f"heated_softmax:{variant}", "synthetic", profile)
            assert (cfg.schedule.epochs, cfg.callback("heating")) == (epochs, None)
            assert (cfg.finetune.epochs, cfg.finetune.alpha_factor, cfg.finetune.lr_factor) == (
                hot,
                0.25,
                0.1,
            )
            assert parent_config(cfg) == presets.get(f"heated_softmax:{parent}", "synthetic", profile)
        for dataset in ("cub", "sop"):
            cfg = presets.get(f"heated_softmax:{variant}", dataset, "paper", heating="finetune")
            assert (cfg.schedule.epochs, cfg.callback("heating"), cfg.finetune.epochs) == (80, None, 20)
            assert parent_config(cfg) == presets.get(f"heated_softmax:{parent}", dataset, "paper")
        cfg = presets.get(f"heated_softmax:{variant}", "cub", "paper", heating="finetune", heat_epochs=10)
        assert cfg.finetune.epochs == 10
    with pytest.raises(ValueError, match="HLN/HBN"):
        presets.get("heated_softmax:LN", "synthetic", "quick", heating="finetune")


def test_heated_paper_preset_is_the_released_loop():
    """Heated-up release: one run of ``nb_epoch`` epochs that, after 0-based epoch ``nb_epoch - nb_hu_epoch``,
    multiplies the lr by 0.1 and alpha by 0.25 (tensorflow/deep_metric_learning_Inception.py:390-394), with
    ``--nb_epoch 80 --nb_hu_epoch=20`` (run_Inception.py:31-35, 88): schedule epochs 62-80 run heated. Where paper
    and code disagree the paper preset follows the code: ``heating="in_run"`` is the paper preset's default;
    LN/BN train all 80 epochs at alpha 16, as in the release."""
    from types import SimpleNamespace

    from dmllab.training import schedules
    from dmllab.training.callbacks import Heating, build_callbacks

    for variant in ("HLN", "HBN"):
        cfg = presets.get(f"heated_softmax:{variant}", "cub", "paper")
        heating = cfg.callback("heating")
        assert cfg.finetune.epochs == 0 and (cfg.schedule.epochs, heating.get("epoch")) == (80, 62)
        assert presets.get(f"heated_softmax:{variant}", "cub", "paper", heating="in_run") == cfg
    ln = presets.get("heated_softmax:LN", "cub", "paper")
    assert ln.schedule.epochs == 80 and ln.callbacks == ()
    released = [0.1 if e > 80 - 20 else 1.0 for e in range(80)]  # 0-based epoch e, lowered after e == 60
    released_alpha = [4.0 if e > 80 - 20 else 16.0 for e in range(80)]  # alpha = alpha * 0.25 there too
    # the trainer's epoch start (Trainer.apply_schedule): the callback scales lr_scale and sets the loss's alpha
    (callback,) = build_callbacks(cfg)
    assert isinstance(callback, Heating)
    trainer = SimpleNamespace(loss=SimpleNamespace(alpha=16.0), lr_scale=1.0)
    callback.on_build(trainer)
    mult, alpha = [], []
    for e in range(1, 81):
        trainer.lr_scale = 1.0
        callback.on_epoch_start(trainer, e, e)
        mult.append(schedules.lr_multiplier(e, scheduler=cfg.schedule.scheduler) * trainer.lr_scale)
        alpha.append(trainer.loss.alpha)
    assert mult == pytest.approx(released) and alpha == pytest.approx(released_alpha)


def test_heated_fine_tune_run_key_depends_on_its_parent():
    """A fine-tune is its own run, keyed on its parent (Sec. 3.4 (ii): heating fine-tunes the trained LN/BN)."""
    from dmllab.training.config import config_hash, parent_config
    from dmllab.training.store import run_key

    child = presets.get("heated_softmax:HLN", "synthetic", "smoke")
    parent = parent_config(child)
    assert run_key(child) != run_key(parent) and config_hash(child) != config_hash(parent)
    longer_parent = child.replace("schedule.epochs", 3)  # the parent's schedule is the config's schedule
    assert run_key(longer_parent) != run_key(child)
    assert run_key(parent_config(longer_parent)) != run_key(parent)
    longer_fine_tune = child.replace("finetune.epochs", 2)
    assert run_key(longer_fine_tune) != run_key(child)
    assert run_key(parent_config(longer_fine_tune)) == run_key(parent)
    # a network change applies to parent and fine-tune alike (the parent is derived from the config)
    wider = child.replace("model.embedding_dim", 32)
    assert parent_config(wider).model.embedding_dim == 32
    # its own stage: trainval (the parent's split), no warm-up, lr x 0.1 from the start (a drop at 0), heated
    from dmllab.training.protocol import run_protocol, stage_plans, training_config

    (plan,) = stage_plans(child)
    assert (plan.name, plan.train_split, plan.eval_split, plan.epochs, plan.warmup_epochs) == (
        "finetune",
        "trainval",
        None,
        1,
        0,
    )
    # alpha x 1/4 by the heating callback from epoch 1; the lr x 0.1 is the drop at 0, not the callback's
    heating = training_config(child).callback("heating")
    assert (plan.scheduler, plan.milestones, heating.get("epoch")) == ("multistep", (0,), 1)
    assert (heating.get("alpha_factor"), heating.get("lr_factor")) == (child.finetune.alpha_factor, 1.0)
    with pytest.raises(ValueError, match="parent"):
        run_protocol(child, progress=False)  # only the run store knows where the parent's weights are


def test_heated_fine_tune_trains_its_parent_once_and_starts_from_its_weights(tmp_path, monkeypatch):
    """Heated-up Sec. 5.1 / release deep_metric_learning_Inception.py:391-394: heating multiplies alpha by 0.25
    and the lr by 0.1. The fine-tune's first step runs on the parent's final weights (bit-equal: model and loss),
    at alpha 16/4 and lr x 0.1; the parent is trained once and reused; the fine-tune's final model loads for
    evaluation and export."""
    from dmllab.training import export
    from dmllab.training.config import config_hash, parent_config
    from dmllab.training.store import RunStore, run

    counts = _count_trainings(monkeypatch)
    store = RunStore(tmp_path / "runs")
    child = presets.get("heated_softmax:HLN", "synthetic", "smoke")
    parent = parent_config(child)
    seen = {}

    class Start:
        def on_train_start(self, trainer):
            seen["model"] = {k: v.clone() for k, v in trainer.model.state_dict().items()}
            seen["loss"] = {k: v.clone() for k, v in trainer.loss.state_dict().items()}

        def on_step_end(self, trainer, info):
            if info["step"] == 1:
                seen["alpha"] = trainer.loss.alpha
                seen["lrs"] = {g["name"]: g["lr"] for g in trainer.optimizer.param_groups}

    result = run(child, seed=0, store=store, hooks=(Start(),), progress=False)
    assert counts == {config_hash(parent): 1, config_hash(child): 1}
    final = torch.load(store.checkpoint_dir(parent, 0) / "final.pt", map_location="cpu", weights_only=True)
    for part in ("model", "loss"):
        assert seen[part].keys() == final[part].keys()
        assert all(torch.equal(seen[part][k], final[part][k]) for k in final[part])
    assert seen["alpha"] == 16.0 * 0.25
    assert seen["lrs"] == {name: pytest.approx(0.1 * child.optim.lr) for name in seen["lrs"]}
    assert [r["stage"] for r in result.history] == ["finetune"] * child.finetune.epochs
    # stored: asking again (the parent or the fine-tune) trains nothing
    run(parent, seed=0, store=store, progress=False)
    assert run(child, seed=0, store=store, progress=False).cached
    assert counts == {config_hash(parent): 1, config_hash(child): 1}
    # the fine-tune's final model: dmllab evaluate / export rebuild it from the stored config
    stored_cfg = json.loads((store.run_dir(child, 0) / "config.json").read_text())
    from dmllab.training import ExperimentConfig
    from dmllab.training.config import complete

    assert ExperimentConfig.from_dict(stored_cfg) == complete(child.replace("run.seed", 0))  # stored complete
    model = export.load_model(child, store.checkpoint_dir(child, 0) / "final.pt")
    emb, labels, _ = export.embed_split(model, child, child.data.test_split)
    assert emb.shape == (len(labels), child.model.embedding_dim) and torch.isfinite(emb).all()
    # a stored parent whose final.pt is gone is trained again (with a warning) to recover the weights
    (store.checkpoint_dir(parent, 0) / "final.pt").unlink()
    other = child.replace("finetune.epochs", 2)
    with pytest.warns(RuntimeWarning, match="final model"):
        run(other, seed=0, store=store, progress=False)
    assert counts[config_hash(parent)] == 2


def test_heated_learned_alpha_fine_tune_heats_the_learned_value(tmp_path, monkeypatch):
    """Heated-up Table 5: "For learnable alpha, the alpha values are reduced to 1/4 of the final alpha values"
    (Appendix E): the fine-tune of the learned-alpha BN run uses the parent's learned alpha x 1/4, frozen."""
    from dmllab.training.config import parent_config
    from dmllab.training.store import RunStore, run

    store = RunStore(tmp_path / "runs")
    child = presets.get("heated_softmax:HBN", "synthetic", "smoke", alpha=4.0)
    child = child.replace("loss.learn_alpha", True)
    parent = parent_config(child)
    assert parent.loss.get("learn_alpha") is True
    run(child, seed=0, store=store, progress=False)
    learned = torch.load(store.checkpoint_dir(parent, 0) / "final.pt", weights_only=True)["loss"]
    heated = torch.load(store.checkpoint_dir(child, 0) / "final.pt", weights_only=True)["loss"]
    assert float(learned["alpha_param"]) != 4.0  # the parent learned it
    assert torch.equal(heated["alpha_param"], learned["alpha_param"])  # frozen in the fine-tune
    assert float(heated["heat_factor"]) == 0.25  # the effective alpha: learned x 1/4


_PARENT_WORKER = """
import os, sys
from dmllab.training import presets, store as store_mod
from dmllab.training.config import config_hash, parent_config
real = store_mod.run_protocol
def logged(cfg, **kw):
    with open(os.environ["TRAIN_LOG"], "a") as fh:
        fh.write(config_hash(cfg) + "\\n")
    return real(cfg, **kw)
store_mod.run_protocol = logged
parent = parent_config(presets.get("heated_softmax:HLN", "synthetic", "smoke"))
store_mod.run(parent, seed=0, store=store_mod.RunStore(sys.argv[1]), progress=False)
"""


@pytest.mark.slow
def test_parallel_workers_train_a_shared_parent_once(tmp_path, monkeypatch):
    """A study trains runs in parallel worker processes: a worker that trains a fine-tune while another trains
    its parent waits on the parent's lock and then reuses the parent (trained once, by one of them). Here a
    second process trains the parent while this one asks for the fine-tune."""
    from dmllab.training import store as store_mod
    from dmllab.training.config import config_hash, parent_config

    log = tmp_path / "trained.log"
    env = dict(os.environ, TRAIN_LOG=str(log))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    runs = tmp_path / "runs"
    real = store_mod.run_protocol

    def logged(cfg, **kw):
        with log.open("a") as fh:
            fh.write(config_hash(cfg) + "\n")
        return real(cfg, **kw)

    monkeypatch.setattr(store_mod, "run_protocol", logged)
    child = presets.get("heated_softmax:HLN", "synthetic", "smoke")
    worker = subprocess.Popen(
        [sys.executable, "-c", _PARENT_WORKER, str(runs)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        store_mod.run(child, seed=0, store=store_mod.RunStore(runs), progress=False)
    finally:
        _, err = worker.communicate(timeout=600)
    assert worker.returncode == 0, err.decode()[-2000:]
    assert sorted(log.read_text().split()) == sorted([config_hash(parent_config(child)), config_hash(child)])
