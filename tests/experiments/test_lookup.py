"""The one place that places a run: every run an artifact's rows look up is a run the study plans, on every
profile, with CUDA available and a data root given (the run's device is part of its key, so a notebook that looked
up its runs unplaced would ask for runs the study never trained)."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dmllab import data, metrics
from dmllab.experiments import Lookup, Run, figures, kit, registry
from dmllab.experiments.execution import Execution
from dmllab.experiments.lookup import dataset_root, place, planned_runs
from dmllab.metrics import deform
from dmllab.pipeline.plan import make_plan
from dmllab.profiles import PROFILES
from dmllab.spec import Spec
from dmllab.training import presets
from dmllab.training.protocol import RunResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from data_layouts import make_cub  # noqa: E402


@pytest.fixture
def store_env(tmp_path, monkeypatch):
    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    return tmp_path


class StopRows(Exception):
    """Raised by the recorder where rows() would go on to compute on real data or a real network."""


class RecordingLookup(Lookup):
    """A :class:`Lookup` that places runs as the real one does, records every placed run key asked for, and
    returns plausible fakes instead of reading the store: a result with R@K/NMI and a per-epoch history, random
    embeddings of 8 classes with a dataset stand-in, no saved loss state. ``model()`` records, then stops rows()
    (what follows would run the network on images)."""

    N, CLASSES = 32, 16

    def __init__(self, params):
        super().__init__(params)
        self.keys: list[str] = []

    def _record(self, run: Run) -> Run:
        run = self.place(run)
        self.keys.append(run.key)
        return run

    def result(self, run):
        run = self._record(run)
        history = [{"epoch": e, "val_R@1": 0.1 * e, "time_s": 1.0} for e in (1, 2)]
        metrics = {"R@1": 0.5, "R@2": 0.6, "R@4": 0.7, "NMI": 0.4}
        return RunResult(metrics, history, None, [], 1.0, "fake", run.seed, self.params.device)

    def loss_state(self, run):
        self._record(run)
        return None

    def model(self, run):
        self._record(run)
        raise StopRows

    def embed(self, run, split=None):
        run = self._record(run)
        g = torch.Generator().manual_seed(run.seed)
        labels = torch.arange(self.N) % self.CLASSES
        boxes = [[0, 0, 8 + i % 16, 8 + i % 16] for i in range(self.N)]
        ds = SimpleNamespace(num_classes=self.CLASSES, labels=labels.tolist(), boxes=boxes, image_size=64)
        return torch.randn(self.N, run.config.model.embedding_dim, generator=g), labels, ds


def _stop(*args, **kwargs):
    raise StopRows


def _metrics(*args, **kwargs):  # any metric a caller reads: 0.5
    return defaultdict(lambda: 0.5)


def _tsne(points, seed=0, perplexity=30.0):
    return np.zeros((len(points), 2))


def _deformation_recall(emb, labels, lambdas, **kwargs):
    return {float(lam): {"R@1": 0.5} for lam in lambdas}


PAIRS = [(a, p) for a in registry.all_artifacts() for p in PROFILES]


@pytest.mark.parametrize("artifact,profile", PAIRS, ids=[f"{a.id}-{p}" for a, p in PAIRS])
def test_rows_look_up_only_the_runs_the_study_plans(artifact, profile, store_env, monkeypatch):
    """With CUDA mocked as available (nothing touches it) and a data root given, every key rows() asks for is a
    key of the study's plan; where rows() stops before its end (at a network or the images), it has looked up
    every planned run by then, so every key it would ask for is checked. Artifacts without runs (toy models)
    compute on the device and are not run here. The metrics and t-SNE of the fakes are stubbed (speed)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(kit, "evaluate_network", _stop)  # the untrained network: real images and weights
    monkeypatch.setattr(data, "build_dataset", _stop)  # images are never read here
    monkeypatch.setattr(metrics, "evaluate", _metrics)  # the metrics of the fakes are not what is tested here
    monkeypatch.setattr(figures, "tsne", _tsne)
    monkeypatch.setattr(deform, "embedding_deformation_recall", _deformation_recall)
    root = str(store_env / "data")
    params = artifact.params(profile, Execution(data_root=root))
    assert params.device == "cuda"
    plan = make_plan([artifact], profile, Execution(device=params.device, data_root=root))
    planned = {r.run.key for r in plan.runs}
    if not planned:
        pytest.skip("no training runs on this profile")
    lookup = RecordingLookup(params)
    try:
        artifact.derive(params, lookup)
        stopped = False
    except StopRows:
        stopped = True
    asked = set(lookup.keys)
    assert asked, "rows() looked up none of its runs"
    assert asked <= planned, f"rows() looks up {len(asked - planned)} run(s) the study does not plan"
    if stopped:
        assert asked == planned, "rows() stopped before it had looked up every planned run"


