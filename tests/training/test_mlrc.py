"""MLRC protocol (Musgrave et al. 2020, PS Table 4): folds, wrapper dataset, the run, and the trainer options."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dmllab.data.folds import ClassSubset, class_folds
from dmllab.spec import Spec
from dmllab.training import apply_overrides, config_hash
from dmllab.training.mlrc import (
    MLRCSettings,
    aggregate,
    fold_config,
    fold_runs,
    fold_split,
    mlrc_config,
    run_mlrc,
)


def test_class_folds_are_disjoint_and_cover():
    blocks = class_folds(10, 4)
    assert [len(b) for b in blocks] in ([2, 3, 2, 3], [3, 2, 3, 2], [2, 3, 3, 2], [3, 2, 2, 3])
    assert sorted(c for b in blocks for c in b) == list(range(10))
    with pytest.raises(ValueError, match="folds"):
        class_folds(3, 4)


class _DS:
    labels = [0, 1, 2, 3, 0, 1, 2, 3]
    class_ids = ["a", "b", "c", "d"]
    split = "trainval"

    def __getitem__(self, i):
        return f"img{i}", self.labels[i]


def test_class_subset_relabels_contiguously():
    sub = ClassSubset(_DS(), [1, 3])
    assert sub.num_classes == 2 and sub.class_ids == ["b", "d"]
    assert [sub[i] for i in range(len(sub))] == [("img1", 0), ("img3", 1), ("img5", 0), ("img7", 1)]


def test_trainer_fold_splits_are_class_disjoint(smoke_cfg):
    from dmllab.training import Trainer

    cfg = mlrc_config(smoke_cfg, MLRCSettings(embedding_dim=8, batch_size=8, per_class=2))
    tr = Trainer(cfg, progress=False)
    base = tr.data.dataset(cfg.data.trainval_split, train=True)
    for fold in range(4):
        train = tr.data.dataset(fold_split(fold, 4, "train"), train=True)
        val = tr.data.dataset(fold_split(fold, 4, "val"), train=False)
        train_ids, val_ids = set(train.class_ids), set(val.class_ids)
        assert not train_ids & val_ids and train_ids | val_ids == set(base.class_ids)
        assert len(train) + len(val) == len(base)
    assert cfg.model.embedding_dim == 8 and cfg.optim.name == "rmsprop" and not cfg.run.two_stage


def test_run_mlrc_smoke(smoke_cfg):
    # 2 folds x 2 repetitions x 1 epoch (wall time not asserted: a shared machine's load changes it many-fold)
    settings = MLRCSettings(folds=2, repetitions=2, embedding_dim=8, batch_size=8, per_class=2)
    res = run_mlrc(apply_overrides(smoke_cfg, ["schedule.epochs=1"]), settings, progress=False)
    keys = {f"{p}_{m}" for p in ("concat", "sep") for m in ("P@1", "RP", "MAP@R")}
    assert set(res.metrics) == keys and set(res.ci95) == keys
    assert all(0.0 <= v <= 1.0 for v in res.metrics.values())
    assert len(res.repetitions) == 2 and all(len(r["folds"]) == 2 for r in res.repetitions)
    # separated = mean of the per-fold values
    rep = res.repetitions[0]
    assert rep["sep_P@1"] == pytest.approx(sum(f["P@1"] for f in rep["folds"]) / 2)
    with pytest.raises(ValueError, match="run_folds"):
        run_mlrc(smoke_cfg, MLRCSettings(run_folds=(5,)), progress=False)


def test_fold_models_are_store_runs_trained_once(smoke_cfg, tmp_path):
    from dmllab.training import RunStore

    settings = MLRCSettings(folds=2, repetitions=2, embedding_dim=8, batch_size=8, per_class=2)
    cfg = apply_overrides(smoke_cfg, ["schedule.epochs=2"])
    planned = fold_runs(cfg, settings, seed=3)
    assert [(r, f, s) for r, f, _, s in planned] == [(0, 0, 3), (0, 1, 3), (1, 0, 4), (1, 1, 4)]
    fcfg = planned[1][2]
    assert fcfg == fold_config(cfg, settings, 1)
    assert (fcfg.data.train_split, fcfg.data.val_split) == ("mlrc:1of2:train", "mlrc:1of2:val")
    assert fcfg.run.keep_best and not fcfg.run.two_stage and fcfg.run.metrics == ("mlrc",)

    class Count:
        epochs = 0

        def on_epoch_end(self, trainer, epoch, row):
            Count.epochs += 1

    store = RunStore(tmp_path / "runs")
    first = run_mlrc(cfg, settings, seed=3, progress=False, store=store, hooks=(Count(),))
    trained = Count.epochs
    assert trained == 4 * 2  # 4 fold runs x 2 epochs
    assert all(store.load(c, s) is not None for _, _, c, s in planned)
    again = run_mlrc(cfg, settings, seed=3, progress=False, store=store, hooks=(Count(),))
    assert Count.epochs == trained  # every fold read from the store
    assert again.metrics == pytest.approx(first.metrics)
    for rep in first.repetitions:  # the best validation epoch (1 or 2) of each fold
        assert all(f["best_epoch"] in (1, 2) for f in rep["folds"])


def test_aggregate_concatenates_normalised_fold_embeddings(smoke_cfg):
    from types import SimpleNamespace

    from dmllab.metrics import evaluate

    torch.manual_seed(0)
    labels = torch.arange(12) % 4
    embs = [torch.randn(12, 3) * 5, torch.randn(12, 3)]  # different scales: each is normalised first
    settings = MLRCSettings(folds=2)
    done = [(0, f, fold_config(smoke_cfg, settings, f), 0, SimpleNamespace(best_epoch=1)) for f in (0, 1)]
    out = aggregate(settings, 0, done, embeddings=lambda c, s: (embs[int(c.data.val_split[5])], labels))
    naive = torch.cat([e / e.norm(dim=1, keepdim=True) for e in (embs[0], embs[1])], dim=1)
    naive = naive / naive.norm(dim=1, keepdim=True)
    ref = evaluate(naive, labels, metrics=("mlrc",))
    per_fold = [evaluate(embs[f], labels, metrics=("mlrc",)) for f in (0, 1)]
    for k in ("P@1", "RP", "MAP@R"):
        assert out.metrics[f"concat_{k}"] == pytest.approx(ref[k])
        assert out.metrics[f"sep_{k}"] == pytest.approx((per_fold[0][k] + per_fold[1][k]) / 2)
    assert out.ci95["concat_P@1"] == 0.0 and out.folds_trained == (0, 1)


def _wrapped(cfg, name, **kw):
    """``cfg`` with its loss wrapped in the loss ``name`` (Proxy Synthesis, a mixup) with keywords ``kw``."""
    return dataclasses.replace(cfg, loss=Spec(name, kw, wraps=cfg.loss))


def test_wrapper_keywords_are_keyed_and_validated(smoke_cfg):
    from dmllab.training.presets.proxy_synthesis import without_synthesis

    base = config_hash(smoke_cfg)
    ps = _wrapped(smoke_cfg, "proxy_synthesis", alpha=0.4, mu=1.0)
    assert config_hash(ps) != base and config_hash(without_synthesis(ps)) == base
    assert without_synthesis(ps) == smoke_cfg
    random = apply_overrides(ps, ["loss.pairing=random"])
    assert random.loss.get("pairing") == "random" and random.loss.wraps == smoke_cfg.loss
    assert config_hash(random) != config_hash(ps)
    # the wrapped loss's keywords are reached through loss.wraps; the wrapper's own are not the base's
    hotter = apply_overrides(ps, ["loss.wraps.temperature=0.05"])
    assert hotter.loss.wraps.get("temperature") == 0.05 and hotter.loss.kw == ps.loss.kw
    # without Proxy Synthesis its keyword is an unknown key of the plain loss, naming the valid ones
    with pytest.raises(
        ValueError, match=r"loss 'proxynca' takes no keyword 'pairing' \(loss.pairing\); valid: .*temp"
    ):
        apply_overrides(smoke_cfg, ["loss.pairing=random"])
    with pytest.raises(ValueError, match="unknown loss 'cutmix'; valid loss names: .*manifold_mixup"):
        apply_overrides(smoke_cfg, ["loss.name=cutmix"])
    # a mixup must wrap a loss; a leaf loss must not wrap one (the registry's constructors say which)
    with pytest.raises(ValueError, match="wraps another spec"):
        apply_overrides(smoke_cfg, ["loss.name=manifold_mixup"])


@pytest.mark.parametrize("regularizer", ["input_mixup", "manifold_mixup"])
def test_trainer_mixes_batches_with_the_regularizer(smoke_cfg, regularizer):
    from dmllab.training.trainer import StagePlan, Trainer

    plan = StagePlan("single", "train", None, 1, 0, "none")
    losses = {}
    plain = apply_overrides(smoke_cfg, ["schedule.scheduler=none"])
    for reg in ("none", regularizer):
        cfg = plain if reg == "none" else _wrapped(plain, reg, alpha=0.5)
        tr = Trainer(cfg, progress=False)
        tr.setup(plan)
        losses[reg] = tr.fit()[-1]["loss"]
    assert losses["none"] != losses[regularizer]


def test_trainer_passes_proxy_synthesis_options(smoke_cfg):
    from dmllab.training import build

    cfg = apply_overrides(
        _wrapped(smoke_cfg, "proxy_synthesis", alpha=0.4, mu=1.0),
        ["loss.lam=0.2", "loss.pairing=random", "loss.embeddings=synthetic"],
    )
    loss = build.build_loss(cfg, 6)  # the trainer's builder (Trainer.setup)
    assert loss.lam == 0.2 and loss.pairing == "random" and loss.composition == "M4"
    torch.manual_seed(0)
    value = loss(torch.randn(8, cfg.model.embedding_dim), torch.arange(8) % 6)
    assert loss.last_lam == 0.2 and torch.isfinite(value)


def test_cli_train_protocol_mlrc(capsys):
    from dmllab.cli import main

    code = main(
        [
            "train",
            "--method",
            "proxynca++",
            "--dataset",
            "synthetic",
            "--profile",
            "smoke",
            "--quiet",
            "--protocol",
            "mlrc",
            "--mlrc-folds",
            "2",
            "--mlrc-run-folds",
            "1",
            "--mlrc-batch-size",
            "8",
            "--mlrc-per-class",
            "2",
            "--mlrc-dim",
            "8",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "1 of 2 folds" in out and "concat_MAP@R" in out
    # the MLRC batch does not fit 6 training classes: a clean user error, exit 2
    assert (
        main(
            [
                "train",
                "--method",
                "proxynca++",
                "--dataset",
                "synthetic",
                "--profile",
                "smoke",
                "--quiet",
                "--protocol",
                "mlrc",
                "--mlrc-folds",
                "2",
            ]
        )
        == 2
    )
