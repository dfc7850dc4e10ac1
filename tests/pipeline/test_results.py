"""dmllab.results: schema, provenance, atomic concurrent appends, replace_experiment."""

from __future__ import annotations

import multiprocessing as mp
import re

import pandas as pd
import pytest

from dmllab import results


def _row(i: int, **kw) -> dict:
    row = {
        "experiment": "exp",
        "paper": "pnpp",
        "artifact": "Fig. 3",
        "variant": f"v{i % 3}",
        "dataset": "two_moons",
        "profile": "smoke",
        "seed": i,
        "metric": "accuracy",
        "value": (i % 700) / 7,  # an accuracy in percent: in [0, 100]
    }
    row.update(kw)
    return row


def test_schema_column_order_and_roundtrip(tmp_path):
    path = tmp_path / "r.csv"
    results.write_rows(path, [_row(0, param_temperature=0.1, param_alpha=2), _row(1)], device="cpu")
    header = path.read_text().splitlines()[0].split(",")
    assert header[: len(results.CORE_COLUMNS)] == list(results.CORE_COLUMNS)
    assert header[10:12] == ["param_alpha", "param_temperature"]  # free parameters, sorted
    assert header[12:] == list(results.PROVENANCE_COLUMNS)
    df = results.read_rows(path)
    assert len(df) == 2
    assert df["value"].tolist() == pytest.approx([0.0, 1 / 7])
    assert df["seed"].tolist() == [0, 1]
    assert df["device"].tolist() == ["cpu", "cpu"]
    assert pd.isna(df.loc[1, "param_temperature"]) and df.loc[0, "param_temperature"] == 0.1


def test_append_unions_columns_and_replace_mode(tmp_path):
    path = tmp_path / "r.csv"
    results.write_rows(path, [_row(0)])
    results.write_rows(path, [_row(1, param_k=4)])
    df = results.read_rows(path)
    assert len(df) == 2 and "param_k" in df.columns
    results.write_rows(path, [_row(5)], mode="replace")
    df = results.read_rows(path)
    assert df["seed"].tolist() == [5] and "param_k" not in df.columns


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"valeu": 1.0}, "unknown result column"),
        ({"value": "high"}, "must be a number"),
        ({"metric": None}, "lacks required column"),
    ],
)
def test_bad_rows_rejected(tmp_path, bad, message):
    with pytest.raises(ValueError, match=message):
        results.write_rows(tmp_path / "r.csv", [_row(0, **bad)])
    assert not (tmp_path / "r.csv").exists()


def test_unknown_mode(tmp_path):
    with pytest.raises(ValueError, match="valid modes: append, replace"):
        results.write_rows(tmp_path / "r.csv", [_row(0)], mode="overwrite")


def test_read_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no result file"):
        results.read_rows(tmp_path / "nope.csv")


def test_provenance_fields():
    prov = results.provenance(device="cuda")
    assert set(prov) == set(results.PROVENANCE_COLUMNS)
    assert prov["device"] == "cuda"
    assert prov["git_sha"] == "unknown" or re.fullmatch(r"[0-9a-f]{40}", prov["git_sha"])
    import torch

    assert (
        prov["torch_version"] == torch.__version__.split("+")[0] or prov["torch_version"] == torch.__version__
    )
    assert prov["dmllab_version"] != "not installed"
    assert re.match(r"\d{4}-\d\d-\d\dT", prov["timestamp"])


def test_given_provenance_is_kept(tmp_path):
    path = tmp_path / "r.csv"
    results.write_rows(path, [_row(0, config_hash="abc123", run_id="abc123/0", device="mps")], device="cpu")
    df = results.read_rows(path)
    assert (df.loc[0, "config_hash"], df.loc[0, "run_id"], df.loc[0, "device"]) == (
        "abc123",
        "abc123/0",
        "mps",
    )


