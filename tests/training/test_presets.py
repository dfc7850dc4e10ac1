from __future__ import annotations

import pytest

from dmllab.spec import Spec
from dmllab.training import presets
from dmllab.training.config import registry_of, spec_paths


@pytest.mark.parametrize("method", presets.list_methods())
def test_every_method_dataset_profile_builds(method):
    for dataset in presets.list_datasets():
        for profile in presets.list_profiles():
            cfg = presets.get(method, dataset, profile)
            assert cfg.dataset == dataset and cfg.profile == profile
            assert presets.describe(cfg)
            # every component's keywords (the loss and what it wraps, pooling, sampler, dataset, backbone,
            # callbacks) must be accepted by its registered constructor (fails before any training)
            for path, spec in spec_paths(cfg).items():
                accepted = registry_of(path).keywords(spec.name)
                assert set(spec.kw) <= set(accepted) or "**" in accepted, (path, spec)


def test_proxynca_pp_paper_values_table1():
    cub = presets.get("proxynca++", "cub", "paper")
    assert (cub.optim.lr, cub.optim.lr_proxies, cub.optim.eps) == (4e-3, 4e2, 1.0)
    assert (cub.data.batch_size, cub.data.per_class) == (32, 4)
    assert cub.model.backbone == Spec("resnet50") and cub.model.embedding_dim == 2048
    assert cub.model.pooling == Spec("max") and cub.model.norm == "layernorm"
    assert cub.loss.name == "proxynca" and cub.loss.wraps is None
    assert dict(cub.loss.kwargs) == {"temperature": pytest.approx(1 / 9), "prob": True}
    assert cub.schedule.warmup_epochs == 5 and cub.schedule.patience == 4 and cub.schedule.epochs == 40
    assert cub.optim.grad_clip_value == 10.0 and not cub.optim.clip_proxies and cub.run.two_stage
    assert not cub.model.freeze_bn and cub.optim.weight_decay == 0.0 and cub.optim.lr_embedding is None
    assert (
        cub.schedule.scheduler == "plateau" and cub.schedule.factor == 0.1 and cub.run.distance == "euclidean"
    )
    sop = presets.get("proxynca++", "sop", "paper")
    assert (sop.optim.lr, sop.optim.lr_proxies, sop.data.batch_size, sop.data.per_class) == (
        2.4e-2,
        2.4e2,
        192,
        3,
    )
    inshop = presets.get("proxynca++", "inshop", "paper")
    assert inshop.optim.lr_proxies == 2.4e3 and not inshop.run.two_stage
    assert inshop.data.train_split == "trainval" and inshop.schedule.scheduler == "none"
    assert inshop.data.query_split == "query" and inshop.run.ks == (1, 10, 20, 30, 40)


def test_proxynca_toggles():
    base = presets.get("proxynca", "cub", "paper")
    assert dict(base.loss.kwargs) == {"temperature": 1.0, "prob": False}
    assert base.data.per_class is None and base.data.sampler == Spec("random")
    assert base.model.pooling == Spec("avg") and base.optim.lr_proxies is None
    no_fast = presets.get("proxynca++", "cub", "paper", fast=False)
    assert no_fast.optim.lr_proxies is None
    kmax = presets.get("proxynca++", "cub", "paper", pooling="kmax", k=4)
    assert kmax.model.pooling == Spec("kmax", {"k": 4})
    with pytest.raises(ValueError, match="valid options"):
        presets.get("proxynca++", "cub", "paper", fasst=True)


