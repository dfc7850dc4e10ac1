"""What the run store reads is verified (checksums, config against the run key, final model), damaged entries are
set aside and trained again; run locks name their holder, are taken over from a dead one, and reading needs none."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from dmllab.training import RunStore, run
from dmllab.training.store import RECORD_FILE, CorruptRunError, load_run_dir, run_key, verify_run_dir


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """One finished smoke run (1 epoch, single stage) in a store of its own: (cfg, store)."""
    from dmllab.training import presets

    cfg = presets.get("proxynca++", "synthetic", "smoke")
    cfg = cfg.replace("schedule.epochs", 1).replace("run.two_stage", False)
    store = RunStore(tmp_path_factory.mktemp("store") / "runs")
    run(cfg, seed=0, store=store, progress=False)
    return cfg, store


@pytest.fixture
def copy(stored, tmp_path):
    """A fresh copy of the stored run's store (the checkpoint cache is shared: same key)."""
    cfg, store = stored
    root = tmp_path / "runs"
    shutil.copytree(store.root, root)
    return cfg, RunStore(root)


def test_a_run_carries_its_record(copy):
    cfg, store = copy
    d = store.run_dir(cfg, 0)
    record = json.loads((d / RECORD_FILE).read_text())
    assert record["run_key"] == run_key(cfg) and record["seed"] == 0
    assert set(record["files"]) == {"metrics.json", "config.json", "history.csv", "provenance.json"}
    assert record["final_model"] and store.final_model(cfg, 0).name == "final.pt"
    assert store.load(cfg, 0).metrics == load_run_dir(d).metrics