def test_place_sets_the_device_and_data_root_and_is_idempotent():
    art = registry.get("pa_table5_6_batch")
    params = art.params("quick", Execution("cpu", data_root="/data"))
    run = Run(presets.get("proxy_anchor", "cub", "paper").replace("run.device", "auto"), 1, "v", (("a", 1),))
    placed = place(run, params)
    assert (placed.config.run.device, placed.config.data.root) == ("cpu", "/data/cub")
    assert (placed.seed, placed.variant, placed.tags) == (1, "v", (("a", 1),))
    assert place(placed, params) is placed
    assert all(r.config.run.device == "cpu" for r in planned_runs(art, params))
    # the offline benchmark is not read from the data root (its root is its cache folder)
    synthetic = Run(presets.get("proxy_anchor", "synthetic", "quick"), 0)
    assert place(synthetic, params).config.data.root is None


def test_one_data_root_serves_several_datasets_or_is_a_single_datasets_folder(tmp_path):
    """D/<name> (as `dmllab data fetch NAME D/NAME` makes it) where it exists; D itself where it holds the
    dataset's index files; else D/<name>, which the loader reports as missing."""
    make_cub(tmp_path / "D" / "cub")
    make_cub(tmp_path / "CUB_200_2011")
    assert dataset_root(tmp_path / "D", "cub") == str(tmp_path / "D" / "cub")
    assert dataset_root(tmp_path / "D", "cars") == str(
        tmp_path / "D" / "cars"
    )  # missing: named for the error
    assert dataset_root(tmp_path / "CUB_200_2011", "cub") == str(tmp_path / "CUB_200_2011")
    assert dataset_root(tmp_path / "CUB_200_2011", "sop") == str(tmp_path / "CUB_200_2011" / "sop")
    assert dataset_root(None, "cub") is None and dataset_root(tmp_path / "D", "synthetic") is None


def test_place_makes_a_fast_dev_run_with_its_own_key_and_without_weights_or_counts():
    art = registry.get("pnpp_table3_6_sota")
    real = art.params("paper", "device=cpu,data_root=/data")
    fast = art.params(
        "paper", "device=cpu,fast_dev_run=2,pretrained=false,check_counts=false,data_root=/data"
    )
    run = Run(presets.get("proxynca++", "cub", "paper"), 0)
    a, b = place(run, real), place(run, fast)
    assert (a.config.run.fast_dev_run, a.config.model.pretrained, a.config.data.dataset) == (
        0,
        True,
        Spec("cub"),
    )
    assert (b.config.run.fast_dev_run, b.config.model.pretrained) == (2, False)
    assert b.config.data.dataset == Spec("cub", {"check_counts": False})
    assert a.key != b.key and place(b, fast) is b
    quick = Run(presets.get("proxynca++", "synthetic", "quick"), 0)  # counts are a real dataset's only
    assert place(quick, art.params("quick", "device=cpu,check_counts=false")).config.data.dataset == (
        quick.config.data.dataset
    )
    with pytest.raises(ValueError, match="fast_dev_run='-1' is not a count"):
        art.params("paper", "fast_dev_run=-1")
    with pytest.raises(ValueError, match="--pretrained none is for checking a study"):
        art.params("paper", "pretrained=false")


@pytest.mark.parametrize("profile", PROFILES)
def test_a_fast_dev_studys_notebooks_look_up_the_runs_it_trains(profile, store_env, monkeypatch):
    """A fast dev run (first seed, its limit and --pretrained none on every run, CUDA mocked as available, a data
    root given): every key the rows ask for is a key of the fast dev plan, for a sample of artifacts."""
    from dmllab.pipeline.plan import artifact_overrides

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(kit, "evaluate_network", _stop)
    monkeypatch.setattr(data, "build_dataset", _stop)
    monkeypatch.setattr(metrics, "evaluate", _metrics)
    monkeypatch.setattr(figures, "tsne", _tsne)
    root = str(store_env / "data")
    for artifact in registry.select("pnpp_table3_6_sota,pa_table2_4_sota,heated_table1_2_variants,ps_table2"):
        execution = Execution(
            device="cuda", data_root=root, fast_dev_run=2, pretrained=False, check_counts=False
        )
        params = artifact.params(profile, execution, **artifact_overrides(artifact, profile, execution))
        assert params.seeds == artifact.defaults(profile)["seeds"][:1]
        plan = make_plan([artifact], profile, execution)
        planned = {r.run.key for r in plan.runs}
        assert all(r.run.config.run.fast_dev_run == 2 for r in plan.runs)
        lookup = RecordingLookup(params)
        try:
            artifact.derive(params, lookup)
        except StopRows:
            pass
        assert lookup.keys and set(lookup.keys) <= planned, artifact.id