def test_heated_variants_and_shorthand():
    hbn = presets.get("heated_softmax:HBN", "cub", "paper")
    assert hbn == presets.get("heated_softmax", "cub", "paper", variant="HBN")
    # the release's in-run heating: the heating callback from schedule epoch 62, alpha x 1/4, lr x 0.1
    assert hbn.model.norm == "batchnorm" and hbn.callbacks == (
        Spec("heating", {"epoch": 62, "alpha_factor": 0.25, "lr_factor": 0.1}),
    )
    assert hbn.model.embedding_dim == 64 and hbn.finetune.epochs == 0
    quick = presets.get("heated_softmax:HBN", "synthetic", "quick")  # a fine-tune of BN
    assert (quick.finetune.epochs, quick.finetune.alpha_factor, quick.finetune.lr_factor) == (2, 0.25, 0.1)
    assert quick.finetune.parent_method == "heated_softmax:BN" and quick.callback("heating") is None
    ln = presets.get("heated_softmax:LN", "cub", "paper")
    assert ln.model.l2_normalize and ln.callback("heating") is None and ln.finetune.epochs == 0
    assert presets.get("heated_softmax:SM", "cub", "paper").loss.name == "softmax"
    with pytest.raises(ValueError, match="variant"):
        presets.get("heated_softmax:XX", "cub", "paper")


def test_proxy_anchor_and_synthesis_paper_setup():
    pa = presets.get("proxy_anchor", "cub", "paper")
    assert pa.optim.name == "adamw" and pa.optim.weight_decay == 1e-4
    assert pa.optim.lr_proxies == pytest.approx(100 * pa.optim.lr) and pa.model.freeze_bn
    assert pa.model.pooling == Spec("avg+max") and pa.model.l2_normalize and pa.model.head_init == "kaiming"
    assert not presets.get("proxy_anchor", "sop", "paper").model.freeze_bn
    # clip by value 10: model parameters and, in the PA code, the proxies too (ProxyNCA++: model only)
    assert pa.optim.grad_clip_value == 10.0 and pa.optim.clip_proxies
    assert presets.get("proxy_synthesis:proxy_anchor", "cub", "paper").optim.clip_proxies
    ps = presets.get("proxy_synthesis", "cars", "paper")
    assert ps.loss.name == "proxy_synthesis" and ps.loss.wraps.name == "normsoftmax" and ps.optim.eps == 1e-2
    assert ps.loss.wraps.wraps is None
    # the released main.py lowers the lr before (1-based) epoch 50 runs: milestone 49 (see test_ps_lr_decay_...)
    assert ps.schedule.milestones == (49,) and ps.data.batch_size == 128


def test_unknown_names_list_valid_ones():
    with pytest.raises(KeyError, match="proxynca\\+\\+"):
        presets.get("proxyncaa", "cub", "paper")
    with pytest.raises(KeyError, match="cub"):
        presets.get("proxynca++", "cubb", "paper")


@pytest.mark.parametrize("profile", ["paper", "quick"])
def test_evaluation_distance_per_method(profile):
    """ProxyNCA++ evaluates Euclidean on raw embeddings; Proxy Anchor and Proxy Synthesis by cosine; the
    Heated-up paper L2-normalises every feature at test time (Sec. 5.3), SM included."""
    assert presets.get("proxynca++", "cub", profile).run.distance == "euclidean"
    assert presets.get("proxy_anchor", "cub", profile).run.distance == "cosine"
    for base in ("normsoftmax", "proxynca", "proxy_anchor", "arcface"):
        assert presets.get(f"proxy_synthesis:{base}", "cars", profile).run.distance == "cosine", base
    for variant in presets.HEATED_VARIANTS:
        assert presets.get(f"heated_softmax:{variant}", "cub", profile).run.distance == "cosine", variant


@pytest.mark.parametrize("method", ["proxynca++", "proxynca", "normsoftmax"])
def test_proxynca_code_base_paper_presets_follow_the_authors_code(method):
    """ProxyNCA++ code base, paper profile: the code's monitor 2R/(1+R), fresh Adam after warm-up, stage-2 lag 1;
    quick/smoke keep the paper text's choices; other methods' paper presets are not affected."""
    for dataset in ("cub", "cars", "sop"):
        cfg = presets.get(method, dataset, "paper")
        assert cfg.schedule.monitor == "hmean_r1" and cfg.schedule.stage2_drop_lag == 1
        assert cfg.optim.fresh_after_warmup
    for profile in ("quick", "smoke"):
        cfg = presets.get(method, "cub", profile)
        assert cfg.schedule.monitor == "R@1" and cfg.schedule.stage2_drop_lag == 0
        assert not cfg.optim.fresh_after_warmup
    for other in ("proxy_anchor", "proxy_synthesis", "heated_softmax:HBN", "margin"):
        cfg = presets.get(other, "cub", "paper")
        assert cfg.schedule.monitor == "R@1" and not cfg.optim.fresh_after_warmup
        assert cfg.schedule.stage2_drop_lag == 0


