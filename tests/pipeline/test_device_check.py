"""benchmarks/device_check.py: its ``--dry`` mode runs every part at toy size on the CPU, writing nothing committed,
so the script is known to run before a GPU is lent; its calibration merge keeps what it does not measure again."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import device_check  # noqa: E402


def _row(bench, setting, metric, value):
    return {"benchmark": bench, "setting": setting, "metric": metric, "value": value, "device": "d"}


def test_merge_replaces_only_what_is_measured_again():
    old = [_row("model_step", "a", "images_per_s", "1"), _row("model_step", "b", "images_per_s", "2"),
           _row("embed", "a", "images_per_s", "3")]  # fmt: skip
    new = [_row("model_step", "a", "images_per_s", "10"), _row("model_step", "c", "images_per_s", "30")]
    merged = device_check.merge_calibration(old, new)
    expected = {}
    for r in old + new:  # naive: the last row of each (benchmark, setting, metric) wins
        expected[(r["benchmark"], r["setting"], r["metric"])] = r["value"]
    assert {(r["benchmark"], r["setting"], r["metric"]): r["value"] for r in merged} == expected
    assert len(merged) == len(expected)


@pytest.mark.slow
def test_dry_runs_every_part_and_writes_nothing_committed(tmp_path):
    committed = {p.name: p.read_bytes() for p in (REPO / "results" / "benchmarks").glob("*.csv")}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, str(REPO / "benchmarks" / "device_check.py"), "--dry", "--workdir", str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    for part in ("bench_gpu", "study", "fastdev"):
        assert f"{part:>8}: ok" in log, log
    assert "host syncs per step: at most 0" in log and "study subset: placement:" in log, log
    assert f"the {device_check.DRY_PRICED} plan re-priced: total: " in log, log
    with open(tmp_path / "out" / "gpu.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    measured = {r["benchmark"] for r in rows if r["device"] == "cpu"}
    assert {"model_step", "embed", "loader", "end_to_end", "syncs", "quick_run"} <= measured
    assert any(r["device"] != "cpu" for r in rows)  # the committed GPU rows are kept beside the new ones
    assert {p.name: p.read_bytes() for p in (REPO / "results" / "benchmarks").glob("*.csv")} == committed
