"""Proxy Synthesis artifacts: runs are declared without training, runs are shared where the tables share a
config, claims evaluate on synthetic rows, and every reference key hits a printed cell."""

import math

import pandas as pd
import pytest

from dmllab.experiments import registry
from dmllab.experiments.compare import STAND_IN_DATASET, summarise
from dmllab.experiments.lookup import planned_runs

IDS = [
    "ps_table6_losses",
    "ps_table1_composition",
    "ps_table2_lambda",
    "ps_table3_input_deformation",
    "ps_fig5_embedding_deformation",
    "ps_table5_regularizers",
    "ps_tablea_cost",
    "ps_figd_tsne_epochs",
    "ps_table4_mlrc",
]
# parameters that the eval-time artifacts add to their rows (deformation, split, lambda)
COMPUTED = {"param_deformation": "cutout", "param_split": "Test", "param_lam": 0.2}
REFERENCE = pd.read_csv("results/reference/proxy_synthesis.csv")


def _fake_rows(artifact, profile):
    """Rows like the artifact's, from its declared runs (smoke) with made-up values, plus computed metrics."""
    params = artifact.params(profile, "device=cpu")
    rows = []
    for run in planned_runs(artifact, params):
        for metric in (*(f"R@{k}" for k in run.config.run.ks), "P@1", "RP", "MAP@R"):
            rows.append(
                {
                    "variant": run.variant,
                    "dataset": run.config.dataset,
                    "seed": run.seed,
                    "metric": metric,
                    "value": 50.0 + run.seed,
                    **COMPUTED,
                    **{f"param_{k}": v for k, v in run.tags},
                }
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("artifact_id", IDS)
def test_declared_runs_and_claims(artifact_id):
    a = registry.get(artifact_id)
    for profile in ("smoke", "quick", "paper"):
        runs = planned_runs(a, a.params(profile, "device=cpu"))
        assert len({r.key for r in runs}) == len(runs), "an artifact declares each run once"
    rows = _fake_rows(a, "smoke")
    for claim in a.claims:  # evaluates (or says it cannot decide) without raising
        try:
            claim.effect(rows)
        except (KeyError, ValueError):
            pass


def _hits(label, row, column, dataset):
    hit = REFERENCE[
        (REFERENCE["artifact"] == label) & (REFERENCE["row"] == row) & (REFERENCE["column"] == column)
    ]
    if len(hit) > 1:
        hit = hit[hit["dataset"] == dataset]
    return len(hit) >= 1


@pytest.mark.parametrize("artifact_id", [i for i in IDS if i != "ps_tablea_cost"])
def test_reference_keys_hit_printed_cells(artifact_id):
    a = registry.get(artifact_id)
    if a.reference is None:
        return
    for profile in ("quick", "paper"):
        rows = _fake_rows(a, profile)
        if rows.empty:
            continue
        keys = [a.reference(rec) for rec in summarise(rows).to_dict("records")]
        keys = [k for k in keys if k is not None]
        for key in keys:
            label, row, column = key[:3]
            ds = key[3] if len(key) > 3 else "cub"
            assert _hits(label, row, column, STAND_IN_DATASET.get(ds, ds)), (profile, key)
        if profile == "quick" and artifact_id != "ps_figd_tsne_epochs":
            assert keys, "quick rows face printed cells"


def test_tablea_reference():
    a = registry.get("ps_tablea_cost")
    for mu in (0.2, 1.0, 2.0):
        for metric in ("loss_ms", "generation_ms"):
            key = a.reference({"metric": metric, "param_mu": mu, "variant": "x", "dataset": "none"})
            assert _hits(*key), key
    assert a.reference({"metric": "generation_ms", "param_mu": 0.0}) is None


def test_runs_are_shared_between_tables():
    def keys(artifact_id, profile="quick"):
        a = registry.get(artifact_id)
        return {r.key for r in planned_runs(a, a.params(profile, "device=cpu"))}

    t6 = keys("ps_table6_losses")
    n = len(registry.get("ps_table6_losses").params("quick", "device=cpu").seeds)
    for other in ("ps_table3_input_deformation", "ps_fig5_embedding_deformation"):
        assert keys(other) <= t6, f"{other} reuses the stored Table 6 runs"
    assert len(keys("ps_table1_composition") & t6) == 2 * n  # M1 and PS
    assert len(keys("ps_table2_lambda") & t6) == n  # alpha 0.4, mu 1
    assert len(keys("ps_table5_regularizers") & t6) == 4 * n  # baselines and PS of Softmax and Norm-softmax
    assert len(keys("ps_figd_tsne_epochs") & t6) == 1  # the full-length run, seed 0


def test_tablea_benchmark_runs():
    from dmllab.experiments.proxy_synthesis.tablea_cost import benchmark

    m = benchmark(mu=1.0, batch=16, dim=8, classes=5, repeats=1, seed=0, device="cpu")
    assert m["embedding_rows"] == 32 and m["proxy_rows"] == 21 and not math.isnan(m["loss_ms"])


def test_table4_fold_protocol_reads_store_runs(tmp_path, monkeypatch):
    """ps_table4_mlrc on smoke (one seed, one fold): its fold models are declared runs of the store, and the rows
    hold the fold protocol's concatenated and separated numbers; a second pass trains nothing."""
    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    from dmllab.experiments import Lookup
    from dmllab.training import RunStore

    a = registry.get("ps_table4_mlrc")
    params = a.params("smoke", "device=cpu", seeds=[0])
    declared = planned_runs(a, params)
    folds = [r for r in declared if r.config.data.train_split.startswith("mlrc:")]
    assert len(folds) == 2 and {r.config.data.train_split for r in folds} == {"mlrc:0of4:train"}
    assert all(r.config.run.keep_best for r in folds)
    rows = pd.DataFrame(a.rows(params, Lookup(params, train_missing=True)))
    assert all(RunStore().load(r.config, r.seed) is not None for r in declared)
    mlrc = rows[rows["param_protocol"] == "mlrc folds"]
    assert set(mlrc["param_embedding"]) == {"concatenated", "separated"}
    assert set(mlrc["metric"]) == {"P@1", "RP", "MAP@R"} and len(mlrc) == 2 * 2 * 3  # PS x embedding x metric
    assert mlrc["value"].between(0, 100).all()
    again = pd.DataFrame(
        a.rows(params, Lookup(params, train_missing=False))
    )  # everything stored: no training
    keys = ["variant", "param_protocol", "param_embedding", "metric"]

    def tidy(df):
        return df.sort_values(keys).reset_index(drop=True)[[*keys, "value"]]

    pd.testing.assert_frame_equal(tidy(again), tidy(rows))


@pytest.mark.parametrize("name", ["none", "cutout", "rotation", "gaussian_noise"])
def test_table3_cached_views_give_the_per_image_deformed_batches(name):
    """PS Table 3 on an in-memory dataset deforms once-computed test views; under the same seed its loader yields
    the very tensors of the per-image DeformedTransform loader (same draws, same order)."""
    import torch
    from torch.utils.data import DataLoader

    from dmllab.data import build_dataset, build_transforms
    from dmllab.data.deform import DeformedTransform
    from dmllab.experiments.proxy_synthesis import table3_input_deformation as T
    from dmllab.training import presets

    d = presets.get("normsoftmax", "synthetic", "smoke").data
    kw = d.dataset.kwargs
    test = build_transforms(d.transform, train=False)
    views, labels = T._test_views(d.dataset.name, d.root, d.test_split, kw, d.transform)
    deformed = None if name == "none" else DeformedTransform(test, name)
    per_image = build_dataset(d.dataset.name, d.root, d.test_split, transform=deformed or test, **dict(kw))
    cached = T._Views(views, labels, deformed.apply if deformed else None)
    out = []
    for ds in (per_image, cached):
        torch.manual_seed(3)
        out.append(list(DataLoader(ds, batch_size=16, shuffle=False, num_workers=0)))
    assert len(out[0]) == len(out[1]) > 1
    for (xa, ya), (xb, yb) in zip(*out):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


@pytest.mark.parametrize("name", ["none", "dropout", "gaussian_blur"])
def test_table3_deformed_recall_is_the_same_on_both_data_paths(name, monkeypatch):
    """deformed_recall gives the same R@1 whether the test views are cached (in-memory dataset, the quick profile)
    or transformed per image as they are read (image files, the paper profile), for the same model and seed."""
    import torch

    from dmllab.experiments.proxy_synthesis import table3_input_deformation as T
    from dmllab.training import build, presets

    cfg = presets.get("normsoftmax", "synthetic", "smoke")
    torch.manual_seed(0)
    model = build.build_model(cfg.model, weights=False).eval()
    got = [
        T.deformed_recall(lambda: model, cfg.replace("data.in_memory", mem), name, seed=1, sigma_scale=True)
        for mem in (False, True)
    ]
    assert got[0] == got[1] and 0.0 < got[0]["R@1"] <= 1.0
