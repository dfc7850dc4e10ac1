"""``dmllab tune`` (dmllab.pipeline.tune), the quick presets' tuned recipes (training/presets/tuned.py) and the
"-fast" / "+fast" proxy lrs (training/optim.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from dmllab.pipeline import tune
from dmllab.training import presets
from dmllab.training.config import parent_config
from dmllab.training.optim import param_groups
from dmllab.training.presets import tuned
from dmllab.training.protocol import on_validation
from dmllab.training.store import RunStore, run_key

SMOKE_METHODS = ["proxynca++", "heated_softmax:SM"]
TRIALS = 3


@pytest.fixture(scope="module", autouse=True)
def _isolated(tmp_path_factory):
    """Runs, caches, results and the recipes files under a temporary folder: the tuning writes
    ``results/tuning/<profile>.csv`` and the presets' recipes (``tuned.best_csv``, package data), which no test may
    touch. The quick presets read an empty recipes file here (no method tuned: the untuned presets); a test that
    needs recipes writes its own (``recipes_for``)."""
    root = tmp_path_factory.mktemp("tune")
    recipes = root / "recipes"
    recipes.mkdir()
    (recipes / "quick.csv").write_text("variant,dataset,param_lr,param_lr_embedding,param_proxy_ratio\n")
    with pytest.MonkeyPatch.context() as mp:
        for key in ("DMLLAB_CACHE", "DMLLAB_RESULTS", "DMLLAB_FIGURES"):
            mp.setenv(key, str(root / key.lower()))
        mp.setattr(tuned, "best_csv", lambda profile: recipes / f"{profile}.csv")
        yield root


def test_a_missing_recipes_file_is_an_error_naming_it(tmp_path, monkeypatch):
    """The quick presets never fall back silently to the untuned presets (other run keys) without their recipes."""
    missing = tmp_path / "absent" / "quick.csv"
    monkeypatch.setattr(tuned, "best_csv", lambda profile: missing)
    with pytest.raises(tuned.RecipesMissingError, match="absent/quick.csv.*dmllab tune --profile quick"):
        presets.get("proxynca++", "synthetic", "quick")
    presets.get("proxynca++", "synthetic", "smoke")  # a profile without recipes never reads the file


def _in_process(runs, **_):
    """An executor that trains in this process (so a test can watch what the trainer reads)."""
    from dmllab.training.store import run

    for r in runs:
        run(r.config, seed=r.seed, progress=False)
    return [None] * len(runs)


@pytest.fixture(scope="module")
def smoke_tuning(_isolated):
    """Two methods x 3 trials on the smoke profile (trained in this process); TPE models the results after one
    random trial (so a re-run checks the sampler's determinism, not only the random start)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tune, "STARTUP_TRIALS", 1)
        first = tune.tune(
            SMOKE_METHODS, profile="smoke", trials=TRIALS, batch=2, progress=False, train=_in_process
        )

        def must_not_train(runs, **_):
            raise AssertionError(f"a re-run trained {len(runs)} runs")

        again = tune.tune(
            SMOKE_METHODS, profile="smoke", trials=TRIALS, batch=2, progress=False, train=must_not_train
        )
    return first, again


def test_trials_are_run_store_runs_evaluated_on_validation(smoke_tuning):
    first, _ = smoke_tuning
    assert first.trained == len(SMOKE_METHODS) * TRIALS and not first.failed
    for t in first.trials:
        cfg = t.run.config
        assert (cfg.data.train_split, cfg.data.test_split) == ("train", "val")
        assert cfg.data.query_split is None and not cfg.run.two_stage
        folder = RunStore().run_dir(cfg, t.run.seed)
        stored = json.loads((folder / "config.json").read_text())["data"]
        assert (stored["train_split"], stored["test_split"]) == ("train", "val")
        assert stored["val_split"] in (None, "val")  # watched per epoch only by a plateau rule (smoke)
        metrics = json.loads((folder / "metrics.json").read_text())["metrics"]
        assert t.value == pytest.approx(100 * metrics["R@1"])


def test_trial_zero_is_the_untuned_preset(smoke_tuning):
    first, _ = smoke_tuning
    for method in SMOKE_METHODS:
        zero = next(t for t in first.trials if t.method == method and t.number == 0)
        space = tune.search_space(method, "synthetic", "smoke")
        assert zero.values == {d.name: d.centre for d in space.dims}
        assert zero.run.config == on_validation(space.base)


def test_rerun_asks_the_same_trials_and_trains_nothing(smoke_tuning):
    first, again = smoke_tuning
    assert again.trained == 0
    assert [(t.method, t.number, t.values, t.run.key) for t in again.trials] == [
        (t.method, t.number, t.values, t.run.key) for t in first.trials
    ]


def test_equal_trials_per_method_and_the_records(smoke_tuning):
    from dmllab import results

    first, _ = smoke_tuning
    record, best = tune.record_paths("smoke")
    rows = results.read_rows(record)
    assert rows.groupby("variant").size().to_dict() == {m: TRIALS for m in SMOKE_METHODS}
    for col in (
        "param_trial",
        "param_split",
        "param_lr",
        "param_lr_embedding",
        "param_proxy_ratio",
        "param_loss_temperature",
        "param_wall_time_s",
        "config_hash",
        "run_id",
        "git_sha",
        "torch_version",
    ):
        assert col in rows, col
    assert set(rows["param_split"]) == {"val"} and set(rows["metric"]) == {"R@1"}
    chosen = results.read_rows(best)
    assert sorted(chosen["variant"]) == sorted(SMOKE_METHODS)
    for method, row in chosen.set_index("variant").iterrows():
        mine = rows[rows["variant"] == method]
        assert row["value"] == mine["value"].max()
        assert row["param_trial"] == mine[mine["value"] == mine["value"].max()]["param_trial"].min()


def test_the_test_split_is_never_read(monkeypatch):
    from dmllab.data import loaders

    seen = []
    original = loaders.open_split

    def spy(data, split, **kw):
        seen.append(split)
        return original(data, split, **kw)

    monkeypatch.setattr(loaders, "open_split", spy)  # every split a run opens (the trainer's RunData, export)
    result = tune.tune(
        ["heated_softmax:LN"], profile="smoke", trials=1, progress=False, write=False, train=_in_process
    )
    assert result.trained == 1 and result.trials[0].state == "ok"
    assert set(seen) == {"train", "val"}


def test_trials_train_on_the_study_executor():
    """The default executor (a local process pool, dmllab.pipeline.study) trains the missing trials."""
    result = tune.tune(["heated_softmax:BN"], profile="smoke", trials=1, jobs=1, progress=False, write=False)
    assert result.trained == 1 and [t.state for t in result.trials] == ["ok"]
    assert RunStore().load(result.trials[0].run.config, 0) is not None


def test_tuning_more_methods_keeps_the_others_rows(smoke_tuning):
    from dmllab import results

    tune.tune(["heated_softmax:LN"], profile="smoke", trials=1, progress=False, train=_in_process)
    record, best = tune.record_paths("smoke")
    counts = results.read_rows(record).groupby("variant").size().to_dict()
    assert counts == {**{m: TRIALS for m in SMOKE_METHODS}, "heated_softmax:LN": 1}
    assert sorted(results.read_rows(best)["variant"]) == sorted([*SMOKE_METHODS, "heated_softmax:LN"])


def test_best_ties_go_to_the_lower_trial_number():
    trials = [
        tune.Trial("m", "d", n, {}, None, value=v) for n, v in ((0, 1.0), (1, 5.0), (2, 5.0), (3, None))
    ]
    assert tune.choose_best(trials)[("m", "d")].number == 1


def test_every_study_method_has_a_search_space_of_the_same_shape():
    methods = tune.study_methods("quick")
    assert {"proxynca++", "proxy_anchor", "heated_softmax:LN", "proxy_synthesis:softtriple"} <= set(methods)
    assert not any(m.startswith("heated_softmax:H") for m in methods)  # arms of LN / BN
    for m, datasets in methods.items():
        space = tune.search_space(m, datasets[0], "quick")
        names = [d.name for d in space.dims]
        assert names[:2] == ["lr", "lr_embedding"]
        assert all(
            d.decades == (tune.LOSS_DECADES if d.name.startswith("loss_") else tune.LR_DECADES)
            for d in space.dims
        )
        assert space.base.loss.find("proxy_synthesis") is None
        centre = space.config({d.name: d.centre for d in space.dims})
        assert (centre.optim.lr, centre.schedule, centre.model.frozen_blocks) == (
            space.base.optim.lr,
            space.base.schedule,
            space.base.model.frozen_blocks,
        )


# ------------------------------------------------------------------------------- the presets read the record


def _fake_best(path: Path, methods: dict[str, tuple[str, ...]], profile: str = "quick") -> None:
    """A ``<profile>_best.csv`` giving every method a recipe unlike its preset (lrs x2 and x3, ratio x0.5, loss
    hyper-parameter x1.7)."""
    factors = {"lr": 2.0, "lr_embedding": 3.0, "proxy_ratio": 0.5}
    rows = []
    for m, datasets in methods.items():
        space = tune.search_space(m, datasets[0], profile)
        rows.append((m, datasets[0], space.values({d.name: factors.get(d.name, 1.7) for d in space.dims})))
    cols = sorted({k for *_, v in rows for k in v})
    header = ["variant", "dataset"] + [
        tuned.LOSS_PREFIX + c.removeprefix("loss_") if c.startswith("loss_") else f"param_{c}" for c in cols
    ]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for m, d, v in rows:
            w.writerow([m, d] + [v.get(c, "") for c in cols])


@pytest.fixture
def recipes_for(tmp_path, monkeypatch):
    def use(methods: dict[str, tuple[str, ...]]) -> Path:
        path = tmp_path / "quick_best.csv"
        _fake_best(path, methods)
        monkeypatch.setattr(tuned, "best_csv", lambda profile: path)
        return path

    return use


def test_presets_read_quick_best_and_an_absent_method_keeps_its_key(recipes_for):
    untuned = {m: presets.get(m, "synthetic", "quick") for m in ("proxynca++", "margin", "normsoftmax")}
    recipes_for({"proxynca++": ("synthetic",), "normsoftmax": ("synthetic",)})
    pnpp = presets.get("proxynca++", "synthetic", "quick")
    assert run_key(pnpp) != run_key(untuned["proxynca++"])
    assert run_key(presets.get("margin", "synthetic", "quick")) == run_key(untuned["margin"])
    assert run_key(presets.get("proxynca++", "synthetic", "quick", tuned=False)) == run_key(
        untuned["proxynca++"]
    )
    before = untuned["proxynca++"].optim
    assert (pnpp.optim.lr, pnpp.optim.lr_embedding) == (2 * before.lr, 3 * before.lr_embedding)
    assert pnpp.optim.lr_proxies == pytest.approx(
        0.5 * before.lr_proxies / before.lr_embedding * pnpp.optim.lr_embedding
    )
    assert dict(pnpp.loss.kwargs)["temperature"] == pytest.approx(1.7 / 9, rel=1e-2)
    # other profiles never read it
    assert run_key(presets.get("proxynca++", "synthetic", "smoke")) == run_key(
        presets.get("proxynca++", "synthetic", "smoke", tuned=False)
    )


def test_arms_keep_the_recipe_and_change_their_switch(recipes_for):
    recipes_for(
        {"proxynca++": ("synthetic",), "normsoftmax": ("synthetic",), "heated_softmax:LN": ("synthetic",)}
    )
    full = presets.get("proxynca++", "synthetic", "quick")
    no_fast = presets.get("proxynca++", "synthetic", "quick", fast=False)
    no_scale = presets.get("proxynca++", "synthetic", "quick", scale=False)
    given = presets.get("proxynca++", "synthetic", "quick", temperature=0.05)
    assert (no_fast.optim.lr, no_fast.optim.lr_embedding, no_fast.optim.lr_proxies) == (
        full.optim.lr,
        full.optim.lr_embedding,
        None,
    )
    assert no_fast.loss.kwargs == full.loss.kwargs
    assert dict(no_scale.loss.kwargs)["temperature"] == 1.0 and no_scale.optim == full.optim
    assert dict(given.loss.kwargs)["temperature"] == 0.05 and given.optim == full.optim
    ns, ns_fast = (
        presets.get("normsoftmax", "synthetic", "quick"),
        presets.get("normsoftmax", "synthetic", "quick", fast=True),
    )
    assert ns_fast.optim.lr_proxies == pytest.approx(
        100 * ns.optim.lr_embedding
    )  # +fast follows the tuned lr
    ln, hln = (
        presets.get("heated_softmax:LN", "synthetic", "quick"),
        presets.get("heated_softmax:HLN", "synthetic", "quick"),
    )
    assert parent_config(hln) == ln and hln.finetune.epochs > 0  # HLN fine-tunes the tuned LN run


def _fields(cfg) -> dict:
    o = cfg.optim
    emb = o.lr if o.lr_embedding is None else o.lr_embedding
    out = {
        "lr": o.lr,
        "lr_embedding": emb,
        "proxy_lr": (o.lr_proxies, None if o.lr_proxies is None else round(o.lr_proxies / emb, 6)),
    }
    out.update(cfg.loss.leaf.kw)  # the method's own loss (the tuned one), under any wrapper
    return out


def _same_proxy_lr(a, b) -> bool:
    """The same absolute proxy lr or the same ratio to the embedding lr."""
    return a[0] == b[0] or a[1] == b[1]


def test_every_ablation_arm_differs_from_its_tuned_method_only_in_its_switch(recipes_for, monkeypatch):
    """Over every artifact's quick runs, with a recipe for every method: a tuned value (lrs, proxy lr, loss
    hyper-parameter) is the method's tuned one unless the arm switches it (its untuned value differs from the
    method's untuned preset) or sweeps it (the run is tagged with it); then it is the arm's own value."""
    from dmllab.experiments import registry
    from dmllab.experiments.lookup import planned_runs

    def added_preset(aid, params, run):  # a sweep adds its preset's value (and the step below it) to its grid
        if not (run.tag.get("preset") or run.tag.get("below")):
            return False
        (param,) = (k for k in run.tag if k not in ("preset", "below"))
        return run.tag[param] not in params[f"{param}s"]

    def all_runs():
        out = []
        for a in registry.all_artifacts():
            params = a.params("quick")
            out += [(a.id, r) for r in planned_runs(a, params) if not added_preset(a.id, params, r)]
        return out

    methods = tune.study_methods("quick")
    before = all_runs()
    recipes_for(methods)
    after = all_runs()
    assert len(before) == len(after)
    carried = set()
    for (aid, ru), (_, rt) in zip(before, after):
        if aid == "heated_table3_fig4_alpha_dim" and ru.variant == "HBN (16 → 4)":
            continue  # starts at the paper's alpha 16, given by name (an option by name wins over the recipe)
        if aid == "heated_table5_learned_alpha" and ru.variant.startswith("BN (fixed"):
            continue  # the paper's fixed alpha 16, given by name
        method = tuned.unit(ru.config.method)
        default_u = _fields(tune.method_base(method, ru.config.dataset, "quick"))
        default_t = _fields(presets.get(method, ru.config.dataset, "quick"))
        fu, ft = _fields(ru.config), _fields(rt.config)
        tags = {"proxy_lr" if k == "proxy_lr" else k for k in ru.tag}
        for key in set(fu) | set(default_t):
            same = _same_proxy_lr if key == "proxy_lr" else (lambda a, b: a == b)
            if key in tags or not same(fu.get(key), default_u.get(key)):
                assert same(ft.get(key), fu.get(key)), (aid, ru.variant, key, fu.get(key), ft.get(key))
            else:
                assert same(ft.get(key), default_t.get(key)), (
                    aid,
                    ru.variant,
                    key,
                    ft.get(key),
                    default_t.get(key),
                )
                if not same(default_t.get(key), default_u.get(key)):
                    carried.add(method)
    assert carried == set(methods)  # every method's recipe reaches its runs


# ------------------------------------------------------------------------------------------- -fast / +fast


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone, self.head = nn.Linear(2, 2), nn.Linear(2, 2)


class _Proxies(nn.Module):
    def __init__(self):
        super().__init__()
        self.proxies = nn.Parameter(torch.zeros(3, 2))


def _lrs(cfg) -> dict[str, float]:
    return {g["name"]: g["lr"] for g in param_groups(_Net(), _Proxies(), cfg.optim)}


@pytest.mark.parametrize("method,ratio", [("proxynca++", 4e2 / 4e-3), ("normsoftmax", 100.0)])
@pytest.mark.parametrize("profile", ["paper", "quick"])
def test_fast_arms_param_groups(method, ratio, profile):
    """-fast: the proxies train at the embedding layer's lr (paper: trunk, embedding and proxies share one lr;
    quick: the trunk has its own); +fast: the proxies at the method's ratio x the embedding lr."""
    slow = _lrs(presets.get(method, "cub" if profile == "paper" else "synthetic", profile, fast=False))
    fast = _lrs(presets.get(method, "cub" if profile == "paper" else "synthetic", profile, fast=True))
    assert slow["proxies"] == slow["embedding"] == fast["embedding"]
    assert fast["proxies"] == pytest.approx(ratio * fast["embedding"])
    if profile == "paper":
        assert slow["backbone"] == slow["embedding"] == 4e-3
    else:
        assert slow["backbone"] == 1.0 != slow["embedding"]


def test_fast_arms_follow_a_tuned_embedding_lr(recipes_for):
    recipes_for({"normsoftmax": ("synthetic",), "proxynca++": ("synthetic",)})
    for method in ("normsoftmax", "proxynca++"):
        slow = _lrs(presets.get(method, "synthetic", "quick", fast=False))
        fast = _lrs(presets.get(method, "synthetic", "quick", fast=True))
        assert slow["proxies"] == slow["embedding"] == fast["embedding"] != fast["proxies"]
    ns = _lrs(presets.get("normsoftmax", "synthetic", "quick", fast=True))
    assert ns["proxies"] == pytest.approx(100 * ns["embedding"])


def test_the_schema_version_keys_every_run(monkeypatch):
    """A change of what a config means (here the proxies' lr rule of the "-fast" arms: the embedding layer's lr
    without ``optim.lr_proxies``, :mod:`dmllab.training.optim`) bumps ``config.SCHEMA_VERSION``, which is part of
    every run key: a run stored before is never taken for a current one."""
    from dmllab.training import config as config_mod

    quick_slow = presets.get("proxynca++", "synthetic", "quick", fast=False)
    assert quick_slow.optim.lr_proxies is None and quick_slow.optim.lr_embedding != quick_slow.optim.lr
    cfgs = [
        quick_slow,
        presets.get("proxynca++", "synthetic", "quick"),
        presets.get("proxynca++", "cub", "paper"),
    ]
    before = [run_key(c) for c in cfgs]
    assert len(set(before)) == 3
    monkeypatch.setattr(config_mod, "SCHEMA_VERSION", config_mod.SCHEMA_VERSION + 1)
    assert all(run_key(c) != k for c, k in zip(cfgs, before))
