"""What every claim declares (key, primary claims, the paper's effect from transcribed cells, what differs from the
paper, its arms), comparisons artifacts share read the same runs, the offline benchmark's validation gate, every
training artifact's seed k on draw k (``data_seed``), and the claims whose comparison was fixed: like for like
(Heated-up Table 6), alpha 16 is alpha 16 (Heated-up Table 5), the static lambda chosen on validation (PS Table
2), every deformation on its own (PS Table 3), the learned-alpha runs only (Heated-up Table 5), the limits as
checks (Fig. 1), and the claims that could not fail dropped."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dmllab.experiments import analogue, kit, registry, stats, verdicts
from dmllab.experiments.benchmark import offline_benchmark as B
from dmllab.experiments.lookup import place, planned_runs
from dmllab.reference import load_reference
from dmllab.training import presets
from dmllab.training.store import run_key

CLAIMS = [(a, c) for a in registry.all_artifacts() for c in a.claims]


def _claim(artifact_id: str, key: str):
    return next(c for c in registry.get(artifact_id).claims if c.key == key)


@pytest.mark.parametrize("artifact,claim", CLAIMS, ids=[f"{a.id}:{c.key or c.text}" for a, c in CLAIMS])
def test_every_claim_declares_what_it_needs(artifact, claim):
    assert claim.key, "a claim has a key (the report and the multiplicity frame name it by it)"
    for profile in ("smoke", "quick"):
        assert claim.differs_on(profile), "a claim says what its analogue changes from the paper"
    assert set(claim.arms) <= set(B.TRAINS), f"arms are method labels of the benchmark: {sorted(B.TRAINS)}"
    assert set(claim.member_arms.values()) <= set(B.TRAINS)
    assert set(claim.worse_arms) <= set(B.TRAINS) and not set(claim.worse_arms) & set(claim.arms)


REFERENCE = load_reference()


@pytest.mark.parametrize(
    "artifact,claim",
    [(a, c) for a, c in CLAIMS if c.paper_effect is not None],
    ids=[f"{a.id}:{c.key}" for a, c in CLAIMS if c.paper_effect is not None],
)
def test_every_printed_paper_effect_reads_transcribed_cells(artifact, claim):
    for profile in ("smoke", "quick", "paper"):
        effect = verdicts.paper_effect(claim, artifact.paper, REFERENCE, profile)
        assert math.isfinite(effect), (
            f"{profile}: a cell of {claim.paper_effect!r} is not in results/reference"
        )


def test_every_artifact_declares_its_primary_claims():
    for artifact in registry.all_artifacts():
        tested = [c for c in artifact.claims if c.kind == "verdict"]
        if tested:
            assert any(c.primary for c in tested), artifact.id


def test_dropped_claims_stay_dropped():
    """Claims that could not fail are gone (or face a real baseline)."""
    keys = {f"{a.id}:{c.key}" for a, c in CLAIMS}
    for gone in (
        "pa_fig11_tsne:grouped",
        "offline_benchmark:beats_untrained",
        "ps_tablea_cost:grows_with_mu",
        "pnpp_fig4a_temperature:below_t9",
    ):
        assert gone not in keys
    assert _claim("pa_fig6_alpha_delta", "stable_alpha").margin is not None  # an equivalence, not "range < 1"
    assert _claim("pa_fig6_alpha_delta", "stable_alpha").paper_says == "equivalent"


def _keys(artifact_id: str, variants: set[str] | None = None, **tags) -> set[str]:
    a = registry.get(artifact_id)
    runs = planned_runs(a, a.params("quick", "device=cpu"))
    return {
        r.key
        for r in runs
        if (variants is None or r.variant in variants) and all(r.tag.get(k) == v for k, v in tags.items())
    }


def test_comparisons_that_artifacts_share_read_the_same_runs():
    """The run keys that make the multiplicity frame count a comparison once (quick)."""
    pair = _keys("pnpp_table7_10_ablation", {"ProxyNCA++", "-max"})
    assert (
        pair
        == _keys("pnpp_fig7_object_size")
        == _keys("pnpp_fig4b_kmax", k=1) | _keys("pnpp_fig4b_kmax", k=49)
    )
    ps = _keys("ps_table6_losses", {"Norm-softmax", "PS + Norm-softmax"})
    assert ps == _keys("ps_table1_composition", {"M1 (baseline)", "Proxy Synthesis"})
    assert ps == _keys(
        "ps_table5_regularizers", {"Baseline | Norm-softmax", "Proxy Synthesis | Norm-softmax"}
    )


def test_heated_arms_run_the_values_they_are_labelled_with():
    """Table 5's fixed alpha is 16 (Table 3's alpha = 16 runs), not the quick BN preset's tuned alpha."""
    from dmllab.experiments.heated import table5_learned_alpha as T5

    fixed = _keys("heated_table5_learned_alpha", {T5.FIXED_BN})
    assert fixed and fixed == _keys("heated_table3_fig4_alpha_dim", {"α = 16"})
    a = registry.get("heated_table5_learned_alpha")
    for run in planned_runs(a, a.params("quick", "device=cpu")):
        if run.variant.startswith(T5.FIXED_BN):
            assert dict(run.config.loss.kwargs)["alpha"] == 16.0
    # Tables 1-2 say the alpha their BN runs at (the quick preset's, tuned), not the paper's 16
    from dmllab.experiments.heated._common import alpha_of

    line = _claim("heated_table1_2_variants", "bn_sm").differs_on("quick")
    assert f"alpha {alpha_of('quick', 'BN', 'cub'):.3g}" in line
    assert 2.0 in registry.get("heated_table6_7_norms").parameters["quick"]["table7_alphas"]


