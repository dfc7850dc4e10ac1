"""A smoke study writes nothing through a link: every file it wrote (run store, checkpoints, result CSVs, executed
notebooks, their stderr logs and stamps, figures, the report) is replaced by a link to a file elsewhere, the study
runs again with --force, and every link's target is found untouched and every path a regular file again. The links
at the runs' metrics.json point at damaged copies, so the runs are set aside and trained again (--force re-runs the
notebooks, not stored runs): the second study writes every path the first one wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARTIFACT = (
    "pa_fig1_convergence"  # four smoke runs (two methods, two seeds), a notebook and a plotting notebook
)


def _study(root: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DMLLAB_CACHE": str(root / "cache"),
        "DMLLAB_RESULTS": str(root / "results"),
        "DMLLAB_FIGURES": str(root / "figures"),
    }
    argv = [
        "study",
        "--profile",
        "smoke",
        "--only",
        ARTIFACT,
        "--jobs",
        "2",
        "--no-progress",
        "--device",
        "cpu",
    ]
    return subprocess.run(
        [sys.executable, "-m", "dmllab.cli", *argv, *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=900,
    )


def _outputs(root: Path) -> list[Path]:
    """Every file the study wrote that a second study with --force writes again (not the generated data caches,
    which are only read once there, nor the lock files, which are never written through)."""
    found = [
        p for d in ("results", "figures", "cache/checkpoints") for p in (root / d).rglob("*") if p.is_file()
    ]
    return sorted(p for p in found if not p.name.endswith(".lock"))


@pytest.mark.slow
def test_a_study_replaces_links_planted_at_every_output_path(tmp_path):
    root = tmp_path / "study"
    root.mkdir()
    first = _study(root)
    assert first.returncode == 0, first.stderr[-2000:]
    outputs = _outputs(root)
    kinds = {p.suffix for p in outputs}
    assert {".ipynb", ".log", ".stamp", ".csv", ".json", ".pt", ".png", ".html"} <= kinds, kinds
    victims = tmp_path / "elsewhere"
    victims.mkdir()
    planted = {}
    for i, path in enumerate(outputs):
        target = victims / f"{i}-{path.name}"
        retrain = path.name == "metrics.json"  # a damaged run: set aside and trained again, writing its files
        target.write_bytes(
            b"not json" if retrain else path.read_bytes()
        )  # else a copy, as a shared folder holds
        path.unlink()
        path.symlink_to(target)
        planted[path] = (target, target.read_bytes())
    second = _study(root, "--force")
    assert second.returncode == 0, second.stderr[-2000:]
    changed = [str(t) for t, data in planted.values() if t.read_bytes() != data]
    assert changed == [], f"written through a link: {changed}"
    still = [str(p) for p in planted if p.is_symlink()]
    assert still == [], f"links a second study kept instead of replacing: {still}"
