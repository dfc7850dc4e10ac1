from __future__ import annotations

import pytest

from dmllab.training import presets
from dmllab.training.config import factory_keywords


@pytest.mark.parametrize("method", presets.list_methods())
def test_every_method_dataset_profile_builds(method):
    for dataset in presets.list_datasets():
        for profile in presets.list_profiles():
            cfg = presets.get(method, dataset, profile)
            assert cfg.dataset == dataset and cfg.profile == profile
            assert presets.describe(cfg)
            # loss keywords must be accepted by the loss constructor (fails before any training)
            accepted = factory_keywords("loss", cfg)
            assert set(dict(cfg.loss.kwargs)) <= set(accepted) or "**" in accepted


def test_proxynca_pp_paper_values_table1():
    cub = presets.get("proxynca++", "cub", "paper")
    assert (cub.optim.lr, cub.optim.lr_proxies, cub.optim.eps) == (4e-3, 4e2, 1.0)
    assert (cub.data.batch_size, cub.data.per_class) == (32, 4)
    assert cub.model.backbone == "resnet50" and cub.model.embedding_dim == 2048
    assert cub.model.pooling == "max" and cub.model.norm == "layernorm"
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
    assert base.data.per_class is None and base.model.pooling == "avg" and base.optim.lr_proxies is None
    no_fast = presets.get("proxynca++", "cub", "paper", fast=False)
    assert no_fast.optim.lr_proxies is None
    kmax = presets.get("proxynca++", "cub", "paper", pooling="kmax", k=4)
    assert (kmax.model.pooling, kmax.model.k) == ("kmax", 4)
    with pytest.raises(ValueError, match="valid options"):
        presets.get("proxynca++", "cub", "paper", fasst=True)


def test_heated_variants_and_shorthand():
    hbn = presets.get("heated_softmax:HBN", "cub", "paper")
    assert hbn == presets.get("heated_softmax", "cub", "paper", variant="HBN")
    assert hbn.model.norm == "batchnorm" and hbn.schedule.heat_epoch is not None
    assert hbn.schedule.heat_alpha_factor == 0.25 and hbn.model.embedding_dim == 64
    ln = presets.get("heated_softmax:LN", "cub", "paper")
    assert ln.model.l2_normalize and ln.schedule.heat_epoch is None
    assert presets.get("heated_softmax:SM", "cub", "paper").loss.name == "softmax"
    with pytest.raises(ValueError, match="variant"):
        presets.get("heated_softmax:XX", "cub", "paper")


def test_proxy_anchor_and_synthesis_paper_setup():
    pa = presets.get("proxy_anchor", "cub", "paper")
    assert pa.optim.name == "adamw" and pa.optim.weight_decay == 1e-4
    assert pa.optim.lr_proxies == pytest.approx(100 * pa.optim.lr) and pa.model.freeze_bn
    assert pa.model.pooling == "avg+max" and pa.model.l2_normalize and pa.model.head_init == "kaiming"
    assert not presets.get("proxy_anchor", "sop", "paper").model.freeze_bn
    # clip by value 10: model parameters and, in the PA code, the proxies too (ProxyNCA++: model only)
    assert pa.optim.grad_clip_value == 10.0 and pa.optim.clip_proxies
    assert presets.get("proxy_synthesis:proxy_anchor", "cub", "paper").optim.clip_proxies
    ps = presets.get("proxy_synthesis", "cars", "paper")
    assert ps.loss.synthesis and ps.loss.name == "normsoftmax" and ps.optim.eps == 1e-2
    assert ps.schedule.milestones == (50,) and ps.data.batch_size == 128


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
    """ProxyNCA++ code base, paper profile: hmean(NMI, R@1) monitor, fresh Adam after warm-up, stage-2 lag 1;
    quick/smoke keep the paper text's choices; other methods' paper presets are not affected."""
    for dataset in ("cub", "cars", "sop"):
        cfg = presets.get(method, dataset, "paper")
        assert cfg.schedule.monitor == "hmean_nmi_r1" and cfg.schedule.stage2_drop_lag == 1
        assert cfg.optim.fresh_after_warmup
    for profile in ("quick", "smoke"):
        cfg = presets.get(method, "cub", profile)
        assert cfg.schedule.monitor == "R@1" and cfg.schedule.stage2_drop_lag == 0
        assert not cfg.optim.fresh_after_warmup
    for other in ("proxy_anchor", "proxy_synthesis", "heated_softmax:HBN", "margin"):
        cfg = presets.get(other, "cub", "paper")
        assert cfg.schedule.monitor == "R@1" and not cfg.optim.fresh_after_warmup
        assert cfg.schedule.stage2_drop_lag == 0
