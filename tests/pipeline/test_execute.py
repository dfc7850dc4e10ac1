"""Executing notebooks: papermill's recorded duration, and kernel-start retries."""

from __future__ import annotations

from pathlib import Path

from dmllab.pipeline.execute import KERNEL_START_TIMEOUT_S, execute_notebook, last_duration


def test_last_duration_reads_papermills_metadata(tmp_path):
    import json

    nb = tmp_path / "a.ipynb"
    assert last_duration(nb) == 0.0  # never executed here
    nb.write_text(json.dumps({"metadata": {"papermill": {"duration": 12.5}}}))
    assert last_duration(nb) == 12.5
    for bad in (
        "{not json",
        json.dumps({"metadata": {}}),
        json.dumps({"metadata": {"papermill": {"duration": None}}}),
    ):
        nb.write_text(bad)
        assert last_duration(nb) == 0.0


def _fake_papermill(monkeypatch, outcomes):
    """papermill.execute_notebook replaced by one that plays ``outcomes`` in turn: an exception to raise (after
    writing the output notebook with ``ran`` cells executed) or None for success; returns the calls made."""
    import json

    import papermill

    calls = []

    def fake(inp, out, *, start_timeout, **kwargs):
        err, ran = outcomes[len(calls)]
        calls.append(start_timeout)
        cell = {"cell_type": "code", "execution_count": 1 if ran else None, "source": "", "outputs": []}
        Path(out).write_text(json.dumps({"cells": [cell]}))
        if err is not None:
            raise err

    monkeypatch.setattr(papermill, "execute_notebook", fake)
    return calls


def test_a_kernel_that_does_not_start_is_relaunched(tmp_path, monkeypatch):
    no_reply = RuntimeError("Kernel didn't respond in 120 seconds")
    calls = _fake_papermill(
        monkeypatch, [(no_reply, False), (RuntimeError("Kernel died before replying"), False), (None, False)]
    )
    res = execute_notebook(tmp_path / "a.ipynb", tmp_path / "out" / "a.ipynb", {})
    assert res.status == "ok" and calls == [KERNEL_START_TIMEOUT_S] * 3


def test_kernel_start_retries_are_bounded_and_reported(tmp_path, monkeypatch):
    no_reply = RuntimeError("Kernel didn't respond in 120 seconds")
    calls = _fake_papermill(monkeypatch, [(no_reply, False)] * 5)
    res = execute_notebook(tmp_path / "a.ipynb", tmp_path / "out" / "a.ipynb", {}, attempts=2)
    assert res.status == "FAILED" and len(calls) == 2
    assert "Kernel didn't respond" in res.error and "after 2 kernel launches" in res.error


def test_no_relaunch_once_a_cell_has_run(tmp_path, monkeypatch):
    calls = _fake_papermill(monkeypatch, [(RuntimeError("Kernel died"), True), (None, False)])
    res = execute_notebook(tmp_path / "a.ipynb", tmp_path / "out" / "a.ipynb", {})
    assert res.status == "FAILED" and len(calls) == 1 and "Kernel died" in res.error
