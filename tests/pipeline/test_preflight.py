"""The study's preflight stops before anything trains: a missing notebook, a quick run without its tuned recipe, a
paper-profile run on the offline benchmark that its artifact does not declare; one line each."""

from __future__ import annotations

import dataclasses

import pytest

from dmllab.experiments import registry
from dmllab.experiments.artifact import Run
from dmllab.pipeline.plan import Plan, PlannedRun
from dmllab.pipeline.preflight import benchmark_runs, missing_notebooks, untuned_runs
from dmllab.pipeline.template import notebooks_dir
from dmllab.training import presets
from dmllab.training.presets import tuned


def _plan(profile, artifacts, configs):
    runs = tuple(PlannedRun(Run(c, 0), tuple(a.id for a in artifacts), False, None) for c in configs)
    return Plan(profile, tuple(artifacts), runs, len(runs))


def test_a_missing_notebook_is_named_with_the_command_that_writes_it(tmp_path):
    toy = registry.get("pnpp_fig3_two_moons")
    plan = _plan("smoke", [toy], [])
    assert missing_notebooks(plan, notebooks_dir()) == []
    assert missing_notebooks(plan, tmp_path) == [
        f"notebook: {tmp_path / 'pnpp_fig3_two_moons.ipynb'} is missing; write the notebooks with `dmllab notebooks`"
    ]


def test_the_study_stops_on_a_missing_notebook_before_training(tmp_path, monkeypatch):
    from dmllab.experiments.execution import Execution
    from dmllab.pipeline import study
    from dmllab.pipeline.executors import LocalExecutor

    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))

    def must_not_train(*args, **kwargs):
        raise AssertionError("trained despite a missing notebook")

    monkeypatch.setattr(LocalExecutor, "submit", must_not_train)
    monkeypatch.setattr(LocalExecutor, "map", must_not_train)
    empty = tmp_path / "notebooks"
    empty.mkdir()
    result = study.run_study(
        "smoke",
        Execution(device="cpu"),
        only="pnpp_fig4a_temperature",
        progress=False,
        report=False,
        notebooks_dir=empty,
        say=lambda s: None,
    )
    assert result.problems == (
        f"notebook: {empty / 'pnpp_fig4a_temperature.ipynb'} is missing; write the notebooks with `dmllab notebooks`",
    )
    assert result.training == () and result.notebooks == ()


def test_a_quick_run_without_its_recipe_is_refused_unless_declared(monkeypatch):
    sweep = registry.get("pnpp_fig4a_temperature")
    cfg = presets.get("proxynca++", "synthetic", "quick")
    assert untuned_runs(_plan("quick", [sweep], [cfg])) == []  # the committed recipes tune it
    monkeypatch.setattr(tuned, "recipes", lambda profile: {})
    (line,) = untuned_runs(_plan("quick", [sweep], [cfg, cfg]))  # one line per method
    assert line.startswith("tuning: proxynca++ on synthetic has no tuned quick recipe")
    assert "`dmllab tune --profile quick --methods proxynca++`" in line and "pnpp_fig4a_temperature" in line
    declared = dataclasses.replace(sweep, untuned=("proxynca++",))
    assert untuned_runs(_plan("quick", [declared], [cfg])) == []
    smoke = presets.get("proxynca++", "synthetic", "smoke")
    assert untuned_runs(_plan("smoke", [sweep], [smoke])) == []  # smoke reads no recipes


@pytest.mark.parametrize("declared", [True, False])
def test_paper_runs_on_the_offline_benchmark_are_announced_or_refused(declared):
    bench = registry.get("offline_benchmark")
    artifact = bench if declared else dataclasses.replace(bench, id="offline_copy", benchmark_on_paper=False)
    configs = [r.config for r in artifact.runs(artifact.params("paper", "device=cpu"))]
    assert configs and {c.dataset for c in configs} == {"synthetic"}
    found, problems = benchmark_runs(_plan("paper", [artifact], configs))
    n = len(configs)
    if declared:
        assert (found, problems) == (
            [f"benchmark: offline_benchmark trains {n} runs on the offline benchmark (declared)"],
            [],
        )
    else:
        assert found == [] and len(problems) == 1
        assert problems[0].startswith(
            f"benchmark: offline_copy trains {n} paper-profile runs on the offline benchmark"
        )
    assert benchmark_runs(_plan("quick", [artifact], configs)) == ([], [])


def test_the_paper_plan_announces_its_runs_on_the_offline_benchmark(tmp_path, monkeypatch, capsys):
    from dmllab.cli import main

    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    assert main(["study", "--profile", "paper", "--only", "offline_benchmark", "--plan"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "benchmark: offline_benchmark trains 5 runs on the offline benchmark (declared)"