@pytest.mark.parametrize(
    ("file", "damage", "match"),
    [
        ("metrics.json", lambda t: "", "metrics.json"),
        ("metrics.json", lambda t: t[: len(t) // 2], "metrics.json"),
        ("config.json", lambda t: t.replace('"epochs": 1', '"epochs": 7'), "config.json"),
        ("history.csv", lambda t: t + "1,2,3\n", "history.csv"),
        (RECORD_FILE, lambda t: "{", RECORD_FILE),
        ("provenance.json", lambda t: t.replace("git_sha", "git_shaa"), "provenance.json"),
    ],
)
def test_a_damaged_run_is_named_set_aside_and_missing(copy, capsys, file, damage, match):
    cfg, store = copy
    d = store.run_dir(cfg, 0)
    (d / file).write_text(damage((d / file).read_text()))
    with pytest.raises(CorruptRunError, match=match):
        verify_run_dir(d)
    assert store.load(cfg, 0) is None
    err = capsys.readouterr().err
    assert "dmllab: warning:" in err and match in err and "moved it to" in err and "trained again" in err
    assert not d.exists()
    aside = [p.name for p in d.parent.iterdir()]
    assert len(aside) == 1 and aside[0].startswith("corrupt-seed0-")  # moved, not deleted
    assert store.load(cfg, 0) is None  # and stays missing, quietly


def test_a_run_without_its_checksum_record_is_not_believed(copy):
    """A run whose checksums.json is gone (an older dmllab's, or deleted with the files it guarded) is refused and
    trained again: nothing unverified is served."""
    cfg, store = copy
    d = store.run_dir(cfg, 0)
    (d / RECORD_FILE).unlink()
    with pytest.raises(CorruptRunError, match="has no checksum record"):
        verify_run_dir(d)
    assert store.load(cfg, 0) is None and not d.exists()  # set aside


def test_a_run_copied_under_another_key_is_caught(copy):
    cfg, store = copy
    d = store.run_dir(cfg, 0)
    other = d.parent.parent / "0123456789abcdef" / "seed0"
    shutil.copytree(d, other)
    with pytest.raises(CorruptRunError, match="moved or copied"):
        verify_run_dir(other)
    shutil.copytree(d, d.parent / "seed3")
    with pytest.raises(CorruptRunError, match="seed"):
        verify_run_dir(d.parent / "seed3")


def test_a_replaced_final_model_is_caught(copy, tmp_path):
    from dmllab.training.protocol import save_atomic

    cfg, store = copy
    path = store.final_model(cfg, 0)
    backup = tmp_path / "final.pt"
    shutil.copy2(path, backup)
    shutil.copy2(path.with_name("final.pt.sha256"), tmp_path / "final.pt.sha256")
    try:
        save_atomic({"model": {}}, path)  # another model, with a consistent sidecar of its own
        with pytest.raises(CorruptRunError, match="is not the one run"):
            store.final_model(cfg, 0)
        assert store.load(cfg, 0) is None  # the run was set aside with it
    finally:
        shutil.copy2(backup, path)
        shutil.copy2(tmp_path / "final.pt.sha256", path.with_name("final.pt.sha256"))


def test_evaluate_refuses_a_hand_edited_config(copy, capsys):
    from dmllab.cli import main

    cfg, store = copy
    d = store.run_dir(cfg, 0)
    text = (d / "config.json").read_text()
    (d / "config.json").write_text(text.replace('"embedding_dim": ', '"embedding_dim": 1'))
    assert main(["evaluate", str(d)]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "train the run again" in err and "Traceback" not in err


def test_a_damaged_divergence_record_is_set_aside(copy, capsys):
    cfg, store = copy
    d = store.run_dir(cfg, 1)
    d.mkdir(parents=True)
    (d / "diverged.json").write_text("{not json")
    assert store.diverged(cfg, 1) is None
    assert "diverged.json" in capsys.readouterr().err and not (d / "diverged.json").exists()


def test_study_retrains_a_damaged_run(copy, capsys):
    cfg, store = copy
    d = store.run_dir(cfg, 0)
    (d / "metrics.json").write_text("")
    result = run(cfg, seed=0, store=store, progress=False)
    assert not result.cached and store.load(cfg, 0) is not None
    assert "metrics.json" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ locks
def _holder_script(lock, pid_in_file, hold_s):
    return textwrap.dedent(
        f"""
        import fcntl, json, os, sys, time
        fh = open({str(lock)!r}, "a+")
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.truncate(0)
        fh.write(json.dumps({{"pid": {pid_in_file} or os.getpid(), "since": time.time()}}))
        fh.flush()
        print("locked", flush=True)
        time.sleep({hold_s})
        """
    )


def _hold(lock, pid_in_file, hold_s):
    lock.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", _holder_script(lock, pid_in_file, hold_s)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_waiting_run_names_the_holder_at_once(stored, tmp_path, capfd):
    cfg, _ = stored
    store = RunStore(tmp_path / "runs")
    lock = store.lock_path(cfg, 0)
    holder = _hold(lock, 0, 1.5)
    try:
        t0 = time.perf_counter()
        with store.lock(cfg, 0):
            waited = time.perf_counter() - t0
            info = json.loads(lock.read_text())
        err = capfd.readouterr().err
        assert f"pid {holder.pid}" in err and "being trained by another process" in err
        assert waited > 0.5 and info["pid"] == os.getpid() and info["start"]
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_of_a_dead_holder_is_taken_over(stored, tmp_path, capfd):
    cfg, _ = stored
    store = RunStore(tmp_path / "runs")
    lock = store.lock_path(cfg, 0)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    holder = _hold(lock, dead.pid, 60)  # the lock outlives its recorded holder (an inheriting process)
    try:
        t0 = time.perf_counter()
        with store.lock(cfg, 0):
            assert time.perf_counter() - t0 < 10
        err = capfd.readouterr().err
        assert (
            f"held for pid {dead.pid}, since " in err and "which is no longer running; taking it over" in err
        )
    finally:
        holder.kill()
        holder.wait()


def test_reading_a_stored_run_takes_no_lock(copy, monkeypatch):
    cfg, store = copy

    def no_lock(*a, **k):
        raise PermissionError(13, "Permission denied", str(store.root))

    monkeypatch.setattr(RunStore, "lock", no_lock)  # as in a read-only store
    assert run(cfg, seed=0, store=store, progress=False).cached


@pytest.mark.parametrize("entry", ["metrics.json", "config.json", "history.csv", "provenance.json"])
def test_metrics_edited_after_their_checksum_entry_was_deleted_are_refused(copy, entry):
    cfg, store = copy
    d = store.run_dir(cfg, 0)
    record = json.loads((d / RECORD_FILE).read_text())
    del record["files"][entry]
    (d / RECORD_FILE).write_text(json.dumps(record))
    metrics = json.loads((d / "metrics.json").read_text())
    metrics["metrics"]["R@1"] = 0.99
    (d / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(CorruptRunError, match=rf"is incomplete \(no entry for {entry}\)"):
        verify_run_dir(d)
    assert store.load(cfg, 0) is None  # set aside, never printed as the run's result


def test_a_final_model_the_record_does_not_list_is_not_served(copy):
    """A record without its final model's checksum (deleted, or a run that saved none) does not vouch for a
    final.pt found in the checkpoint folder: dmllab evaluate would serve another run's weights."""
    cfg, store = copy
    d = store.run_dir(cfg, 0)
    for value in (None, "drop"):
        record = json.loads((d / RECORD_FILE).read_text())
        if value == "drop":
            record.pop("final_model")
        else:
            record["final_model"] = value
        (d / RECORD_FILE).write_text(json.dumps(record))
        with pytest.raises(CorruptRunError, match="is not listed in|no entry for final_model"):
            from dmllab.training.store import verify_final_model

            verify_final_model(d, store.checkpoint_dir(cfg, 0) / "final.pt")


def test_a_divergence_record_names_its_run_and_is_checked(tmp_path):
    from dmllab.training import presets

    cfg = presets.get("proxynca++", "synthetic", "smoke")
    store = RunStore(tmp_path / "runs")
    store.save_diverged(cfg, 0, FloatingPointError("loss is NaN"), 1.0)
    record = store.diverged(cfg, 0)
    assert record["run_key"] == run_key(cfg) and record["seed"] == 0
    other = store.run_dir(cfg, 1)
    other.mkdir(parents=True)
    shutil.copy(store.run_dir(cfg, 0) / "diverged.json", other / "diverged.json")  # copied from seed 0
    assert store.diverged(cfg, 1) is None and not (other / "diverged.json").exists()  # set aside
    unnamed = json.loads((store.run_dir(cfg, 0) / "diverged.json").read_text())
    unnamed.pop("run_key")
    (store.run_dir(cfg, 0) / "diverged.json").write_text(json.dumps(unnamed))
    assert store.diverged(cfg, 0) is None