def test_checks_and_not_testable():
    toy, image = registry.get("heated_fig1_gradients"), registry.get("heated_fig1b_gradients_benchmark")
    assert {c.kind for c in toy.claims} == {"check"} and {c.kind for c in image.claims} == {"check"}
    limit = _claim("heated_fig1b_gradients_benchmark", "property2_correct")
    assert set(limit.not_testable) == {"smoke", "quick", "paper"}
    assert _claim("heated_fig1b_gradients_benchmark", "property2_centroid").not_testable == {}
    assert set(_claim("ps_tablea_cost", "overhead_ms").not_testable) == {"smoke", "quick"}
    assert set(_claim("ps_tablea_cost", "overhead_ratio").not_testable) == {"smoke", "quick"}  # CPU timings
    assert "quick" not in _claim("pa_table2_4_sota", "larger_images").not_testable


# --------------------------------------------------------------------------------------- the trains rows


def _quick_labels() -> set[str]:
    """The method label of every run the quick study trains (heated variants are arms of SM/LN/BN)."""
    out = set()
    for a in registry.all_artifacts():
        for run in planned_runs(a, a.params("quick", "device=cpu")):
            name, _, variant = run.config.method.partition(":")
            out.add(f"{name}:{variant.removeprefix('H')}" if name == "heated_softmax" else run.config.method)
    return out


def test_trains_rows_cover_every_method_the_quick_study_trains_on_validation():
    assert _quick_labels() <= set(B.TRAINS)
    params = B.ARTIFACT.params("quick", "device=cpu")
    assert set(params["methods"]) == set(B.TRAINS)
    gate = B.trains_runs(params)
    assert all(r.config.data.train_split == "train" and not r.config.run.two_stage for r in gate)
    # Proxy Anchor Fig. 1's validation curves are its four methods' gate runs
    fig1 = _keys("pa_fig1_convergence")
    labels = {"proxy_anchor", "proxynca", "triplet_semihard", "multi_similarity"}
    assert {place(r, params).key for r in gate if r.variant in labels} == fig1


class _Result:
    def __init__(self, val: float) -> None:
        self.history = [{"epoch": 1, "val_R@1": 0.1}, {"epoch": 2, "val_R@1": val}]


class _FakeLookup:
    """Validation R@1 0.6 for every gate run on draw 0, 0.4 on another draw."""

    def __init__(self, params):
        self.params = params

    def place(self, run):
        return place(run, self.params)

    def result(self, run):
        return _Result(0.6 - 0.2 * min(self.place(run).draw, 1))


