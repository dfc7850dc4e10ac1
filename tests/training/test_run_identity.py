"""A run's identity is its complete spec: every component keyword with its constructor's default filled in, its
numbers canonical, and on the CPU its torch thread count, which every process that trains applies; a stored run or
trunk made on another thread count is never served under a key that says otherwise."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest
import torch

from dmllab.data import DATASETS
from dmllab.losses import LOSSES
from dmllab.models import BACKBONES
from dmllab.spec import Spec
from dmllab.training import RunStore, presets
from dmllab.training.config import (
    SCHEMA_VERSION,
    ExperimentConfig,
    complete,
    config_hash,
    key_dict,
    run_threads,
)
from dmllab.training.protocol import RunResult

COMPONENTS = """
from dmllab.data.synthetic import SyntheticFineGrained
from dmllab.losses import ProxyNCALoss
from dmllab.models.backbones import build_smallcnn


class TmpLoss(ProxyNCALoss):
    def __init__(self, num_classes, embedding_dim, *, temperature={temperature}, prob=True):
        super().__init__(num_classes, embedding_dim, temperature=temperature, prob=prob)


def tmp_backbone(pretrained=False, weights_path=None, *, width={width}):
    return build_smallcnn(pretrained=pretrained, weights_path=weights_path, width=width)


class TmpSynthetic(SyntheticFineGrained):
    def __init__(self, root=None, split="train", seed=0, image_size=64, num_classes={classes}, transform=None,
                 progress=True):
        super().__init__(root, split, seed, image_size, num_classes, transform=transform, progress=progress)
