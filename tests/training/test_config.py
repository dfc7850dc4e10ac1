from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dmllab.training import ExperimentConfig, apply_overrides, config_hash, presets, valid_keys


def test_hash_is_stable_across_processes():
    cfg = presets.get("proxynca++", "cub", "paper")
    code = (
        "from dmllab.training import presets, config_hash;"
        "print(config_hash(presets.get('proxynca++', 'cub', 'paper')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == config_hash(cfg)


def test_hash_ignores_result_neutral_fields_only():
    cfg = presets.get("proxynca++", "cub", "paper")
    h = config_hash(cfg)
    assert (
        config_hash(apply_overrides(cfg, ["data.root=/somewhere/else", "data.num_workers=1", "run.seed=3"]))
        == h
    )
    assert config_hash(apply_overrides(cfg, ["optim.lr_proxies=40"])) != h
    assert config_hash(apply_overrides(cfg, ["run.device=cpu"])) != h
    assert config_hash(apply_overrides(cfg, ["loss.temperature=0.05"])) != h


def test_overrides_coerce_types():
    cfg = presets.get("proxynca++", "cub", "paper")
    new = apply_overrides(
        cfg,
        [
            "loss.temperature=0.05",
            "optim.lr_proxies=400",
            "data.sampler=random",
            "run.ks=1,2,4",
            "run.two_stage=false",
            "model.pooling=kmax",
            "model.pooling.k=3",
            "loss.prob=false",
            "schedule.scheduler=multistep",
            "schedule.milestones=3,7",
        ],
    )
    assert dict(new.loss.kwargs) == {"temperature": 0.05, "prob": False}
    assert new.optim.lr_proxies == 400.0 and isinstance(new.optim.lr_proxies, float)
    assert new.data.per_class is None and new.data.sampler.name == "random"
    assert new.run.ks == (1, 2, 4) and new.run.two_stage is False
    assert new.model.pooling.kw == {"k": 3} and isinstance(new.model.pooling.get("k"), int)
    assert new.schedule.milestones == (3, 7)
    assert (
        cfg.optim.lr_proxies == 400.0
        and cfg.model.pooling.name == "max"
        and dict(cfg.loss.kwargs)["temperature"] == pytest.approx(1 / 9)
    )


@pytest.mark.parametrize(
    "item, match",
    [
        ("loss.tempx=3", r"loss 'proxynca' takes no keyword 'tempx' \(loss.tempx\); valid: .*temperature"),
        ("nosuch.lr=3", "unknown config key 'nosuch.lr'; valid keys: data.batch_size.*optim.lr,"),
        ("optim.lr=fast", "cannot parse"),
        ("run.two_stage=maybe", "bool"),
        ("optim.name=lbfgs", "valid: adam, adamw, sgd, rmsprop"),
        ("optim.lr", "key=value"),
    ],
)
def test_bad_overrides_are_rejected(item, match):
    with pytest.raises(ValueError, match=match):
        apply_overrides(presets.get("proxynca++", "cub", "paper"), [item])


def test_valid_keys_include_loss_constructor_keywords():
    keys = valid_keys(presets.get("proxy_anchor", "cub", "paper"))
    assert {"loss.alpha", "loss.delta", "optim.lr", "schedule.patience"} <= set(keys)


def test_dict_roundtrip():
    cfg = presets.get("proxy_synthesis", "cars", "paper", base="proxynca++")
    d = json.loads(json.dumps(cfg.to_dict()))
    back = ExperimentConfig.from_dict(d)
    assert back == cfg and config_hash(back) == config_hash(cfg)
    d["optim"]["typo"] = 1
    with pytest.raises(ValueError, match="typo"):
        ExperimentConfig.from_dict(d)


def test_nmi_average_is_an_option_kept_out_of_the_key_at_its_default():
    """ProxyNCA++ code (geometric) vs paper text (arithmetic): run.nmi_average, honoured by the trainer."""
    import torch

    from dmllab.metrics import evaluate
    from dmllab.training import apply_overrides, presets
    from dmllab.training.config import config_hash
    from dmllab.training.evaluation import evaluate_split

    cfg = presets.get("proxynca++", "synthetic", "smoke")
    assert cfg.run.nmi_average == "geometric"
    arith = apply_overrides(cfg, ["run.nmi_average=arithmetic"])
    assert config_hash(arith) != config_hash(cfg)
    assert config_hash(cfg) == config_hash(apply_overrides(cfg, ["run.nmi_average=geometric"]))
    with pytest.raises(ValueError, match="invalid value 'harmonic' for run.nmi_average"):
        apply_overrides(cfg, ["run.nmi_average=harmonic"])
    emb, lab = torch.randn(60, 8), torch.arange(60) % 6
    got = {}
    for c in (cfg, arith, arith.replace("run.nmi_l2", True)):
        # the trainer's validation and test path (Trainer.evaluate -> evaluate_split of cfg.run)
        got[c] = evaluate_split(c.run, lambda split: (emb, lab), "val", metrics=("nmi",), ks=(1,))["NMI"]
    want = {
        a: evaluate(emb, lab, metrics=("nmi",), nmi_average=a)["NMI"] for a in ("geometric", "arithmetic")
    }
    assert want["geometric"] != pytest.approx(want["arithmetic"])
    assert got[cfg] == pytest.approx(want["geometric"]) and got[arith] == pytest.approx(want["arithmetic"])
    l2 = evaluate(torch.nn.functional.normalize(emb, dim=1), lab, metrics=("nmi",), nmi_average="arithmetic")
    assert got[arith.replace("run.nmi_l2", True)] == pytest.approx(l2["NMI"])