def test_trains_rows_gain_on_validation_over_the_pretrained_network_with_the_same_pooling(monkeypatch):
    seen = []

    def untrained(
        cfg, *, seed
    ):  # GAP 20, GMP 30, summed GAP + GMP 25 (R@1 as a fraction), on the split asked for
        seen.append((cfg.data.test_split, kit.draw_in(cfg), seed))
        return {"R@1": {"avg": 0.2, "max": 0.3, "avg+max": 0.25}[cfg.model.pooling.name]}

    monkeypatch.setattr(kit, "evaluate_network", untrained)
    params = B.ARTIFACT.params("quick", "device=cpu", methods=["proxynca++", "proxy_anchor", "normsoftmax"])
    lookup = _FakeLookup(params)
    df = pd.DataFrame(B._trains(params, lookup, B._gate_values(params, lookup)))
    gain = df[df["metric"] == B.GAIN].set_index(["variant", "seed"])
    assert gain.loc[("proxynca++", 0), "value"] == pytest.approx(30.0)  # max pooling: 60 - 30
    assert gain.loc[("proxynca++", 1), "value"] == pytest.approx(10.0)  # seed 1 on draw 1: 40 - 30
    assert gain.loc[("normsoftmax", 0), "value"] == pytest.approx(40.0)  # avg pooling: 60 - 20
    pa = gain.loc[("proxy_anchor", 0)]
    assert pa["param_pool"] == "avg+max" and pa["value"] == pytest.approx(
        35.0
    )  # the same summed pooling: 60 - 25
    assert "param_threshold" not in df.columns  # the bar is the pre-registered constant, not a row
    assert {split for split, _, _ in seen} == {"val"}  # the gate never looks at the test split
    assert {(draw, seed) for _, draw, seed in seen} == {(s, s) for s in params.seeds}  # each seed's own trunk
    table = B.trains_table(df)
    assert set(table["variant"]) == {"proxynca++", "proxy_anchor", "normsoftmax"}
    low = stats.interval(gain.loc["proxynca++", "value"].tolist()).low
    assert table.set_index("variant").loc["proxynca++", "low"] == pytest.approx(low)
    assert table.set_index("variant").loc["proxynca++", "trains"] == (low > 0)


# ------------------------------------------------------------------------------------------- data_seed


def test_draw_zero_is_the_default_and_a_draw_redraws_data_and_trunk():
    cfg = presets.get("proxynca++", "synthetic", "quick")
    assert kit.on_draw(cfg, 0) is cfg
    two = kit.on_draw(cfg, 2)
    assert two.data.dataset.get("seed") == 2
    assert two.model.backbone.get("pretrain_seed") == 2
    assert run_key(two) != run_key(cfg) != run_key(kit.on_draw(cfg, 1))
    smoke = presets.get("proxynca++", "synthetic", "smoke")  # no pre-trained trunk: only the data are redrawn
    assert "pretrain_seed" not in kit.on_draw(smoke, 1).model.backbone.kw
    assert kit.on_draw(smoke, 1).data.dataset.get("seed") == 1
    with pytest.raises(ValueError, match="synthetic"):
        kit.on_draw(presets.get("proxynca++", "cub", "paper"), 1)


def test_pretrained_trunk_is_keyed_on_the_draw():
    from dmllab.models.weights import weights_fingerprint
    from dmllab.training import smallcnn_weights as pretrain

    assert "seed" not in pretrain.pretrain_config(16).data.dataset.kw  # draw 0 keeps its hash
    assert pretrain.weights_path(16, 3).name == "smallcnn-synthetic-w16-s3.pt"
    assert pretrain.weights_path(16).name == "smallcnn-synthetic-w16.pt"
    fp = [
        weights_fingerprint("smallcnn", pretrained=True, backbone_kwargs={"width": 16, "pretrain_seed": s})
        for s in (0, 1)
    ]
    assert fp[0] == weights_fingerprint("smallcnn", pretrained=True, backbone_kwargs={"width": 16})
    assert fp[0] != fp[1]
    cfg = pretrain.pretrain_config(16, seed=1)
    assert cfg.data.dataset.get("seed") == 1


