"""``dmllab study --fast-dev-run`` and the GPU path, without training: the check before training (weights in
torchvision's cache, the datasets' folders), the fast dev run's summary, ``--pretrained none``'s guard, and the
plan's estimate and the notebooks' parameters on a GPU (CUDA mocked)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest
import torch

from dmllab.experiments import registry
from dmllab.experiments.execution import Execution
from dmllab.pipeline import execute, fastdev, outcome, study
from dmllab.pipeline.executors import LocalExecutor
from dmllab.pipeline.jobs import JobResult
from dmllab.pipeline.plan import make_plan, manifest_path
from dmllab.pipeline.plan_text import estimate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from data_layouts import make_cub  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store_env(tmp_path, monkeypatch):
    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path


def _offline(monkeypatch):
    def no_network(url, dst, *args, **kwargs):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)


def _no_training(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("nothing may be trained or executed after a failed check")

    monkeypatch.setattr(LocalExecutor, "map", refuse)


def test_missing_imagenet_weights_stop_the_study_before_training_with_one_line(store_env, monkeypatch):
    """Offline without the weights file: one line naming the file and torchvision's cache folder
    ($TORCH_HOME/hub/checkpoints) and the way out (--pretrained none); nothing is trained."""
    make_cub(store_env / "D" / "cub")
    _offline(monkeypatch)
    _no_training(monkeypatch)
    said = []
    result = study.run_study(
        "paper",
        Execution(device="cpu", data_root=str(store_env / "D"), fast_dev_run=2, check_counts=False),
        only="pnpp_appd_googlenet",
        progress=False,
        say=said.append,
    )
    assert result.training == () and result.exit_code == 1
    (problem,) = result.problems
    folder = store_env / "torch" / "hub" / "checkpoints"
    assert "\n" not in problem and "googlenet-1378be20.pth" in problem
    assert (
        f"put it at {folder / 'googlenet-1378be20.pth'}" in problem
        and "$TORCH_HOME/hub/checkpoints" in problem
    )
    assert "--pretrained none" in problem
    assert f"data: cub at {store_env / 'D' / 'cub'}" in "\n".join(said)
    assert outcome.format_summary(result).startswith("nothing was trained: the check before training found 1")


def test_weights_already_in_the_cache_pass_the_check(store_env, monkeypatch):
    from dmllab.models.weights import check_imagenet_weights, hub_checkpoint_path, imagenet_weights_enum

    _offline(monkeypatch)
    url = imagenet_weights_enum("googlenet").IMAGENET1K_V1.url
    path = hub_checkpoint_path(url)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"weights")
    assert check_imagenet_weights("googlenet") == path


def test_a_missing_dataset_folder_says_how_one_root_serves_several_datasets(store_env, monkeypatch):
    make_cub(store_env / "D" / "cub")
    _no_training(monkeypatch)
    result = study.run_study(
        "paper",
        Execution(device="cpu", data_root=str(store_env / "D"), fast_dev_run=2, pretrained=False),
        only="pa_fig11_tsne",  # Cars196
        progress=False,
        say=lambda s: None,
    )
    (problem,) = result.problems
    assert str(store_env / "D" / "cars") in problem and "D/cub, D/cars, D/sop, D/inshop" in problem


def test_a_partial_copy_is_a_problem_unless_no_counts(store_env, monkeypatch):
    make_cub(store_env / "D" / "cub")
    _no_training(monkeypatch)
    result = study.run_study(
        "paper",
        Execution(device="cpu", data_root=str(store_env / "D"), fast_dev_run=2, pretrained=False),
        only="pnpp_appd_googlenet",
        progress=False,
        say=lambda s: None,
    )
    (problem,) = result.problems
    assert "canonical counts" in problem and "--no-counts" in problem


def test_pretrained_none_is_for_fast_dev_runs_only(store_env):
    with pytest.raises(ValueError, match="--pretrained none is for checking a study"):
        study.run_study("paper", Execution(pretrained=False), say=lambda s: None)
    with pytest.raises(ValueError, match="--fast-dev-run takes"):
        study.run_study("paper", Execution(fast_dev_run=-1), say=lambda s: None)
    out = subprocess.run(
        [sys.executable, "-m", "dmllab.cli", "study", "--profile", "paper", "--pretrained", "none", "--plan"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("dmllab: error: --pretrained none is for checking a study")


def test_fast_dev_summary_per_artifact(store_env):
    """Runs trained of those needed, steps, the peak memory of a run (CUDA max allocated where measured, CPU RSS),
    time, whether the notebook found its runs, what was shrunk, and the verdict."""
    arts = registry.select("pnpp_appd_googlenet,pa_fig11_tsne")
    plan = make_plan(arts, "paper", Execution(device="cpu", fast_dev_run=2, pretrained=False))
    (g,) = [r for r in plan.runs if "pnpp_appd_googlenet" in r.artifacts]
    (p,) = [r for r in plan.runs if "pa_fig11_tsne" in r.artifacts]
    info = {
        "steps": 4,
        "shrunk": ["cub train: batch 32 random images -> 5 random images (2 classes, 5 images)"],
    }
    training = (
        JobResult(
            g.run.key, "ok", 12.0, info={**info, "peak_rss_mb": 2048.0, "cuda_max_allocated_mb": 512.0}
        ),
        JobResult(p.run.key, "FAILED", 3.0, "DatasetNotFoundError: ...", info={"peak_rss_mb": 1024.0}),
    )
    notebooks = (
        JobResult("pnpp_appd_googlenet", "ok", 9.0),
        JobResult("pa_fig11_tsne", "FAILED", 4.0, "MissingRunError: run x is not stored", cell=5),
    )
    result = outcome.StudyResult(plan, training, notebooks, (), None, 30.0)
    text = fastdev.format_fast_dev(result)
    lines = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert lines["pnpp_appd_googlenet"].split()[1:3] == ["1/1", "4"]
    assert "CUDA 0.50 GB, RSS 2.00 GB" in lines["pnpp_appd_googlenet"]
    assert "found its 1 run(s)" in lines["pnpp_appd_googlenet"]
    assert lines["pa_fig11_tsne"].split()[1] == "0/1"
    assert "DID NOT FIND its runs (1 failed to train)" in lines["pa_fig11_tsne"]
    assert "  cub train: batch 32 random images -> 5 random images (2 classes, 5 images)" in text
    assert "NOT READY" in text and "random initialisation (--pretrained none)" in text
    one = make_plan(arts[:1], "paper", Execution(device="cpu", fast_dev_run=2))
    ready = fastdev.format_fast_dev(outcome.StudyResult(one, training[:1], notebooks[:1], (), None, 30.0))
    assert "READY: every run trained and every notebook found its runs" in ready


def _fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_quick_plan_on_a_gpu_estimates_from_gpu_times_only(store_env, monkeypatch):
    """On CUDA the quick runs are their own runs (run.device is in the key); their estimate comes from stored
    runs on CUDA, else the typical GPU run measured in the calibration (quick_run rows), never from CPU runs."""
    from dmllab import paths
    from dmllab.pipeline.cost import Calibration

    _fake_cuda(monkeypatch)
    art = registry.get("pnpp_appd_googlenet")
    cpu, gpu = (
        make_plan([art], "quick", Execution(device="cpu")),
        make_plan([art], "quick", Execution(device="cuda")),
    )
    assert {r.run.key for r in cpu.runs}.isdisjoint(r.run.key for r in gpu.runs)
    assert all(r.run.config.run.device == "cuda" for r in gpu.runs)
    assert gpu.typical_s is None and gpu.estimate_s is None  # no calibration: no typical GPU run
    assert "no typical quick run measured on a GPU" in estimate(gpu, 1)
    c = cpu.runs[0].run.config  # a stored CPU run of the same method is no basis for a GPU run
    stored = paths.runs_dir() / "x" / "seed0"
    stored.mkdir(parents=True)
    record = {
        "method": c.method,
        "dataset": c.dataset,
        "profile": "quick",
        "device": "cpu",
        "wall_time_s": 7.0,
    }
    stored.joinpath("metrics.json").write_text(json.dumps(record))
    assert make_plan([art], "quick", Execution(device="cuda")).estimate_s is None
    assert make_plan([art], "quick", Execution(device="cpu")).estimate_s == pytest.approx(7.0 * len(cpu.runs))
    calibration = Calibration("gpu.csv", "a GPU", quick_run_s={1: 3.0})
    typical = make_plan([art], "quick", Execution(device="cuda"), calibration=calibration)
    assert typical.estimate_s == pytest.approx(3.0 * len(typical.runs))
    assert "the typical quick run on one cuda worker, measured in gpu.csv" in " ".join(
        estimate(typical, 1).split()
    )
    record["device"] = "cuda"
    stored.joinpath("metrics.json").write_text(json.dumps(record))
    assert make_plan([art], "quick", Execution(device="cuda")).estimate_s == pytest.approx(
        7.0 * len(cpu.runs)
    )


def test_notebooks_on_a_gpu_get_the_device_and_a_fast_dev_runs_parameters(store_env, monkeypatch):
    """The notebooks receive the plan's execution (device cuda; a fast dev run's limit, first seed,
    pretrained=False), so they look up the runs the study trained; one worker on a GPU (--jobs auto)."""
    from dmllab.pipeline.jobs import resolve_jobs

    _fake_cuda(monkeypatch)
    assert resolve_jobs("auto", "cuda") == 1
    submitted = {}

    def fake_map(self, fn, items, name, *, desc):
        submitted[desc.split(" ")[0]] = {name(i): dict(i.parameters) for i in items}
        return [JobResult(name(i), "ok", 0.0, output="x") for i in items]

    monkeypatch.setattr(LocalExecutor, "map", fake_map)
    monkeypatch.setattr(execute, "ensure_kernel", lambda: "python3")
    art = registry.get("pa_table2_4_sota")
    plan = make_plan([art], "quick", Execution(device="cuda", fast_dev_run=3, pretrained=False))
    (store_env / "out").mkdir()
    execute.run_notebooks(plan, LocalExecutor(1, progress=False), Path("nb"), store_env / "out", False)
    params = submitted["notebooks"]["pa_table2_4_sota"]
    assert params == {
        "profile": "quick",
        "execution": "device=cuda,fast_dev_run=3,pretrained=false",
        "manifest": str(manifest_path(plan)),
        "train_missing": False,
        "seeds": [art.defaults("quick")["seeds"][0]],
    }
