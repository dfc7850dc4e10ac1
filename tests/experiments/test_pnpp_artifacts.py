"""The ProxyNCA++ artifacts without training: runs, de-duplication, reference cells, claims on synthetic rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dmllab.experiments import registry
from dmllab.experiments.lookup import planned_runs
from dmllab.experiments.pnpp import _common as C
from dmllab.reference import load_reference

TRAINED = [
    "pnpp_table3_6_sota",
    "pnpp_table7_10_ablation",
    "pnpp_table11_pooling",
    "pnpp_table12_13_normsoftmax",
    "pnpp_fig4a_temperature",
    "pnpp_fig4b_kmax",
    "pnpp_fig4c_proxy_lr",
    "pnpp_fig5_normsoftmax_temperature",
    "pnpp_fig6_normsoftmax_proxy_lr",
    "pnpp_table15_crop",
    "pnpp_fig7_object_size",
    "pnpp_appd_googlenet",
]
CELLS = set(zip(*(load_reference("pnpp")[c] for c in ("artifact", "row", "column"))))


def _fake_rows(artifact, params) -> pd.DataFrame:
    """Rows as rows_from_runs would give them (R@1, R@2, NMI per run), with random values."""
    rng = np.random.default_rng(0)
    out = []
    for run in artifact.runs(params):
        for metric in ("R@1", "R@2", "NMI"):
            rec = {
                "variant": run.variant,
                "dataset": run.config.dataset,
                "seed": run.seed,
                "metric": metric,
                "value": float(rng.uniform(10, 60)),
            }
            rec.update({f"param_{k}": v for k, v in run.tags})
            out.append(rec)
    if artifact.id == "pnpp_fig7_object_size":  # its rows are per object-size bin
        out = [{**r, "param_bin": b} for r in out for b in range(2)]
    return pd.DataFrame(out)


@pytest.mark.parametrize("artifact_id", TRAINED)
@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_runs_reference_claims(artifact_id: str, profile: str) -> None:
    a = registry.get(artifact_id)
    params = a.params(profile)
    runs = a.runs(params)
    assert runs, "every trained artifact plans runs"
    assert len({r.key for r in runs}) == len(runs), "two variants of one artifact built the same run"
    if profile != "smoke" and a.claims:
        assert len(params.seeds) >= 3
    if profile == "paper":
        assert {r.config.dataset for r in runs} <= set(C.PAPER_DATASETS)
    else:
        assert {r.config.dataset for r in runs} == {"synthetic"}
    if a.reference is not None:
        for r in runs:
            rec = {
                "variant": r.variant,
                "dataset": r.config.dataset,
                "metric": "R@1",
                **{f"param_{k}": v for k, v in r.tags},
            }
            key = a.reference(rec)
            if key is not None:
                assert key[:3] in CELLS, f"{artifact_id}: {key} is not a cell of results/reference/pnpp.csv"
    rows = _fake_rows(a, params)
    for claim in a.claims:
        effect = claim.effect(rows)
        assert effect is not None


def test_quick_runs_are_shared() -> None:
    """The default ProxyNCA++ quick preset is one run per seed (seed k on draw k) shared by the tables, the
    ablation and the sweeps; each sweep's preset runs are the ones the tables share."""
    keys: dict[str, set[str]] = {}
    for aid in TRAINED:
        a = registry.get(aid)
        for r in planned_runs(a, a.params("quick", "device=cpu")):
            keys.setdefault(r.key, set()).add(aid)
    seeds = registry.get("pnpp_table3_6_sota").params("quick", "device=cpu").seeds
    default = {
        k
        for k, ids in keys.items()
        if {"pnpp_table3_6_sota", "pnpp_table7_10_ablation", "pnpp_fig4a_temperature", "pnpp_fig4b_kmax"}
        <= ids
    }
    assert len(default) == len(seeds)
    assert default <= {k for k, ids in keys.items() if "pnpp_fig4c_proxy_lr" in ids}
    for sweep in ("pnpp_fig5_normsoftmax_temperature", "pnpp_fig6_normsoftmax_proxy_lr"):
        a = registry.get(sweep)
        preset = {r.key for r in planned_runs(a, a.params("quick", "device=cpu")) if r.tag["preset"]}
        assert len(preset) == len(seeds) and all("pnpp_table12_13_normsoftmax" in keys[k] for k in preset), (
            sweep
        )


def test_table7_10_paper_subsets_match_reference_configs() -> None:
    from dmllab.experiments.pnpp import table7_10_ablation as T

    ref = load_reference("pnpp")
    for name in T.table_subsets():
        label, row, column, _ = T.reference({"variant": name, "dataset": "cub", "metric": "R@1"})
        note = ref[(ref["artifact"] == label) & (ref["row"] == row) & (ref["column"] == column)]["note"].iloc[
            0
        ]
        assert f"config={name}" in note


def test_table1_paper_preset_equals_table1() -> None:
    from dmllab.experiments.pnpp import table1_settings as T

    ref = load_reference("pnpp")
    for name in C.PAPER_DATASETS:
        for metric, value in T.hyper_parameters(C.pnpp(name, "paper")).items():
            label, row, column, _ = T.reference({"dataset": name, "metric": metric})
            printed = ref[(ref["artifact"] == label) & (ref["row"] == row) & (ref["column"] == column)][
                "value"
            ]
            assert float(printed.iloc[0]) == pytest.approx(value), (name, metric)


def test_sec36_runs_each_seed_on_its_own_draw(monkeypatch):
    """Seed k of the gradient-norm runs is placed on draw k on quick (not every seed on draw 0), with its key."""
    from dmllab.experiments.kit import draw_in
    from dmllab.experiments.lookup import Lookup
    from dmllab.toys import proxy_gradients

    seen = {}

    def fake(profile, *, seed, place, **kw):
        cfg, key = place(proxy_gradients_cfg(profile), seed)
        seen[seed] = (draw_in(cfg), key)
        return []

    def proxy_gradients_cfg(profile):
        from dmllab.training import presets

        return presets.get(proxy_gradients.METHOD, "synthetic", profile)

    monkeypatch.setattr(proxy_gradients, "run_proxy_gradients", fake)
    art = registry.get("pnpp_sec36_proxy_gradients")
    params = art.params("quick", "device=cpu")
    art.rows(params, Lookup(params))
    assert {s: d for s, (d, _) in seen.items()} == {s: s for s in params.seeds}
    assert len({key.split("/")[0] for _, key in seen.values()}) == len(params.seeds)