def test_replace_experiment_keeps_other_rows(tmp_path):
    path = tmp_path / "r.csv"
    results.write_rows(path, [_row(0), _row(1, experiment="other"), _row(2, profile="quick")])
    results.replace_experiment(path, "exp", [_row(7), _row(8)], profile="smoke")
    df = results.read_rows(path)
    assert sorted(zip(df["experiment"], df["profile"], df["seed"])) == [
        ("exp", "quick", 2),
        ("exp", "smoke", 7),
        ("exp", "smoke", 8),
        ("other", "smoke", 1),
    ]
    results.replace_experiment(path, "exp", [_row(9)])  # no profile: every row of the experiment goes
    df = results.read_rows(path)
    assert sorted(zip(df["experiment"], df["seed"])) == [("exp", 9), ("other", 1)]
    with pytest.raises(ValueError, match="passed to replace_experiment"):
        results.replace_experiment(path, "exp", [_row(1, experiment="other")])


def test_gpu_rows_sit_next_to_the_cpu_rows_of_the_same_profile(tmp_path):
    """A notebook's rows replace those of its (profile, device) only: a study on a GPU never overwrites the
    committed CPU rows, and a second GPU study replaces the first one's rows (cuda:0 and cuda are one device)."""
    path = tmp_path / "r.csv"
    results.write_rows(path, [_row(0), _row(1)], device="cpu")
    results.replace_experiment(path, "exp", [_row(5), _row(6)], profile="smoke", device="cuda")
    df = results.read_rows(path)
    assert sorted(zip(df["device"], df["seed"])) == [("cpu", 0), ("cpu", 1), ("cuda", 5), ("cuda", 6)]
    results.replace_experiment(path, "exp", [_row(7)], profile="smoke", device="cuda:0")
    df = results.read_rows(path)
    assert sorted(zip(df["device"], df["seed"])) == [("cpu", 0), ("cpu", 1), ("cuda:0", 7)]
    results.replace_experiment(path, "exp", [_row(8)], profile="smoke", device="cpu")
    assert sorted(zip(*map(results.read_rows(path).get, ("device", "seed")))) == [("cpu", 8), ("cuda:0", 7)]


def test_readers_take_one_devices_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path))
    path = results.artifact_csv("exp")
    results.write_rows(path, [_row(0, timestamp="2025-01-01T00:00:00+00:00")], device="cpu")
    results.write_rows(path, [_row(1, timestamp="2025-02-01T00:00:00+00:00")], device="cuda:0")
    assert results.read_artifact_rows("exp", "smoke")["seed"].tolist() == [0, 1]  # every device
    assert results.read_artifact_rows("exp", "smoke", "cpu")["seed"].tolist() == [0]
    assert results.read_artifact_rows("exp", "smoke", "cuda")["seed"].tolist() == [1]
    assert results.read_artifact_rows("exp", "smoke", "mps").empty
    results.write_rows(path, [_row(2, timestamp="2025-03-01T00:00:00+00:00", device="")])
    assert results.read_artifact_rows("exp", "smoke", "cpu")["seed"].tolist() == [0, 2]  # none recorded: cpu
    assert results.latest_device(results.read_artifact_rows("exp", "smoke")) == "cpu"
    results.write_rows(path, [_row(3, timestamp="2025-04-01T00:00:00+00:00")], device="cuda:0")
    assert results.latest_device(results.read_artifact_rows("exp", "smoke")) == "cuda"
    # an extra table written before tables carried a device holds CPU lines (the committed results)
    table = results.artifact_csv("exp", "grid")
    pd.DataFrame({"x": [1, 2]}).assign(profile="smoke").to_csv(table, index=False)
    assert results.read_tables("exp", ["grid"], "smoke", "cpu")["grid"]["x"].tolist() == [1, 2]
    assert results.read_tables("exp", ["grid"], "smoke", "cuda")["grid"].empty
    results.write_table(table, pd.DataFrame({"x": [3]}), profile="smoke", device="cuda")
    assert results.read_tables("exp", ["grid"], "smoke", "cuda")["grid"]["x"].tolist() == [3]
    assert results.read_tables("exp", ["grid"], "smoke", "cpu")["grid"]["x"].tolist() == [1, 2]
    assert "device" not in results.read_tables("exp", ["grid"], "smoke", "cuda")["grid"]
    results.write_table(table, pd.DataFrame({"x": [4]}), profile="smoke", device="cpu")
    assert results.read_tables("exp", ["grid"], "smoke", "cpu")["grid"]["x"].tolist() == [4]
    assert results.read_tables("exp", ["grid"], "smoke", "cuda")["grid"]["x"].tolist() == [3]