def test_the_provider_reads_and_prepare_pretrains_the_draw_asked_for(monkeypatch, tmp_path):
    """The weights source reads the trunk of the draw a config asks for; the run store's ``prepare`` pre-trains
    that draw's trunk when it is missing."""
    from dmllab.models.weights import resolve_weights
    from dmllab.training import pretrain, smallcnn_weights

    asked, trained = [], []

    def fake(width=16, *, progress=True, seed=0, **kw):
        trained.append((width, seed))
        return tmp_path / f"w{width}-{seed}.pt"

    def fresh(width, seed, **kw):
        asked.append((width, seed))
        return True

    monkeypatch.setattr(smallcnn_weights, "is_fresh", fresh)
    monkeypatch.setattr(pretrain, "ensure_pretrained_smallcnn", fake)
    got = resolve_weights(
        "smallcnn", pretrained=True, backbone_kwargs={"width": 16, "pretrain_seed": 2}, progress=False
    )
    assert got == smallcnn_weights.weights_path(16, 2)
    assert resolve_weights("smallcnn", pretrained=True, backbone_kwargs={"width": 16}, progress=False) == (
        smallcnn_weights.weights_path(16, 0)
    )
    assert asked == [(16, 2), (16, 0)] and trained == []  # reading never trains
    monkeypatch.setattr(pretrain, "is_fresh", lambda width, seed, **kw: False)
    quick = presets.get("proxynca++", "synthetic", "quick")
    pretrain.prepare(kit.on_draw(quick, 2), progress=False)
    pretrain.prepare(quick, progress=False)
    pretrain.prepare(presets.get("proxynca++", "synthetic", "smoke"), progress=False)  # no pre-trained trunk
    assert trained == [(16, 2), (16, 0)]


def test_smallcnn_builds_with_the_draw_keyword():
    from dmllab.models.smallcnn import build_smallcnn, default_smallcnn_weights_path

    model = build_smallcnn(width=4, pretrain_seed=3)
    assert model.out_channels == 32
    assert default_smallcnn_weights_path(16, 3).name.endswith("-w16-s3.pt")


TRAINING = [a for a in registry.all_artifacts() if a.trains]


@pytest.mark.parametrize("artifact", TRAINING, ids=[a.id for a in TRAINING])
def test_every_training_artifact_trains_seed_k_on_draw_k_on_quick(artifact):
    quick = artifact.params("quick", "device=cpu")
    assert quick.data_seed == "per_seed" and len(quick.seeds) >= 5 or artifact.id == "ps_figd_tsne_epochs"
    for run in planned_runs(artifact, quick):
        if run.config.data.dataset.name == "synthetic" and run.config.run.fast_dev_run == 0:
            seed = run.seed if "fold" not in run.tag else run.draw  # an MLRC fold stays on its seed's draw
            assert kit.draw_in(run.config) == run.draw == seed, (run.variant, run.seed)
    paper = artifact.params("paper", "device=cpu")
    if artifact.id != "offline_benchmark":
        assert paper.data_seed == "fixed"  # the real datasets have one draw


def test_the_ablation_shares_its_runs_with_the_other_artifacts_on_every_draw():
    quick = registry.get("pnpp_table7_10_ablation").params("quick", "device=cpu")
    head = {
        r.key
        for r in planned_runs(registry.get("pnpp_table7_10_ablation"), quick)
        if r.variant == "ProxyNCA++"
    }
    assert head <= _keys("pnpp_table12_13_normsoftmax") and len(head) == len(quick.seeds)


# ------------------------------------------------------------------------------------------ fixed claims


def _rows(records):
    return pd.DataFrame([{"dataset": "synthetic", **r} for r in records])


def test_heated_table6_compares_bn_with_bn_without_wn_at_the_same_alpha():
    rows = []
    for seed in (0, 1, 2):
        rows += [
            {
                "variant": "BN",
                "param_alpha": 16.0,
                "param_table": 6,
                "seed": seed,
                "metric": "R@1",
                "value": 50.0 + seed,
            },
            {
                "variant": "BN w/o WN",
                "param_alpha": 16.0,
                "param_table": 6,
                "seed": seed,
                "metric": "R@1",
                "value": 49.0 + seed,
            },
            {
                "variant": "BN",
                "param_alpha": 4.0,
                "param_table": 7,
                "seed": seed,
                "metric": "R@1",
                "value": 10.0,
            },
            {
                "variant": "BN",
                "param_alpha": 64.0,
                "param_table": 7,
                "seed": seed,
                "metric": "R@1",
                "value": 10.0,
            },
        ]
    effect = _claim("heated_table6_7_norms", "bn_vs_bn_wown").effect(_rows(rows))
    assert list(effect) == pytest.approx([1.0, 1.0, 1.0])


