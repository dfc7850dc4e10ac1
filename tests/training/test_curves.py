"""Live curves: a run's folder holds its per-epoch metrics while it trains (dmllab.training.curves)."""

from __future__ import annotations

import json
import math

import pytest

from dmllab.training import RunStore, run
from dmllab.training.curves import (
    CURVES_FILE,
    TENSORBOARD_DIR,
    format_runs,
    read_curves,
    run_states,
)


@pytest.fixture
def cfg3(smoke_cfg):
    return smoke_cfg.replace("schedule.epochs", 3).replace("run.two_stage", False)


def _same(a, b):
    return (a is None and (b is None or (isinstance(b, float) and math.isnan(b)))) or a == pytest.approx(b)


def test_the_run_folder_holds_each_epoch_while_it_trains(cfg3, tmp_path):
    store = RunStore(tmp_path / "runs")
    seen = {}

    class Peek:  # a caller's hook runs after the curves of the epoch are written
        def on_epoch_end(self, trainer, epoch, row):
            seen[epoch] = read_curves(store.run_dir(cfg3, 0) / CURVES_FILE)
            if epoch == 2:
                seen["states"] = run_states(store.root)

    result = run(cfg3, seed=0, store=store, hooks=(Peek(),), progress=False)
    assert [len(seen[e]) for e in (1, 2, 3)] == [1, 2, 3]
    assert [r["epoch"] for r in seen[2]] == [1, 2]  # at epoch 2 of 3: both finished epochs, no more
    (state,) = seen["states"]
    assert state["state"] == "training" and state["last"]["epoch"] == 2 and state["last"]["total_epochs"] == 3
    assert state["run"] == f"{store.key(cfg3)}/seed0"
    rows = read_curves(store.run_dir(cfg3, 0) / CURVES_FILE)  # carried into the finished run's folder
    assert len(rows) == len(result.history) == 3
    for live, hist in zip(rows, result.history):  # the same values as the run's history
        for key, value in hist.items():
            assert _same(live[key], value), key
        assert live["method"] == cfg3.method and live["profile"] == "smoke" and live["device"] == "cpu"
        assert live["images"] > 0 and live["images_per_s"] > 0 and live["elapsed_s"] > 0
        assert {"lr_backbone", "loss"} <= live.keys()
    assert any(k.startswith("val_") for k in rows[-1])
    assert [rows[i]["elapsed_s"] < rows[i + 1]["elapsed_s"] for i in range(2)] == [True, True]
    (done,) = run_states(store.root)
    assert done["state"] == "done" and done["last"]["epoch"] == 3
    table = format_runs([done])
    assert "done" in table and "3/3" in table and cfg3.method in table


def test_a_run_trained_again_keeps_each_epoch_once(cfg3, tmp_path):
    store = RunStore(tmp_path / "runs")
    cfg = cfg3.replace("run.checkpoint_minutes", 1000.0)  # checkpointed only at the stage's end

    class Crash:
        def on_epoch_end(self, trainer, epoch, row):
            if epoch == 2:
                raise RuntimeError("node lost")

    with pytest.raises(RuntimeError, match="node lost"):
        run(cfg, seed=0, store=store, hooks=(Crash(),), progress=False)
    path = store.run_dir(cfg, 0) / CURVES_FILE
    assert [r["epoch"] for r in read_curves(path)] == [1, 2]
    with path.open("a") as fh:
        fh.write('{"stage": "sin')  # a line cut by the crash
    (state,) = run_states(store.root)
    assert state["state"] == "stopped" and state["last"]["epoch"] == 2  # no process holds its lock
    result = run(cfg, seed=0, store=store, progress=False)  # no checkpoint: epochs 1 and 2 again
    rows = read_curves(path)
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert [json.loads(line)["epoch"] for line in path.read_text().splitlines()] == [1, 2, 3]
    assert [r["loss"] for r in rows] == pytest.approx([h["loss"] for h in result.history])


def test_curves_are_not_part_of_the_record(cfg3, tmp_path):
    store = RunStore(tmp_path / "runs")
    run(cfg3, seed=0, store=store, progress=False)
    with (store.run_dir(cfg3, 0) / CURVES_FILE).open("a") as fh:
        fh.write("{}\n")  # a reader that appends (or a retraining under --force) damages no stored result
    assert store.load(cfg3, 0) is not None


def test_runs_command_lists_the_store(cfg3, tmp_path, capsys):
    from dmllab.cli import main

    store = RunStore(tmp_path / "runs")
    assert main(["runs", "--store", str(store.root)]) == 0
    assert "no runs" in capsys.readouterr().out
    run(cfg3, seed=0, store=store, progress=False)
    assert main(["runs", "--store", str(store.root), "--profile", "smoke"]) == 0
    out = capsys.readouterr().out
    assert store.key(cfg3) in out and "done" in out and "3/3" in out
    assert main(["runs", "--store", str(store.root), "--profile", "paper"]) == 0
    assert "no runs" in capsys.readouterr().out


def test_tensorboard_events_hold_the_same_values(cfg3, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    store = RunStore(tmp_path / "runs")
    result = run(cfg3, seed=0, store=store, progress=False)
    events = EventAccumulator(str(store.run_dir(cfg3, 0) / TENSORBOARD_DIR))
    events.Reload()
    loss = [(e.step, e.value) for e in events.Scalars("single/loss")]
    assert loss == [(h["epoch"], pytest.approx(h["loss"], rel=1e-6)) for h in result.history]
    assert "single/images_per_s" in events.Tags()["scalars"]