"""
BASE = {"temperature": 0.5, "width": 16, "classes": 40}


def _load(tmp_path, monkeypatch, **changed):
    """The temporary components module with ``BASE`` defaults, ``changed`` replaced, registered (again)."""
    (tmp_path / "tmp_components.py").write_text(textwrap.dedent(COMPONENTS.format(**{**BASE, **changed})))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("tmp_components", None)
    importlib.invalidate_caches()
    mod = importlib.import_module("tmp_components")
    monkeypatch.setitem(LOSSES._items, "tmp_loss", mod.TmpLoss)
    monkeypatch.setitem(BACKBONES._items, "tmp_backbone", mod.tmp_backbone)
    monkeypatch.setitem(DATASETS._items, "tmp_synthetic", mod.TmpSynthetic)
    return mod


def _configs() -> dict[str, ExperimentConfig]:
    """Configs using none, each and all of the temporary components, and one spelling a default out."""
    base = presets.get("proxynca++", "synthetic", "quick")
    loss = base.replace("loss", Spec("tmp_loss"))
    backbone = base.replace("model.backbone", Spec("tmp_backbone"))
    data = base.replace("data.dataset", Spec("tmp_synthetic"))
    return {
        "none": base,
        "loss": loss,
        "backbone": backbone,
        "data": data,
        "all": loss.replace("model.backbone", Spec("tmp_backbone")).replace(
            "data.dataset", Spec("tmp_synthetic")
        ),
        "loss_spelled": base.replace("loss", Spec("tmp_loss", {"temperature": 0.5})),
    }


@pytest.mark.parametrize(
    ("changed", "rekeyed"),
    [
        ({"temperature": 0.25}, {"loss", "all"}),
        ({"width": 8}, {"backbone", "all"}),
        ({"classes": 20}, {"data", "all"}),
    ],
)
def test_a_changed_default_rekeys_exactly_the_runs_it_changes(tmp_path, monkeypatch, changed, rekeyed):
    _load(tmp_path, monkeypatch)
    before = {name: config_hash(cfg) for name, cfg in _configs().items()}
    assert before["loss"] == before["loss_spelled"]  # two spellings of one configuration share a key
    assert len(set(before.values())) == len(before) - 1
    _load(tmp_path, monkeypatch, **changed)
    after = {name: config_hash(cfg) for name, cfg in _configs().items()}
    assert {name for name in before if before[name] != after[name]} == rekeyed


def test_the_key_holds_every_default_and_canonical_numbers():
    cfg = presets.get("proxynca++", "synthetic", "quick")
    loss = key_dict(cfg)["loss"]["kwargs"]
    assert loss["proxy_init"] == "randn/8" and "proxy_init" not in cfg.loss.kw  # filled in, not dropped
    assert key_dict(cfg)["schema"] == SCHEMA_VERSION == 3
    assert complete(complete(cfg)) == complete(cfg)
    same = [
        (cfg.replace("optim.weight_decay", -0.0), cfg.replace("optim.weight_decay", 0.0)),
        (cfg.replace("optim.lr", 1), cfg.replace("optim.lr", 1.0)),
        (cfg.replace("loss.temperature", 1), cfg.replace("loss.temperature", 1.0)),
    ]
    for a, b in same:
        assert config_hash(a) == config_hash(b)
    assert config_hash(cfg.replace("loss.temperature", 0.5)) != config_hash(
        cfg.replace("loss.temperature", 0.25)
    )
    flag = cfg.replace("model.freeze_bn", True)
    assert json.dumps(key_dict(flag)["model"]["freeze_bn"]) == "true"  # a bool is no number


def test_a_preset_loss_is_keyed_on_its_preset_values():
    """Margin-softmax presets register with their values as defaults: one spelled out hashes alike."""
    cfg = presets.get("proxynca++", "synthetic", "quick").replace("loss", Spec("arcface"))
    assert key_dict(cfg)["loss"]["kwargs"]["scale"] == 23
    assert config_hash(cfg) == config_hash(cfg.replace("loss.m2", 0.1))
    assert config_hash(cfg) != config_hash(cfg.replace("loss.m2", 0.2))


def test_threads_are_in_the_key_on_the_cpu_only():
    cfg = presets.get("proxynca++", "synthetic", "quick")
    assert cfg.run.device == "cpu" and cfg.run.threads == 1
    assert config_hash(cfg) != config_hash(cfg.replace("run.threads", 2))
    gpu = cfg.replace("run.device", "cuda")
    assert config_hash(gpu) == config_hash(gpu.replace("run.threads", 2))
    before = torch.get_num_threads()
    with run_threads(gpu.replace("run.threads", before + 1)):  # not applied: the executor's share stays
        assert torch.get_num_threads() == before
    with run_threads(cfg.replace("run.threads", before + 1)):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _result(cfg: ExperimentConfig, **extra) -> RunResult:
    history = [{"epoch": 1, "loss": 1.0}]
    return RunResult({"R@1": 0.5}, history, 1, [], 1.0, config_hash(cfg), 0, "cpu", extra=extra)


def test_the_store_trains_on_the_threads_its_key_says(monkeypatch, tmp_path, two_threads):
    """A run trained in a process on 2 threads (a notebook kernel, papermill, `dmllab train`) trains on the
    config's 1 thread, records it, and the process gets its 2 threads back."""
    import dmllab.training.store as store_mod

    seen = []

    def fake_protocol(cfg, seed, **kw):
        seen.append(torch.get_num_threads())
        return _result(cfg, torch_threads=torch.get_num_threads())  # as run_protocol records it

    monkeypatch.setattr(store_mod, "run_protocol", fake_protocol)
    monkeypatch.setattr(store_mod, "prepare", lambda cfg, progress: seen.append(torch.get_num_threads()))
    cfg = presets.get("proxynca++", "synthetic", "smoke")
    store = RunStore(tmp_path / "runs")
    result = store_mod.run(cfg, 0, store, progress=False)
    assert seen == [1, 1] and torch.get_num_threads() == 2
    assert (
        json.loads((tmp_path / "runs" / store.key(cfg) / "seed0" / "provenance.json").read_text())[
            "torch_threads"
        ]
        == 1
    )
    assert (
        json.loads((tmp_path / "runs" / store.key(cfg) / "seed0" / "config.json").read_text())["loss"][
            "kwargs"
        ]["proxy_init"]
        == "randn/8"
    )  # stored complete
    assert store.load(cfg, 0).metrics == result.metrics


def test_a_run_stored_on_other_threads_is_refused(tmp_path, capsys):
    """A run trained on 2 threads (run_protocol called in a notebook kernel) saved under a config that says 1 is
    set aside, never served."""
    cfg = presets.get("proxynca++", "synthetic", "smoke").replace("run.seed", 0)
    store = RunStore(tmp_path / "runs")
    store.save(cfg, 0, _result(cfg, torch_threads=2))
    assert store.load(cfg, 0) is None
    err = capsys.readouterr().err
    assert "records 2 torch threads" in err and "run.threads=1" in err
    store.save(cfg, 0, _result(cfg, torch_threads=1))
    assert store.load(cfg, 0) is not None
    assert store.load(cfg.replace("run.threads", 2), 0) is None  # another key: not stored