def test_ps_table2_best_static_lambda_is_chosen_on_validation():
    from dmllab.experiments.proxy_synthesis import table2_lambda as T

    rows = []
    for seed in (0, 1, 2):
        for lam, val, test in (
            (0.2, 40.0, 70.0),
            (0.5, 45.0, 60.0),
        ):  # 0.2 is better on test, 0.5 on validation
            rows.append(
                {
                    "variant": "s",
                    "param_generation": "static",
                    "param_lam": lam,
                    "seed": seed,
                    "metric": "R@1",
                    "value": test,
                }
            )
            rows.append(
                {
                    "variant": "s (validation)",
                    "param_generation": "static",
                    "param_lam": lam,
                    "param_split": "val",
                    "seed": seed,
                    "metric": "R@1",
                    "value": val,
                }
            )
        rows.append(
            {
                "variant": "a",
                "param_generation": "stochastic",
                "param_alpha": 0.4,
                "param_mu": 1.0,
                "seed": seed,
                "metric": "R@1",
                "value": 65.0,
            }
        )
    df = _rows(rows)
    assert T.best_static(df) == 0.5
    assert list(_claim("ps_table2_lambda", "stochastic_vs_static").effect(df)) == pytest.approx([5.0] * 3)
    assert list(_claim("ps_table2_lambda", "static_02_05").effect(df)) == pytest.approx(
        [10.0] * 3
    )  # test rows only
    assert (
        _claim("ps_table2_lambda", "stochastic_vs_static").effect(
            df[df["param_split"].isna()].drop(columns="param_split")
        )
        is None
    )
    a = registry.get("ps_table2_lambda")
    val = [r for r in a.runs(a.params("quick", "device=cpu")) if r.tag.get("split") == "val"]
    assert val and all(
        r.config.data.train_split == "train" and r.config.data.test_split == "val" for r in val
    )
    assert all(not r.config.run.two_stage for r in val)


def test_ps_table3_every_deformation_is_one_member_per_deformation():
    rows = []
    for seed in (0, 1, 2):
        for name, gain in (("cutout", 2.0 + seed), ("rotation", -1.0), ("none", 3.0)):
            rows.append(
                {
                    "variant": "Norm-softmax",
                    "param_deformation": name,
                    "seed": seed,
                    "metric": "R@1",
                    "value": 50.0,
                }
            )
            rows.append(
                {
                    "variant": "PS + Norm-softmax",
                    "param_deformation": name,
                    "seed": seed,
                    "metric": "R@1",
                    "value": 50.0 + gain,
                }
            )
    claim = _claim("ps_table3_input_deformation", "every_deformation")
    effect = claim.effect(_rows(rows))
    assert list(effect.columns) == ["Cutout", "Rotation"] and effect["Rotation"].tolist() == [-1.0] * 3
    j = verdicts.assess(claim, _rows(rows), "quick")
    assert j.verdict == "no" and j.members == 2  # rotation is below 0 on its own


def test_ps_tablea_overhead_ratio_is_measured_side_by_side():
    from dmllab.experiments.proxy_synthesis.tablea_cost import PAPER_RATIO, benchmark

    m = benchmark(mu=1.0, batch=16, dim=8, classes=5, repeats=2, seed=0, device="cpu")
    assert m["overhead_ratio"] == pytest.approx((m["generation_ms"] + m["loss_ms"]) / m["base_loss_ms"])
    rows = [
        {"variant": "v", "param_mu": 1.0, "seed": s, "metric": "overhead_ratio", "value": 2.0} for s in (0, 1)
    ]
    assert list(_claim("ps_tablea_cost", "overhead_ratio").effect(_rows(rows))) == pytest.approx(
        [PAPER_RATIO - 2.0] * 2
    )


