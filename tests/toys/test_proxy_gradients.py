from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from dmllab.toys import proxy_gradients as pg


def test_grad_norm_is_global_l2():
    a, b, c = nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2, 2)), nn.Parameter(torch.zeros(1))
    a.grad = torch.tensor([1.0, 2.0, 2.0])
    b.grad = torch.full((2, 2), 2.0)
    assert pg.grad_norm([a, b, c]) == pytest.approx(math.sqrt(9 + 16))


def _fake_trainer() -> SimpleNamespace:
    torch.manual_seed(0)
    head = SimpleNamespace(linear=nn.Linear(4, 3))
    model = SimpleNamespace(head=head, backbone=nn.Linear(5, 4))
    loss = SimpleNamespace(proxies=nn.Parameter(torch.randn(6, 3)))
    for p in [*head.linear.parameters(), *model.backbone.parameters(), loss.proxies]:
        p.grad = torch.ones_like(p)
    return SimpleNamespace(model=model, loss=loss)


def test_hook_records_every_n_steps_and_first_step_of_epoch():
    trainer = _fake_trainer()
    hook = pg.GradientNormHook(every=3)
    for epoch in (1, 2):
        for step in range(1, 8):
            hook.on_step_end(trainer, {"epoch": epoch, "step": step})
    assert [(r["epoch"], r["step"]) for r in hook.records] == [(1, 1), (1, 3), (1, 6), (2, 1), (2, 3), (2, 6)]
    assert [r["global_step"] for r in hook.records] == [1, 3, 6, 8, 10, 13]
    r = hook.records[0]
    assert r["proxies"] == pytest.approx(math.sqrt(18))
    assert r["embedding"] == pytest.approx(math.sqrt(4 * 3 + 3))
    assert r["backbone"] == pytest.approx(math.sqrt(5 * 4 + 4))
    assert (r["proxies_entries"], r["embedding_entries"]) == (18, 15)
    with pytest.raises(ValueError, match="every must be >= 1"):
        pg.GradientNormHook(every=0)


def test_records_to_rows_ratio():
    recs = [
        {
            "epoch": 1,
            "step": 1,
            "global_step": 1,
            "proxies": 0.002,
            "embedding": 4.0,
            "backbone": 9.0,
            "proxy_norm": 0.5,
        }
    ]
    rows = pg.records_to_rows(recs, variant="-fast", seed=0, dataset="synthetic", params={"param_every": 1})
    by = {r["metric"]: r["value"] for r in rows}
    assert by["ratio_proxies_embedding"] == pytest.approx(5e-4)
    assert by["grad_backbone"] == 9.0 and all(r["param_global_step"] == 1 for r in rows)
    assert "rms_ratio_proxies_embedding" not in by  # no entries recorded: no per-entry ratio
    recs[0] |= {"proxies_entries": 100, "embedding_entries": 25}
    by = {
        r["metric"]: r["value"]
        for r in pg.records_to_rows(recs, variant="-fast", seed=0, dataset="s", params={})
    }
    assert by["rms_ratio_proxies_embedding"] == pytest.approx((0.002 / 10) / (4.0 / 5))  # RMS over RMS
    recs[0]["embedding"] = 0.0
    rows = pg.records_to_rows(recs, variant="-fast", seed=0, dataset="synthetic", params={})
    assert math.isnan({r["metric"]: r["value"] for r in rows}["ratio_proxies_embedding"])


def test_each_seed_runs_where_the_caller_places_it():
    placed = []

    def place(cfg, seed):
        placed.append(seed)
        return cfg, f"key{seed}/seed{seed}"

    rows = pg.run_proxy_gradients("smoke", seed=3, every=50, epochs=1, place=place)
    assert placed == [3, 3] and {r["run_id"] for r in rows} == {"key3/seed3"}


def test_run_with_training_engine_smoke():
    rows = pg.run_proxy_gradients("smoke", every=4, epochs=1)
    variants = {r["variant"] for r in rows}
    assert variants == {"+fast", "-fast"}
    lr_proxies = {r["variant"]: r["param_lr_proxies"] for r in rows}
    assert lr_proxies["+fast"] > lr_proxies["-fast"]
    ratios = [r["value"] for r in rows if r["metric"] == "ratio_proxies_embedding"]
    assert ratios and all(v > 0 and math.isfinite(v) for v in ratios)