def test_replace_experiment_drops_a_parameter_column_only_the_replaced_rows_used(tmp_path):
    path = tmp_path / "r.csv"
    results.write_rows(path, [_row(0, param_old=1), _row(1, experiment="other", param_kept=2), _row(2)])
    results.replace_experiment(path, "exp", [_row(3, param_new=3)])
    df = results.read_rows(path)
    assert "param_old" not in df and {"param_kept", "param_new"} <= set(df.columns)
    results.replace_experiment(path, "exp", [_row(4, param_kept=5)])  # a column other rows still use stays
    assert "param_kept" in results.read_rows(path) and "param_new" not in results.read_rows(path)


def test_timing_metrics_are_the_durations():
    assert all(map(results.is_timing, ["wall_time_s", "elapsed_s", "loss_ms", "generation_ms"]))
    assert not any(map(results.is_timing, ["R@1", "NMI", "diverged", "accuracy", "val_R@1", "norm_mean"]))


def _append_many(path: str, worker: int, n: int) -> None:
    for i in range(n):
        results.write_rows(path, [_row(worker * 1000 + i, variant=f"w{worker}", param_note="x" * 200)])


def _read_while_writing(path: str, stop, counts) -> None:
    import os

    while not stop.is_set():
        if os.path.exists(path):
            df = results.read_rows(path)  # must never see a partial row (would fail to parse or hold NaNs)
            assert df["value"].notna().all() and df["metric"].notna().all()
            counts.append(len(df))


def test_concurrent_appends_are_atomic(tmp_path):
    path = str(tmp_path / "r.csv")
    ctx = mp.get_context("fork")
    n = 25
    writers = [ctx.Process(target=_append_many, args=(path, w, n)) for w in range(2)]
    stop = ctx.Event()
    counts = ctx.Manager().list()
    reader = ctx.Process(target=_read_while_writing, args=(path, stop, counts))
    reader.start()
    for p in writers:
        p.start()
    for p in writers:
        p.join(60)
    stop.set()
    reader.join(60)
    assert [p.exitcode for p in writers] == [0, 0]
    assert reader.exitcode == 0
    df = results.read_rows(path)
    assert len(df) == 2 * n
    assert sorted(df["seed"].tolist()) == sorted([w * 1000 + i for w in range(2) for i in range(n)])
    assert (df["param_note"] == "x" * 200).all()
    assert list(counts) == sorted(counts)  # readers only ever saw whole, growing files
    assert not list(tmp_path.glob(".r.csv.*.tmp"))


def test_written_file_honours_the_umask(tmp_path):
    """The atomic rewrite must leave the CSV with an ordinary file's mode (0o666 & ~umask), not mkstemp's 0600."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        path = tmp_path / "r.csv"
        results.write_rows(path, [_row(0)])
        results.write_rows(path, [_row(1)])
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_one_reader_of_versions_for_the_csv_columns_and_the_run_record():
    """A row of a toy (results.provenance) and a row of a stored run (its record, read by run_provenance) name
    the same versions: the modules' own (torch's ``+cu130`` included), not their distributions' metadata."""
    import numpy
    import torch

    from dmllab.results import provenance, run_provenance
    from dmllab.training.store import provenance as run_record

    csv_row, from_run = provenance("cpu"), run_provenance(run_record("cpu"))
    assert csv_row["torch_version"] == torch.__version__ and csv_row["numpy_version"] == numpy.__version__
    assert {k: csv_row[k] for k in from_run if k.endswith("_version")} == {
        k: v for k, v in from_run.items() if k.endswith("_version")
    }
    assert {"dmllab_version", "torch_version", "numpy_version"} <= set(from_run)