# ------------------------------------------------------------------------------- layout, profiles, overlays
def test_one_profiles_tuple_and_discovered_families():
    import dmllab.profiles
    from dmllab.training.presets import methods as methods_mod

    assert presets.PROFILES is dmllab.profiles.PROFILES
    assert presets.list_profiles() == ["smoke", "quick", "paper"]
    assert presets.list_methods() == sorted(presets.METHODS) and len(presets.METHODS) > 0
    for name in presets.list_methods():
        method = presets.METHODS.get(name)
        assert isinstance(method, methods_mod.Method)
        # registered where its build function is defined (``@method(...)``), in a family module of the package
        assert method.build.__module__.startswith("dmllab.training.presets."), (name, method.build.__module__)
        assert method.name == name
        assert presets.method_options(name) == method.options
    assert presets.method_options("heated_softmax:HBN") == sorted(
        ["variant", "alpha", "epochs", "heating", "heat_epochs", "heat_epoch", "two_stage"]
    )


def test_no_method_module_branches_on_a_dataset_name():
    """Dataset quirks are DatasetSpec fields (style: no ``if dataset == ...``)."""
    import inspect
    import re

    from dmllab.training.presets import heated, pair, proxy_anchor, proxy_synthesis, proxynca

    # a comparison with the dataset spec's name, a dataset name or the profile (a component spec's name,
    # e.g. the loss wrapper "proxy_synthesis", is not a dataset)
    names = "|".join(re.escape(n) for n in presets.list_datasets())
    branch = rf"(spec|dataset)\.name\s*[=!]=|\bdataset\s*[=!]=|[=!]=\s*[\"']({names})[\"']|profile\s*[=!]="
    assert re.search(branch, 'if spec.name == "cub":') and re.search(branch, 'x = d if cfg.dataset != "sop"')
    for module in (proxynca, proxy_anchor, heated, proxy_synthesis, pair):
        source = inspect.getsource(module)
        assert not re.search(branch, source), module.__name__
    assert presets.DATASETS["sop"].heated_optimizer == "adam" and presets.DATASETS["sop"].heated_lr == 1e-2
    assert presets.DATASETS["cub"].heated_optimizer == "sgd" and presets.DATASETS["cub"].heated_lr == 4e-3


def test_quick_and_smoke_profiles_are_overlays_of_the_paper_config():
    quick = presets.get(
        "proxynca++", "synthetic", "quick", tuned=False
    )  # the overlays, before the tuned recipe
    m, d, s = quick.model, quick.data, quick.schedule
    assert (m.backbone, m.pretrained, m.embedding_dim) == (Spec("smallcnn", {"width": 16}), True, 128)
    assert (d.transform, d.dataset, d.batch_size, d.sampler) == (
        "quick",
        Spec("synthetic", {"image_size": 64}),
        32,
        Spec("class_balanced", {"per_class": 4}),
    )
    assert (s.warmup_epochs, s.epochs, s.patience) == (1, 8, 2) and quick.run.device == "cpu"
    # the method's own quick overlay: small-CNN lrs; the paper's loss, head and protocol are kept
    paper = presets.get("proxynca++", "synthetic", "paper")
    assert (quick.optim.lr, quick.optim.lr_embedding, quick.optim.lr_proxies) == (1.0, paper.optim.lr, 4e2)
    assert quick.loss == paper.loss and (m.pooling, m.norm) == (paper.model.pooling, paper.model.norm)
    # the quick recipe: one stage on trainval at a constant lr (stage 1 never plateaus and ends at its best
    # epoch on quick), the first 4 SmallCNN blocks frozen and cached for 4 views, images in memory
    assert (
        not quick.run.two_stage
        and quick.data.train_split == "trainval"
        and quick.schedule.scheduler == "none"
    )
    assert (m.frozen_blocks, d.feature_views, d.in_memory) == (4, 4, True)
    # image files on disk (a real dataset at the quick scale): the per-image loader, full fine-tuning
    cub = presets.get("proxynca++", "cub", "quick")
    assert (cub.model.frozen_blocks, cub.data.feature_views, cub.data.in_memory) == (0, 0, False)
    assert paper.run.two_stage and paper.schedule.scheduler == "plateau"
    smoke = presets.get("proxynca++", "synthetic", "smoke")
    assert (
        smoke.model.pretrained,
        smoke.model.embedding_dim,
        smoke.data.batch_size,
        smoke.schedule.epochs,
    ) == (
        False,
        16,
        16,
        2,
    )
    # random-batch methods stay random at every scale
    for profile in presets.list_profiles():
        assert presets.get("proxy_anchor", "synthetic", profile).data.per_class is None


