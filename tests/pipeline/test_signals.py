"""Ctrl-C and SIGTERM stop a study: a real ``dmllab study`` in its own process group (as a terminal runs it),
signalled while its workers train or its notebook kernels run, exits within 5 s with the summary of what
finished, and leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="process groups and /proc: Linux"
)

REPO = Path(__file__).resolve().parents[2]
STOP_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")  # the generated smoke benchmark, shared by both studies


def _study(tmp_path: Path, cache: Path, only: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "DMLLAB_RESULTS": str(tmp_path / "results"),
        "DMLLAB_CACHE": str(cache),
        "DMLLAB_FIGURES": str(tmp_path / "figures"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "dmllab.cli", "study", "--profile", "smoke", "--only", only, "--jobs", "2"]
    log = open(tmp_path / "study.log", "w")  # noqa: SIM115  (closed with the process)
    return subprocess.Popen(
        [*cmd, "--no-progress", "--device", "cpu"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, which the test signals as a terminal would
    )


def _wait_for(proc: subprocess.Popen, ready, what: str, timeout: float = 240.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the study ended (exit {proc.returncode}) before {what}")
        if ready():
            return
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"{what} did not happen within {timeout:.0f} s")


def _descendants(pid: int) -> list:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _alive(procs: list) -> list:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append((p.pid, " ".join(p.cmdline())[-80:]))
        except psutil.NoSuchProcess:
            continue
    return out


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop_and_check(proc: subprocess.Popen, sig: int, tmp_path: Path) -> str:
    """Send ``sig`` to the study's process group; it exits within :data:`STOP_WITHIN_S` with 128 + sig, and no
    process it started (workers, kernels) and nothing of its process group is left."""
    started = _descendants(proc.pid)
    sent = time.time()
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the study did not exit within 30 s of the signal")
    took = time.time() - sent
    log = (tmp_path / "study.log").read_text()
    assert took <= STOP_WITHIN_S, f"the study took {took:.1f} s to stop:\n{log[-2000:]}"
    assert proc.returncode == 128 + sig, log[-2000:]
    deadline = (
        sent + STOP_WITHIN_S
    )  # what it started (workers, kernels, its resource tracker) is gone by then
    while time.time() < deadline and (_alive(started) or _group_alive(proc.pid)):
        time.sleep(0.05)
    assert not _alive(started), f"left behind: {_alive(started)}"
    assert not _group_alive(proc.pid), "its process group still has a member"
    assert f"STOPPED by {signal.Signals(sig).name}" in log
    return log


def test_ctrl_c_stops_a_training_study(tmp_path, cache):
    """SIGINT to the process group (what Ctrl-C sends) once the first run has started training."""
    proc = _study(tmp_path, cache, "pnpp_table7_10_ablation")
    runs = tmp_path / "results" / "runs"
    _wait_for(proc, lambda: runs.exists() and any(runs.iterdir()), "the first run started")
    time.sleep(0.5)
    log = _stop_and_check(proc, signal.SIGINT, tmp_path)
    assert "training: " in log and "notebooks ok" in log  # the summary of what finished


def test_sigterm_stops_the_notebooks_and_their_kernels(tmp_path, cache):
    """SIGTERM to the process group while notebook kernels (children of the workers) run."""
    proc = _study(tmp_path, cache, "pnpp_fig3_two_moons,heated_fig2_digits,ps_fig2_gaussian")

    def kernels() -> bool:
        return any("ipykernel" in " ".join(p.cmdline()) for p in _descendants(proc.pid) if p.is_running())

    _wait_for(proc, kernels, "a notebook kernel started")
    _stop_and_check(proc, signal.SIGTERM, tmp_path)
