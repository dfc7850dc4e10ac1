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
    cfg = presets.get("heated_softmax:HLN", "synthetic", "smoke", heating="in_run")
    cfg = apply_overrides(cfg, ["schedule.epochs=3", "callbacks.heating.epoch=3", "run.two_stage=false"])

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


def test_embed_split_with_a_frozen_prefix_is_the_full_forward_bit_for_bit(smoke_cfg):
    """The quick path's memoised frozen prefix (export.embed_split) gives exactly the model's own forward on the
    test view, for two models sharing the prefix (the second reads the memo), and leaves the model in eval mode."""
    import torch
    from torch.utils.data import DataLoader

    from dmllab.data import build_dataset, build_transforms
    from dmllab.training import build, export

    cfg = smoke_cfg.replace("data.in_memory", True).replace("model.frozen_blocks", 3)
    d, m = cfg.data, cfg.model
    torch.manual_seed(0)
    models = [build.build_model(m, weights=False).eval() for _ in range(2)]
    models[1].backbone.load_state_dict(models[0].backbone.state_dict())  # same prefix ...
    with torch.no_grad():
        for p in models[1].backbone.blocks()[3].parameters():  # ... different trained blocks
            p.add_(0.1)
    export._PREFIX_MEMO.clear()
    ds = build_dataset(
        d.dataset.name,
        d.root,
        "test",
        transform=build_transforms(d.transform, train=False),
        **d.dataset.kw,
    )
    for model in models:
        with torch.no_grad():
            ref = torch.cat([model(x) for x, _ in DataLoader(ds, batch_size=d.eval_batch_size)])
        emb, labels, _ = export.embed_split(model, cfg, "test")
        assert torch.equal(emb, ref)
        assert torch.equal(labels, torch.as_tensor(list(ds.labels)))
        assert not model.training
        assert len(export._PREFIX_MEMO) == 1  # the second model reused the first one's prefix output
    assert not torch.equal(*(export.embed_split(mm, cfg, "test")[0] for mm in models))