def test_compress_schedule_keeps_every_event_inside_the_run():
    from dmllab.training.config import ExperimentConfig, ScheduleConfig
    from dmllab.training.presets.profiles import compress_heating, compress_schedule

    paper = ScheduleConfig(epochs=130, warmup_epochs=0, scheduler="multistep", milestones=(0, 49, 129))
    q = compress_schedule(paper, epochs=8, warmup=1, patience=2)
    assert q.milestones == (0, 3, 7) and q.warmup_epochs == 0 and q.epochs == 8
    fixed = ScheduleConfig(epochs=50, scheduler="none")
    assert compress_schedule(fixed, epochs=8, warmup=1, patience=2).warmup_epochs == 1
    # the heating callback's epoch moves to the same fraction of training: (40 - 1) * 8 / 50 + 1 -> 7
    heating = Spec("heating", {"epoch": 40, "alpha_factor": 0.25, "lr_factor": 0.1})
    cfg = ExperimentConfig(schedule=fixed, callbacks=(heating,))
    heated = compress_heating(cfg, epochs=8)
    assert heated.callbacks == (heating.with_kw(epoch=7),)  # factors kept
    assert compress_heating(cfg, epochs=2).callback("heating").get("epoch") == 2
    assert compress_heating(ExperimentConfig(schedule=fixed), epochs=8).callbacks == ()


# ------------------------------------ fixed schedules (Proxy Anchor, Heated-up, Proxy Synthesis) and checks
FIXED = ["proxy_anchor", "heated_softmax:BN", "proxy_synthesis", "proxy_synthesis:arcface"]


@pytest.mark.parametrize("method", FIXED)
@pytest.mark.parametrize("profile", ["paper", "quick", "smoke"])
def test_pa_heated_ps_train_a_fixed_schedule_two_stage_is_an_option(method, profile):
    cfg = presets.get(method, "cub", profile)
    assert not cfg.run.two_stage and cfg.data.train_split == "trainval"
    two = presets.get(method, "cub", profile, two_stage=True)
    assert two.run.two_stage and two.data.train_split == "train"
    with pytest.raises(ValueError, match="two_stage=True needs a validation split"):
        presets.get(method, "inshop", profile, two_stage=True)


def test_protocol_of_a_fixed_schedule_has_no_validation_and_runs_every_epoch():
    from dmllab.training.protocol import stage_plans

    (plan,) = stage_plans(presets.get("proxy_anchor", "cub", "paper"))
    assert (plan.name, plan.train_split, plan.eval_split) == ("single", "trainval", None)
    assert (plan.warmup_epochs, plan.epochs) == (5, 55)


