from __future__ import annotations

import numpy as np
import pytest

from dmllab.cli import main
from dmllab.training import RunStore, Trainer, apply_overrides, export_embeddings, load_model, presets, run
from dmllab.training.protocol import stage_plans


def test_export_and_evaluate_reproduce_the_stored_test_metrics(smoke_cfg, tmp_path, capsys):
    store = RunStore(tmp_path / "runs")
    result = run(smoke_cfg, seed=0, store=store, progress=False)
    final = store.checkpoint_dir(smoke_cfg, 0) / "final.pt"
    model = load_model(smoke_cfg, final)
    out = export_embeddings(model, smoke_cfg, "test", tmp_path / "emb.npz")
    data = np.load(out)
    assert data["embeddings"].shape == (len(data["labels"]), smoke_cfg.model.embedding_dim)
    assert data["class_ids"].shape[0] == data["labels"].max() + 1
    from dmllab.metrics import evaluate

    again = evaluate(data["embeddings"], data["labels"], metrics=("recall",), ks=smoke_cfg.run.ks)
    assert again == pytest.approx(result.metrics)
    assert main(["evaluate", str(store.run_dir(smoke_cfg, 0))]) == 0
    assert f"R@1 {100 * result.metrics['R@1']:.2f}" in capsys.readouterr().out


def test_final_model_file_holds_the_trained_loss_state(smoke_cfg, tmp_path):
    """final.pt keeps what the loss learned (proxies here; Heated-up's alpha, a classifier) next to the model,
    bit-identical to the loss at the end of training."""
    import torch

    from dmllab.training.protocol import run_protocol

    out = tmp_path / "final.pt"
    seen = {}

    class Keep:
        def on_epoch_end(self, trainer, epoch, metrics):
            seen.update({k: v.clone() for k, v in trainer.loss.state_dict().items()})

    run_protocol(smoke_cfg, seed=0, progress=False, final_model=out, hooks=(Keep(),))
    state = torch.load(out, map_location="cpu", weights_only=True)
    assert set(state) == {"config", "model", "loss"}
    assert set(state["loss"]) == set(seen) and "proxies" in seen
    for k, v in seen.items():
        assert torch.equal(state["loss"][k], v)


def test_heating_up_changes_alpha_and_lr_at_the_heat_epoch():
    cfg = presets.get("heated_softmax:HLN", "synthetic", "smoke")
    cfg = apply_overrides(cfg, ["schedule.epochs=3", "schedule.heat_epoch=3", "run.two_stage=false"])

    class Watch:
        seen: dict = {}

        def on_step_end(self, trainer, info):
            lr = {g["name"]: g["lr"] for g in trainer.optimizer.param_groups}["backbone"]
            self.seen[info["epoch"]] = (trainer.loss.alpha, lr)

    watch = Watch()
    trainer = Trainer(cfg, hooks=[watch], progress=False)
    trainer.setup(stage_plans(cfg)[0])
    trainer.fit()
    lr = cfg.optim.lr
    assert watch.seen[1] == (16.0, lr) and watch.seen[2] == (16.0, lr)
    assert watch.seen[3] == (pytest.approx(4.0), pytest.approx(0.1 * lr))
