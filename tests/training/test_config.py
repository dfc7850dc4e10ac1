from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from dmllab.training import ExperimentConfig, apply_overrides, config_hash, presets, valid_keys
from dmllab.training.config import ConfigValueError, validate


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
        ("optim.name=lbfgs", "valid: adam, adamw, rmsprop, sgd"),
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


def test_choice_fields_ask_the_owners_of_their_vocabularies():
    """One home per vocabulary: the config's choice fields read the owners' tuples and the optimiser registry."""
    from dmllab.metrics import METRICS
    from dmllab.metrics.clustering import NMI_AVERAGES
    from dmllab.metrics.evaluator import DISTANCES
    from dmllab.models.heads import NORM_POSITIONS
    from dmllab.profiles import DEVICES
    from dmllab.training import config as C
    from dmllab.training.optimizers import OPTIMIZERS
    from dmllab.training.schedules import MONITORS

    choices = C._choices()
    owners = {
        ("run", "device"): DEVICES,
        ("schedule", "monitor"): MONITORS,
        ("run", "distance"): DISTANCES,
        ("run", "nmi_average"): NMI_AVERAGES,
        ("model", "norm_position"): NORM_POSITIONS,
    }
    assert all(choices[key] is values for key, values in owners.items())
    assert choices[("optim", "name")] == tuple(OPTIMIZERS.names()) == ("adam", "adamw", "rmsprop", "sgd")
    with pytest.raises(
        ConfigValueError, match="run.metrics must be a non-empty list of " + ", ".join(METRICS)
    ):
        validate(
            dataclasses.replace(
                ExperimentConfig(), run=dataclasses.replace(ExperimentConfig().run, metrics=("x",))
            )
        )


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd", "rmsprop"])
def test_every_optimiser_of_the_registry_builds_with_the_section_values(name):
    import torch

    from dmllab.training.config import OptimConfig
    from dmllab.training.optim import build_optimizer

    o = OptimConfig(name=name, lr=0.01, eps=1e-3, momentum=0.5, weight_decay=1e-4)
    opt = build_optimizer([{"params": [torch.nn.Parameter(torch.zeros(2))]}], o)
    expected = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    assert type(opt) is expected.get(name, torch.optim.RMSprop)
    d = opt.defaults
    assert d["lr"] == 0.01 and d["weight_decay"] == 1e-4
    assert d.get("eps", 1e-3) == 1e-3 and d.get("momentum", 0.5) == 0.5
    with pytest.raises(
        ValueError, match="unknown optimiser 'lbfgs'; valid optimiser names: adam, adamw, rmsprop, sgd"
    ):
        build_optimizer([], dataclasses.replace(o, name="lbfgs"))
