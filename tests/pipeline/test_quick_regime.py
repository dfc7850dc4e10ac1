"""benchmarks/quick_regime.py: its ``--dry`` mode trains every knob at toy size (smoke profile, a temporary cache)
and writes the CSV the regime reads; its projection of the study's cost against the formula written out."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import quick_regime  # noqa: E402

from dmllab.experiments.gate import REGIME_TRAIN_R1  # noqa: E402


def _study(tmp_path: Path) -> Path:
    path = tmp_path / "study.csv"
    path.write_text(
        "pass,study_s,train_s,runs,trained,run_mean_s\n"
        "from_empty,1000,600,50,50,20\n"
        "resumed,700,400,100,40,16\n"
        "unchanged,20,0.01,100,0,\n"
    )
    return path


def test_the_projection_scales_the_last_studys_training_by_the_relative_cost(tmp_path):
    other, train = quick_regime.study_projection(_study(tmp_path))
    assert (other, train) == pytest.approx((300.0, 400.0 * 100 / 40))  # the resumed row, all 100 runs trained
    rows = [
        {"method": "m", "candidate": "preset", "cpu_s": 10.0, "train_R1": 50.0},
        {"method": "m", "candidate": "long", "cpu_s": 30.0, "train_R1": REGIME_TRAIN_R1},
        {"method": "n", "candidate": "long", "cpu_s": 5.0, "train_R1": 90.0},
    ]
    out = quick_regime.with_projection(rows, (other, train))
    assert [r["relative_cost"] for r in out[:2]] == pytest.approx([1.0, 3.0])
    assert out[1]["projected_study_min"] == pytest.approx((300.0 + 1000.0 * 3) / 60)
    assert [r["fits"] for r in out] == [False, True, True]
    assert out[1]["in_budget"] == ((300.0 + 3000.0) / 60 <= quick_regime.BUDGET_MIN)
    assert math.isnan(out[2]["relative_cost"]) and not out[2]["in_budget"]  # no preset row of its method
    assert quick_regime.study_projection(tmp_path / "absent.csv") is None


@pytest.mark.slow
def test_dry_trains_every_knob_and_writes_its_rows(tmp_path):
    committed = {p.name: p.read_bytes() for p in (REPO / "results" / "benchmarks").glob("*.csv")}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "DMLLAB_RESULTS": str(tmp_path / "results"),
    }
    out = tmp_path / "regime.csv"
    script = str(REPO / "benchmarks" / "quick_regime.py")
    cmd = [sys.executable, script, "--dry", "--out", str(out), "--study", str(_study(tmp_path))]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    with out.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["method"], r["candidate"]) for r in rows) == sorted(
        (m, c) for m in quick_regime.METHODS for c in quick_regime.DRY_CANDIDATES
    )
    order = [(quick_regime.METHODS.index(r["method"]), float(r["cpu_s"])) for r in rows]
    assert order == sorted(order)  # by method, then cost
    assert {r["epochs"] for r in rows if r["candidate"] == "e1"} == {"1"}
    for r in rows:
        assert 0 <= float(r["train_R1"]) <= 100 and 0 <= float(r["test_R1"]) <= 100, r
        assert float(r["cpu_s"]) > 0 and r["torch_threads"] == "1" and r["draw"] == str(quick_regime.DRAW), r
    assert {float(r["relative_cost"]) for r in rows if r["candidate"] == "preset"} == {1.0}
    other = tmp_path / "other.csv"
    once = [*cmd[:3], "--out", str(other), "--only", "e1", "--methods", quick_regime.METHODS[0]]
    assert subprocess.run(once, capture_output=True, text=True, env=env, cwd=REPO).returncode == 0
    merge = [*cmd, "--methods", "", "--append", "--merge", str(other)]
    done = subprocess.run(merge, capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    with out.open(newline="") as fh:
        merged = list(csv.DictReader(fh))
    with other.open(newline="") as fh:
        (measured,) = list(csv.DictReader(fh))
    assert len(merged) == len(rows)  # a candidate measured again replaces its row
    (e1,) = [r for r in merged if (r["method"], r["candidate"]) == (quick_regime.METHODS[0], "e1")]
    assert e1["cpu_s"] == measured["cpu_s"]
    assert {p.name: p.read_bytes() for p in (REPO / "results" / "benchmarks").glob("*.csv")} == committed