def test_heated_table5_heating_claim_reads_the_learned_alpha_runs_only():
    from dmllab.experiments.heated import table5_learned_alpha as T5

    rows = []
    for seed in (0, 1):
        rows += [
            {
                "variant": "learned α (init 4)",
                "param_alpha_init": 4.0,
                "param_heated": False,
                "seed": seed,
                "metric": "R@1",
                "value": 50.0,
            },
            {
                "variant": "learned α (init 4), heated",
                "param_alpha_init": 4.0,
                "param_heated": True,
                "seed": seed,
                "metric": "R@1",
                "value": 52.0,
            },
            {
                "variant": T5.FIXED_BN,
                "param_alpha_init": 16.0,
                "param_heated": False,
                "seed": seed,
                "metric": "R@1",
                "value": 60.0,
            },
            {
                "variant": f"{T5.FIXED_BN}, heated",
                "param_alpha_init": 16.0,
                "param_heated": True,
                "seed": seed,
                "metric": "R@1",
                "value": 40.0,
            },
        ]
    df = _rows(rows)
    assert list(_claim("heated_table5_learned_alpha", "heating_learned").effect(df)) == [2.0, 2.0]
    fixed = _claim("heated_table5_learned_alpha", "fixed_vs_learned").effect(df)
    assert list(fixed.columns) == ["init 4"] and fixed["init 4"].tolist() == [10.0, 10.0]


def test_manifold_mixup_claims_a_gain():
    rows = []
    for seed in (0, 1):
        rows += [
            {"variant": "Baseline | Norm-softmax", "seed": seed, "metric": "R@1", "value": 50.0},
            {"variant": "Manifold Mixup | Norm-softmax", "seed": seed, "metric": "R@1", "value": 49.0},
        ]
    effect = _claim("ps_table5_regularizers", "manifold_mixup_gain").effect(_rows(rows))
    assert list(effect) == [-1.0, -1.0]  # Mixup hurting is not a gain


def test_differs_lines_follow_the_presets():
    line = analogue.analogue("proxynca++", "cub", "quick")
    q = presets.get("proxynca++", "synthetic", "quick")
    assert f"{q.schedule.epochs}+{q.schedule.warmup_epochs}w epochs" in line and "two-stage" in line
    assert "BN-Inception" in analogue.analogue("proxy_anchor", "cub", "quick")
    lrs = analogue.group_lrs(presets.get("normsoftmax", "synthetic", "quick", fast=True))
    assert lrs["proxies"] == presets.get("normsoftmax", "synthetic", "quick", fast=True).optim.lr_proxies
    assert not math.isnan(lrs["embedding"])


def test_heated_arms_are_the_unheated_run_plus_heating():
    """On quick every heated run (HLN, HBN, a heated learned alpha) that a claim compares with its unheated arm is a
    fine-tune of that arm's run: the same artifact's run of the same config but the heating."""
    from dmllab.training.store import parent_config

    for aid in ("heated_table1_2_variants", "heated_table3_fig4_alpha_dim", "heated_table5_learned_alpha"):
        a = registry.get(aid)
        runs = planned_runs(a, a.params("quick", "device=cpu"))
        keys = {r.key for r in runs}
        # Table 3's HBN at a size without a BN run (32-d) faces SM only
        heated = [r for r in runs if r.config.finetune.epochs and r.tag.get("dim") in (None, 128)]
        assert heated, aid
        for run in heated:
            parent = parent_config(run.config)
            assert parent is not None and run_key(parent) in {k.split("/")[0] for k in keys}, (
                aid,
                run.variant,
            )


def test_data_seed_fixed_puts_every_seed_on_draw_zero():
    a = registry.get("pnpp_table7_10_ablation")
    fixed = a.params("quick", "device=cpu", data_seed="fixed")
    assert all(kit.draw_in(r.config) == 0 and r.draw == 0 for r in planned_runs(a, fixed))
    with pytest.raises(ValueError, match="data_seed"):
        a.params("quick", "device=cpu", data_seed="per-seed")
    with pytest.raises(ValueError, match="data_seed"):
        registry.get("pnpp_fig3_two_moons").params("quick", data_seed="fixed")  # a toy has no draws
