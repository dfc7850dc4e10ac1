"""Proxy Anchor and Heated-up artifacts without training: their runs build on every profile, the claims evaluate
on synthetic rows, and every reference key names a printed cell of results/reference."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dmllab import paths
from dmllab.experiments import compare, registry, verdicts
from dmllab.experiments.artifact import REFERENCE_PAPER
from dmllab.experiments.lookup import planned_runs
from dmllab.experiments.verdicts import CHECKS

IDS = [
    a.id
    for a in registry.all_artifacts()
    if a.id.startswith(("pa_", "heated_")) and a.id not in ("heated_fig1_gradients", "heated_fig2_digits")
]
# computed metrics some artifacts add to the runs' test metrics (R@K of the run's ks, NMI where measured)
METRICS = (
    "accuracy",
    "train_accuracy",
    "alpha_final",
    "alpha_heated",
    "P@4",
    "test_cos_gap",
    "train_cos_gap",
    "spearman_norm_grad",
    "grid_same_class_neighbours",
    "chance_same_class",
)


def _reference() -> pd.DataFrame:
    import glob

    root = paths.repo_root() if hasattr(paths, "repo_root") else None
    folder = f"{root}/results/reference" if root else "results/reference"
    return pd.concat([pd.read_csv(f) for f in glob.glob(f"{folder}/*.csv")], ignore_index=True)


def fake_rows(artifact, profile: str) -> pd.DataFrame:
    """Rows shaped like the artifact's (one per run, seed and metric) with random values."""
    params = artifact.params(profile, "device=cpu")
    rng = np.random.default_rng(0)
    out = []
    for run in artifact.runs(params):
        tags = {f"param_{k}": v for k, v in run.tag.items()}
        if artifact.id == "pa_table5_6_batch":
            tags["param_paper_batch_size"] = int(
                round(run.tag["batch_size"] * params["paper_batch_per_batch"])
            )
        if "learn_alpha" in dict(run.config.loss.kwargs):
            tags.setdefault("param_heated", run.tag.get("heated"))
        measured = [f"R@{k}" for k in run.config.run.ks] + (
            ["NMI"] if "nmi" in run.config.run.metrics else []
        )
        for metric in (*measured, *METRICS):
            out.append(
                {
                    "variant": run.variant,
                    "dataset": run.config.dataset,
                    "seed": run.seed,
                    "metric": metric,
                    "value": float(rng.uniform(0, 100)),
                    "profile": profile,
                    **tags,
                }
            )
        if artifact.id == "pa_fig1_convergence":  # per-epoch curve rows
            for epoch in (1, 2, 3):
                for metric, value in (("val_R@1", rng.uniform(0, 100)), ("elapsed_s", 10.0 * epoch)):
                    out.append(
                        {
                            "variant": run.variant,
                            "dataset": run.config.dataset,
                            "seed": run.seed,
                            "metric": metric,
                            "value": float(value),
                            "param_epoch": epoch,
                            "profile": profile,
                        }
                    )
        if artifact.id == "heated_fig1b_gradients_benchmark":  # per-group gradient rows
            for group in ("centroid", "boundary", "incorrect"):
                for alpha in (0.01, 1.0, 100.0):
                    out.append(
                        {
                            "variant": group,
                            "dataset": run.config.dataset,
                            "seed": run.seed,
                            "metric": "grad_norm",
                            "value": float(rng.uniform(0, 1)),
                            "param_alpha": alpha,
                            "param_train_alpha": 16.0,
                            "profile": profile,
                        }
                    )
    return pd.DataFrame(out)


@pytest.mark.parametrize("artifact_id", IDS)
def test_runs_build_on_every_profile(artifact_id: str) -> None:
    artifact = registry.get(artifact_id)
    for profile in ("smoke", "quick", "paper"):
        runs = planned_runs(artifact, artifact.params(profile, "device=cpu"))
        assert all(r.config.profile == profile for r in runs)
        if profile != "paper":
            assert all(r.config.dataset == "synthetic" for r in runs)
    if artifact.claims:
        assert len(artifact.params("quick").seeds) >= 3


@pytest.mark.parametrize("artifact_id", IDS)
def test_claims_evaluate_on_rows(artifact_id: str) -> None:
    artifact = registry.get(artifact_id)
    rows = fake_rows(artifact, "smoke")
    for claim in artifact.claims:
        j = verdicts.assess(claim, rows)
        verdict, why = j.verdict, j.why
        assert verdict in (CHECKS if claim.kind == "check" else verdicts.VERDICTS), claim.text
        assert "Error" not in why, f"{claim.text}: {why}"


@pytest.mark.parametrize("artifact_id", IDS)
@pytest.mark.parametrize("profile", ["quick", "paper"])
def test_reference_keys_hit_printed_cells(artifact_id: str, profile: str) -> None:
    artifact = registry.get(artifact_id)
    if artifact.reference is None:
        return
    ref = _reference()
    ref = ref[ref["paper"] == REFERENCE_PAPER[artifact.paper]]
    rows = fake_rows(artifact, profile)
    if rows.empty:
        return
    hits = 0
    for rec in compare.summarise(rows).to_dict("records"):
        key = artifact.reference(rec)
        if key is None:
            continue
        label, row, column = key[:3]
        found = ref[(ref["artifact"] == label) & (ref["row"] == row) & (ref["column"] == column)]
        assert len(found), (
            f"{artifact_id} ({profile}): no printed cell {key} for {rec['variant']} {rec['metric']}"
        )
        hits += 1
    assert hits, f"{artifact_id} ({profile}): no row faces a printed cell"
    table = compare.paper_vs_reproduced(artifact, rows, ref)
    assert not math.isnan(table["paper"].iloc[0])


@pytest.mark.parametrize("profile", ["quick", "paper"])
def test_pa_batch_runs_fix_the_epochs_as_the_release_does(profile):
    """Proxy Anchor's release (github.com/tjddus9597/Proxy-Anchor-CVPR2020 at 51db570, code/train.py) fixes the
    epochs, not the iterations: ``--epochs`` default 60 (line 43), ``for epoch in range(0, args.nb_epochs)``
    (line 264) over the whole loader (``for batch_idx, (x, y) in pbar``, line 291) and ``scheduler.step()`` once
    per epoch (line 313; ``StepLR(step_size=args.lr_decay_step)`` in epochs, line 256), the lr unchanged with the
    batch. So a larger batch takes fewer steps; Tables 5-6's runs differ in the batch size only."""
    artifact = registry.get("pa_table5_6_batch")
    runs = artifact.runs(artifact.params(profile, "device=cpu"))
    by_batch = {
        r.config.data.batch_size: r.config for r in runs if r.config.dataset == runs[0].config.dataset
    }
    assert len(by_batch) >= 3
    smallest = by_batch[min(by_batch)]
    for batch, cfg in by_batch.items():
        assert cfg.replace("data.batch_size", smallest.data.batch_size) == smallest, batch  # epochs, lr alike
