"""The one place that places a run: every run an artifact's rows look up is a run the study plans, on every
profile, with CUDA available and a data root given (the run's device is part of its key, so a notebook that looked
up its runs unplaced would ask for runs the study never trained)."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dmllab import data, metrics
from dmllab.experiments import Lookup, Run, kit, registry
from dmllab.experiments.lookup import place, planned_runs
from dmllab.metrics import deform
from dmllab.pipeline.plan import make_plan
from dmllab.profiles import PROFILES
from dmllab.training import presets
from dmllab.training.protocol import RunResult


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
    monkeypatch.setattr(kit, "tsne", _tsne)
    monkeypatch.setattr(deform, "embedding_deformation_recall", _deformation_recall)
    root = str(store_env / "data")
    params = artifact.params(profile, data_root=root)
    assert params.device == "cuda"
    plan = make_plan([artifact], profile, device=params.device, data_root=root)
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
    params = art.params("quick", device="cpu", data_root="/data")
    run = Run(
        presets.get("proxy_anchor", "synthetic", "quick").replace("run.device", "auto"), 1, "v", (("a", 1),)
    )
    placed = place(run, params)
    assert (placed.config.run.device, placed.config.data.root) == ("cpu", "/data")
    assert (placed.seed, placed.variant, placed.tags) == (1, "v", (("a", 1),))
    assert place(placed, params) is placed
    assert all(r.config.run.device == "cpu" for r in planned_runs(art, params))