@pytest.mark.parametrize("variant", ["HLN", "HBN"])
def test_a_heated_run_that_would_not_heat_is_a_config_error(variant):
    from dmllab.training import apply_overrides
    from dmllab.training.protocol import stage_plans

    def in_run(**kw):
        return presets.get(f"heated_softmax:{variant}", "cars", "paper", heating="in_run", **kw)

    # the release's loop: 80 epochs, alpha and lr lowered after 0-based epoch 80 - 20 = 60 -> schedule epoch 62
    cfg = in_run()
    assert (cfg.schedule.epochs, cfg.callback("heating").get("epoch"), cfg.run.two_stage) == (80, 62, False)
    assert cfg.finetune.epochs == 0
    # 10 heated epochs of 40: the release's 1 less, 9
    assert in_run(epochs=40).callback("heating").get("epoch") == 32
    with pytest.raises(ValueError, match="callbacks.heating.epoch=62 is outside 1..schedule.epochs=60"):
        in_run(epochs=60, heat_epoch=62)
    with pytest.raises(ValueError, match="callbacks.heating.epoch=81 is outside"):
        in_run(heat_epoch=81)
    with pytest.raises(ValueError, match="fixed schedule"):
        in_run(two_stage=True)
    # overrides after get() are checked when the protocol plans the run, before any training
    for override in (["schedule.epochs=60"], ["run.two_stage=true", "data.train_split=train"]):
        with pytest.raises(ValueError, match="heat"):
            stage_plans(apply_overrides(cfg, override))
    for profile in ("quick", "smoke"):
        small = presets.get(f"heated_softmax:{variant}", "synthetic", profile, heating="in_run")
        assert 2 <= small.callback("heating").get("epoch") <= small.schedule.epochs
    # a fine-tune heats from its first epoch: no heating epoch; options of one mode are errors in the other
    with pytest.raises(ValueError, match="heat_epoch"):
        presets.get(f"heated_softmax:{variant}", "cars", "paper", heating="finetune", heat_epoch=60)
    with pytest.raises(ValueError, match="heat_epoch"):
        presets.get(f"heated_softmax:{variant}", "synthetic", "quick", heat_epoch=6)
    with pytest.raises(ValueError, match="heating"):
        presets.get(f"heated_softmax:{variant}", "cars", "paper", heating="gently")
    # variants that never heat may use the two-stage protocol, and take no heating option
    assert presets.get("heated_softmax:LN", "cars", "paper", two_stage=True).run.two_stage
    for option in ({"heat_epoch": 10}, {"heat_epochs": 5}, {"heating": "in_run"}):
        with pytest.raises(ValueError, match="never heats"):
            presets.get("heated_softmax:LN", "cars", "paper", **option)


def test_a_heated_smoke_run_really_heats(monkeypatch):
    """The trainer's epochs of the in-run smoke preset (batches skipped): the last epoch runs with alpha 16 / 4
    and lr x 0.1."""
    from dmllab.training import Trainer
    from dmllab.training.protocol import stage_plans

    seen = []

    class Alpha:
        def on_epoch_end(self, trainer, epoch, row):
            seen.append((trainer.loss.alpha, row["lr_backbone"]))

    cfg = presets.get("heated_softmax:HLN", "synthetic", "smoke", heating="in_run")
    monkeypatch.setattr(Trainer, "train_epoch", lambda self, plan, epoch: 0.0)
    trainer = Trainer(cfg, hooks=(Alpha(),), progress=False)
    trainer.setup(stage_plans(cfg)[0])
    trainer.fit()
    (alpha1, lr1), (alpha2, lr2) = seen
    assert (alpha1, alpha2) == (16.0, 4.0) and lr2 == pytest.approx(0.1 * lr1)


def test_an_lr_drop_after_the_last_epoch_is_a_config_error():
    from dmllab.training import apply_overrides, schedules
    from dmllab.training.protocol import stage_plans

    with pytest.raises(ValueError, match="milestones"):
        presets.get("proxy_synthesis", "cars", "paper", epochs=40)  # the code's decay at epoch 50
    with pytest.raises(ValueError, match="milestones"):
        stage_plans(apply_overrides(presets.get("proxy_anchor", "cub", "paper"), ["schedule.epochs=30"]))
    with pytest.raises(ValueError, match="milestones"):
        schedules.check_schedule(epochs=10, scheduler="multistep", milestones=(3, 10))
    schedules.check_schedule(epochs=10, scheduler="multistep", milestones=(0, 9))  # both inside the run