def test_the_trunk_is_pretrained_on_its_recipes_threads(monkeypatch, tmp_path, two_threads, capsys):
    """The study's prepare step (and `dmllab pretrain`) build the trunk on its recipe's 1 thread, whatever the
    process runs on; a trunk recorded on another thread count is set aside and built again."""
    import dmllab.training.pretrain as pretrain_mod
    from dmllab.training.smallcnn_weights import is_fresh, pretrain_config, pretrain_fingerprint

    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path / "cache"))
    seen = []

    class FakeTrainer:
        def __init__(self, cfg, **kw):
            self.model = torch.nn.Module()
            self.model.backbone = torch.nn.Linear(2, 2)

        def setup(self, plan):
            pass

        def fit(self):
            seen.append(torch.get_num_threads())
            return []

    monkeypatch.setattr(pretrain_mod, "Trainer", FakeTrainer)
    assert pretrain_config(8).run.threads == 1
    path = pretrain_mod.ensure_pretrained_smallcnn(width=8, progress=False)
    meta = json.loads(path.with_suffix(".json").read_text())
    assert seen == [1] and meta["torch_threads"] == 1 and torch.get_num_threads() == 2
    assert meta["config_hash"] == pretrain_fingerprint(8) and is_fresh(8, 0)
    meta["torch_threads"] = 2
    path.with_suffix(".json").write_text(json.dumps(meta))
    assert not is_fresh(8, 0)
    assert "records 2 torch threads" in capsys.readouterr().err
    pretrain_mod.ensure_pretrained_smallcnn(width=8, progress=False)
    assert seen == [1, 1] and is_fresh(8, 0)


def test_the_untrained_network_is_evaluated_on_the_runs_threads(monkeypatch, two_threads):
    import dmllab.experiments.kit as kit
    import dmllab.training as training

    seen = []

    class FakeTrainer:
        def __init__(self, cfg, **kw):
            self.device = "cpu"

        def evaluate(self, split):
            seen.append(torch.get_num_threads())
            return {}

    monkeypatch.setattr(training, "Trainer", FakeTrainer)
    monkeypatch.setattr("dmllab.training.pretrain.prepare", lambda cfg, progress: None)
    monkeypatch.setattr("dmllab.training.build.build_model", lambda m: torch.nn.Identity())
    kit.evaluate_network(presets.get("proxynca++", "synthetic", "smoke"), seed=0)
    assert seen == [1] and torch.get_num_threads() == 2


def test_feature_caches_are_keyed_on_where_they_were_computed(two_threads):
    from dmllab.data.tensor import computed_on, feature_cache_key

    common = dict(
        weights_digest="w", dataset_fp="d", preset="quick", train=True, views=2, seed=0, dtype="f16"
    )
    on_two = computed_on("cpu")
    torch.set_num_threads(1)
    assert (on_two, computed_on("cpu")) == ("cpu:2", "cpu:1")
    keys = {feature_cache_key(**common, computed_on=c) for c in (on_two, computed_on("cpu"), "cuda")}
    assert len(keys) == 3


def test_the_study_places_every_run_with_its_workers_threads():
    """On the CPU every placed run says 1 thread (the pool's), and a notebook's lookup places it to the same key."""
    from dmllab.experiments import registry
    from dmllab.experiments.execution import Execution
    from dmllab.experiments.lookup import place
    from dmllab.pipeline.placement import plan_study

    artifact = registry.select("pnpp_fig4a_temperature")
    plan, placed = plan_study(artifact, "quick", Execution("cpu"), jobs=2, calibration=None)
    assert placed.threads == 1 and plan.runs
    assert {r.run.config.run.threads for r in plan.runs} == {1}
    notebook = artifact[0].params("quick", str(plan.execution), **plan.parameters(artifact[0]))
    first = plan.runs[0].run
    assert notebook.execution == plan.execution  # its text names every field, the thread count included
    assert place(first, notebook).key == first.key


def test_the_study_writes_a_manifest_of_its_placed_runs():
    """Each placed run once, with its key, seed, draw, threads and its complete config, which keys it again."""
    from dmllab.experiments import registry
    from dmllab.experiments.execution import Execution
    from dmllab.pipeline.placement import plan_study
    from dmllab.pipeline.plan import write_manifest
    from dmllab.training.store import run_key

    plan, _ = plan_study(
        registry.select("pnpp_fig4a_temperature"), "quick", Execution("cpu"), jobs=2, calibration=None
    )
    path = write_manifest(plan)
    manifest = json.loads(path.read_text())
    assert path.name == "study-quick-cpu.json" and manifest["placement"] == plan.placement
    keys = [r["key"] for r in manifest["runs"]]
    assert len(keys) == len(set(keys)) == len(plan.runs) == 30
    for entry, planned in zip(manifest["runs"], plan.runs):
        cfg = ExperimentConfig.from_dict(entry["config"])
        assert f"{run_key(cfg)}/seed{entry['seed']}" == entry["key"] == planned.run.key
        assert (entry["draw"], entry["threads"]) == (entry["seed"], 1)  # quick: seed k on draw k
