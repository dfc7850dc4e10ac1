"""dmllab.pipeline.study and the `dmllab study` command on tiny notebooks (no dmllab artifact needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dmllab.pipeline import study


def test_discover_and_select(tiny_notebooks):
    found = study.discover(tiny_notebooks)
    assert [p.stem for p in found] == ["alpha_ok", "beta_fails"]  # _template skipped
    assert [p.stem for p in study.select(found, "beta")] == ["beta_fails"]
    assert [p.stem for p in study.select(found, "a*_ok,zzz")] == ["alpha_ok"]
    with pytest.raises(ValueError, match="matches no notebook; notebooks: alpha_ok, beta_fails"):
        study.select(found, "gamma")


def test_check_parameters(tiny_notebooks):
    nb = tiny_notebooks / "alpha_ok.ipynb"
    study.check_parameters(nb, {"profile": "smoke", "device": "cpu"})
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['temprature'\]"):
        study.check_parameters(nb, {"temprature": 0.1})


def test_kernel_runs_this_interpreter():
    assert study.ensure_kernel() in ("python3", "dmllab-python")


def test_run_study_reports_failure_and_continues(tiny_notebooks, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("TINY_OUT", str(out))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    results = study.run_study(
        "smoke", jobs=2, notebooks=tiny_notebooks, executed_dir=tmp_path / "executed", progress=False
    )
    assert [(r.name, r.status) for r in results] == [("alpha_ok", "ok"), ("beta_fails", "FAILED")]
    threads, python = (out / "alpha.txt").read_text().split(" ", 1)
    assert int(threads) == max(1, (__import__("os").cpu_count() or 1) // 2)
    assert Path(python).resolve() == Path(sys.executable).resolve()
    failed = results[1]
    assert failed.error == "RuntimeError: boom in beta"
    assert (tmp_path / "executed" / "beta_fails.ipynb").exists()
    summary = study.format_summary(results)
    assert "alpha_ok" in summary and "FAILED beta_fails" in summary and "boom in beta" in summary
    assert "1 ok, 1 failed" in summary


def test_run_study_reports_a_dead_worker(tiny_notebooks, tmp_path, monkeypatch):
    """A worker process that dies (BrokenProcessPool) is a FAILED notebook in the summary, not a crash."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    class DyingPool:
        def __init__(self, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, nb, output, params, **kw):
            fut = Future()
            if nb.stem == "beta_fails":
                fut.set_exception(BrokenProcessPool("a process was terminated abruptly"))
            else:
                fut.set_result(study.NotebookResult(nb.stem, "ok", 0.5, output))
            return fut

    monkeypatch.setattr(study, "ProcessPoolExecutor", DyingPool)
    results = study.run_study("smoke", notebooks=tiny_notebooks, executed_dir=tmp_path, progress=False)
    assert [(r.name, r.status) for r in results] == [("alpha_ok", "ok"), ("beta_fails", "FAILED")]
    assert results[1].error == "worker process failed: BrokenProcessPool: a process was terminated abruptly"
    assert "1 ok, 1 failed" in study.format_summary(results)


def test_cli_only_matching_nothing(capsys):
    from dmllab.cli import main

    assert main(["study", "--profile", "smoke", "--only", "no_such_notebook_xyz", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "matches no notebook" in err and "notebooks:" in err


def test_unknown_profile():
    with pytest.raises(ValueError, match="valid profiles"):
        study.study_parameters("fast")