# ------------------------------------------------------------------ Proxy Anchor: released ResNet-50 recipe
def _trainer_lrs(cfg):
    """Per-epoch lrs (backbone, proxies) that the trainer sets for ``cfg``'s schedule (smoke-size model)."""
    from dmllab.training import Trainer
    from dmllab.training.protocol import stage_plans

    small = presets.get("proxy_anchor", "synthetic", "smoke")
    cfg = dataclasses_replace(small, schedule=cfg.schedule)
    trainer = Trainer(cfg, progress=False)
    (plan,) = stage_plans(cfg)
    trainer.setup(plan)
    out = []
    for epoch in range(1, plan.total_epochs + 1):
        lrs = trainer.apply_schedule(plan, epoch)
        out += [lrs["backbone"] / cfg.optim.lr, lrs["proxies"] / cfg.optim.lr_proxies]
    return out


def dataclasses_replace(cfg, **kw):
    import dataclasses

    return dataclasses.replace(cfg, **kw)


@pytest.mark.parametrize(
    ("dataset", "step", "gamma", "lr"),
    [("cub", 5, 0.5, 1e-4), ("cars", 10, 0.5, 1e-4), ("sop", 20, 0.25, 6e-4), ("inshop", 20, 0.25, 6e-4)],
)
def test_proxy_anchor_paper_follows_the_released_resnet50_recipe(dataset, step, gamma, lr):
    """README ResNet-50 commands / train.py: batch 120, warm 5, StepLR(step, gamma) stepped every epoch from the
    first warm-up epoch, 60 epochs: the trainer's per-epoch lrs equal the released loop's."""
    cfg = presets.get("proxy_anchor", dataset, "paper")
    assert (cfg.data.batch_size, cfg.data.per_class, cfg.schedule.warmup_epochs) == (120, None, 5)
    assert (cfg.optim.lr, cfg.optim.lr_proxies, cfg.optim.clip_proxies) == (lr, pytest.approx(100 * lr), True)
    for total in (60, 40):  # train.py default; the paper's text for CUB/Cars (option epochs=40)
        cfg = presets.get("proxy_anchor", dataset, "paper", epochs=total)
        # train.py: epoch e (0-based) runs at gamma ** (e // step); the trunk is frozen while e < warm
        released = [
            m for e in range(total) for m in (0.0 if e < 5 else gamma ** (e // step), gamma ** (e // step))
        ]
        assert _trainer_lrs(cfg) == pytest.approx(released)


# ------------------------------------------------------------------------------ Heated-up Sec. 5.1 / 5.2
def test_heated_paper_transform_nmi_and_optimiser():
    for dataset, nmi in (("cub", True), ("cars", True), ("sop", True), ("inshop", False)):
        cfg = presets.get("heated_softmax:HBN", dataset, "paper")
        assert cfg.data.transform == "heated" and cfg.run.nmi_l2 and cfg.run.distance == "cosine"
        assert ("nmi" in cfg.run.metrics) is nmi, dataset  # Table 1 prints NMI for SOP, Table 2 none
        assert (cfg.data.batch_size, cfg.model.backbone, cfg.model.embedding_dim) == (
            32,
            Spec("googlenet"),
            64,
        )
    sop = presets.get("heated_softmax:HBN", "sop", "paper").optim
    cub = presets.get("heated_softmax:HBN", "cub", "paper").optim
    assert (sop.name, sop.lr, cub.name, cub.lr, cub.momentum) == ("adam", 1e-2, "sgd", 4e-3, 0.9)
    assert not presets.get("proxynca++", "sop", "paper").run.nmi_l2


# ---------------------------------------------------------------------------- Proxy Synthesis lr decay
def _released_ps_multipliers(epochs, decay_step, decay_stop):
    """navervision/proxy-synthesis main.py: ``adjust_learning_rate`` at the start of (1-based) epoch e:
    lr *= 0.1 if e % decay_step == 0 and e <= decay_stop."""
    m, out = 1.0, []
    for e in range(1, epochs + 1):
        if e % decay_step == 0 and e <= decay_stop:
            m *= 0.1
        out.append(m)
    return out


@pytest.mark.parametrize("dataset", ["cub", "cars", "sop", "inshop"])
def test_ps_lr_decay_follows_the_released_code_and_the_paper_text_is_an_option(dataset):
    from dmllab.training import schedules

    def multipliers(s):
        return [
            schedules.lr_multiplier(e, scheduler=s.scheduler, milestones=s.milestones, factor=s.factor)
            for e in range(1, s.epochs + 1)
        ]

    code = presets.get("proxy_synthesis", dataset, "paper").schedule
    assert (code.epochs, code.warmup_epochs) == (130, 0)  # README: --epochs=130
    assert multipliers(code) == pytest.approx(_released_ps_multipliers(130, 50, 50))
    text = {"cub": 20, "cars": 50, "sop": 20, "inshop": 60}[dataset]  # supplement, Conventional Evaluation
    paper = presets.get("proxy_synthesis", dataset, "paper", lr_decay="paper").schedule
    assert multipliers(paper) == pytest.approx(_released_ps_multipliers(130, text, text))
    long = presets.get("proxy_synthesis", dataset, "paper", epochs=150).schedule  # Fig. D: Cars to epoch 150
    assert long.epochs == 150 and long.milestones == code.milestones
    with pytest.raises(ValueError, match="lr_decay"):
        presets.get("proxy_synthesis", dataset, "paper", lr_decay="later")
    quick = presets.get("proxy_synthesis", dataset, "quick").schedule
    assert quick.milestones == (3,) and quick.epochs == 8  # epoch 50 of 130 -> 3 of 8


def test_nmi_l2_clusters_the_l2_normalised_embeddings():
    """run.nmi_l2 (Heated-up Sec. 5.2): NMI on L2-normalised features; retrieval metrics unchanged."""
    import torch

    from dmllab.metrics import evaluate
    from dmllab.training.evaluation import compute_metrics

    g = torch.Generator().manual_seed(0)
    labels = torch.arange(4).repeat_interleave(10)
    directions = torch.nn.functional.normalize(torch.randn(4, 8, generator=g), dim=1)
    # same direction per class, norms spread over two orders of magnitude: raw KMeans splits by norm
    emb = (directions[labels] + 0.05 * torch.randn(40, 8, generator=g)) * torch.logspace(0, 2, 40)[:, None]
    kw = dict(metrics=("recall", "nmi"), ks=(1, 2), distance="cosine")
    cfg = presets.get("heated_softmax:HBN", "synthetic", "smoke")
    assert cfg.run.nmi_l2
    # the trainer's evaluation (Trainer.evaluate -> evaluation.evaluate_split -> compute_metrics of cfg.run)
    l2 = compute_metrics(cfg.run, emb, labels, kw)
    raw = compute_metrics(cfg.replace("run.nmi_l2", False).run, emb, labels, kw)
    expected = evaluate(torch.nn.functional.normalize(emb, dim=1), labels, metrics=("nmi",))["NMI"]
    assert l2["NMI"] == pytest.approx(expected) and raw["NMI"] == pytest.approx(
        evaluate(emb, labels, **kw)["NMI"]
    )
    assert l2["NMI"] > raw["NMI"] and l2["R@1"] == raw["R@1"]


@pytest.mark.parametrize("base", ["softtriple", "virtual_softmax"])
def test_ps_softtriple_and_virtual_softmax_bases_use_the_released_setup(base):
    """SoftTriple (PS Tables 4, 6) and Virtual Softmax (PS Table 5) are proxy_synthesis bases: the loss with its
    own defaults under the released PS setup (same schedule, optimiser and head as the Norm-softmax base)."""
    cfg = presets.get("proxy_synthesis", "cub", "paper", base=base)
    ref = presets.get("proxy_synthesis", "cub", "paper")
    # Proxy Synthesis (the Norm-softmax base's alpha and mu) over the loss with its own defaults
    assert cfg.loss == Spec("proxy_synthesis", ref.loss.kwargs, wraps=Spec(base))
    assert cfg.method == f"proxy_synthesis:{base}"
    assert presets.get(f"proxy_synthesis:{base}", "cub", "paper") == cfg
    s, o = cfg.schedule, cfg.optim
    assert (s.epochs, s.warmup_epochs, s.scheduler, s.milestones) == (130, 0, "multistep", (49,))
    assert s.factor == 0.1
    assert (o.name, o.lr, o.lr_proxies, o.eps, o.weight_decay) == ("adam", 1e-4, 1e-2, 1e-2, 1e-4)
    assert (cfg.data.batch_size, cfg.data.per_class, cfg.model.embedding_dim) == (128, None, 512)
    for section in ("data", "model", "optim", "schedule", "run"):
        assert getattr(cfg, section) == getattr(ref, section), section


@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_ps_regularizer_option_and_input_mixup_drops_the_feature_cache(profile):
    """PS Table 5's mixups are preset options; input mixup mixes images, so on every profile its config has no
    cached frozen-block features (the quick profile caches them otherwise) and validates."""
    from dmllab.training.config import validate

    ps = "proxy_synthesis"
    plain = presets.get(ps, "synthetic", profile)
    assert plain.loss.name == "proxy_synthesis"  # no mixup wrapper
    assert not {"input_mixup", "manifold_mixup"} & {s.name for s in plain.loss.chain()}
    manifold = presets.get(ps, "synthetic", profile, regularizer="manifold_mixup", mixup_alpha=1.5)
    assert manifold.loss == Spec("manifold_mixup", {"alpha": 1.5}, wraps=plain.loss)
    assert dataclasses_replace(manifold, loss=manifold.loss.wraps) == plain
    default = presets.get(ps, "synthetic", profile, regularizer="manifold_mixup").loss
    assert default == Spec("manifold_mixup", {"alpha": 0.5}, wraps=plain.loss)  # Table 5's mixup alpha
    inp = presets.get(ps, "synthetic", profile, regularizer="input_mixup")
    assert inp.loss == Spec("input_mixup", {"alpha": 0.5}, wraps=plain.loss) and inp.data.feature_views == 0
    back = dataclasses_replace(inp, loss=inp.loss.wraps).replace(
        "data.feature_views", plain.data.feature_views
    )
    assert back == plain
    validate(inp)
    with pytest.raises(ValueError, match="regularizer"):
        presets.get(ps, "synthetic", profile, regularizer="cutmix")


def test_heating_is_refused_on_a_loss_without_a_scale_and_heats_the_innermost_loss():
    """Heating multiplies the loss's ``alpha`` scale: a loss without one (ProxyNCA++) is refused when the config is
    checked, naming the loss; under a wrapper, the wrapped loss's scale heats, never the wrapper's own ``alpha``
    (Proxy Synthesis' Beta parameter)."""
    from dmllab.losses import LOSSES
    from dmllab.training import apply_overrides, build
    from dmllab.training.callbacks import Heating
    from dmllab.training.config import ConfigValueError

    cfg = presets.get("proxynca++", "synthetic", "smoke")
    with pytest.raises(
        ConfigValueError, match="callbacks.heating needs a loss with an 'alpha' scale; proxynca has"
    ):
        build.check(apply_overrides(cfg, ["callbacks.heating.epoch=1"]))
    heated = presets.get("heated_softmax", "synthetic", "smoke", heating="in_run")
    assert build.check(heated) is heated
    base = LOSSES.get("heated_softmax")(num_classes=4, embedding_dim=8, alpha=16.0)
    wrapped = LOSSES.get("proxy_synthesis")(base, alpha=0.4)
    assert Heating.target(wrapped) is base
