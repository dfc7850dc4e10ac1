"""JupyterLab as ``make lab`` starts it (:mod:`dmllab.pipeline.lab`), driven in headless Chromium: a committed
notebook opens unmodified, runs on the smoke profile, and its save leaves the checkout as it was while the run,
outputs included, lands in the git-ignored copy."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

from dmllab import paths
from dmllab.pipeline import browser, lab
from dmllab.pipeline.template import notebooks_dir, stale_notebooks

STEM = "ps_fig2_gaussian"  # the quickest notebook on the smoke profile that has verdicts and a figure


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _git_status() -> str | None:
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "notebooks/"],
            cwd=paths.repo_root(),
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout


@pytest.fixture
def chromium() -> str:
    found = browser.find_chromium()
    if found is None:
        pytest.skip("no chromium executable (install the OS package 'chromium')")
    return found


@pytest.fixture
def sync_api():
    return pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")


@pytest.fixture
def server(tmp_path, monkeypatch):
    """JupyterLab on a free port with a token; its results and caches (and this test's) under ``tmp_path``."""
    for var in paths.FOLDER_VARIABLES:
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
    }
    cmd = [
        sys.executable,
        "-m",
        "dmllab.pipeline.lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        "--LabApp.expose_app_in_browser=True",
        f"--LabApp.user_settings_dir={tmp_path / 'lab-settings'}",
        f"--LabApp.workspaces_dir={tmp_path / 'lab-workspaces'}",
    ]
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start: {(tmp_path / 'server.log').read_text()[-3000:]}")
                time.sleep(0.3)
        yield base, token, tmp_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


# The notebook has unsaved changes (what the dot on its tab shows).
_DIRTY = "() => window.jupyterapp.shell.currentWidget.context.model.dirty"
_KERNEL = "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel?.status"
_ALL_RAN = f"""() => ({_KERNEL})() === 'idle' && window.jupyterapp.shell.currentWidget.content.widgets
  .filter(c => c.model.type === 'code').every(c => c.model.executionCount !== null)"""

_SET_PARAMETERS = """() => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets
    .find(c => (c.model.getMetadata('tags') || []).includes('parameters'));
  const source = cell.model.sharedModel.getSource();
  cell.model.sharedModel.setSource(
    source.replace('profile = "quick"', 'profile = "smoke"').replace('execution = None', 'execution = "device=cpu"'));
}"""


def _run_in_lab(sync_api, chromium: str, base: str, token: str) -> None:
    """Open the notebook, check that it opens unmodified, set the smoke profile, run every cell, save (Ctrl+S)."""
    with sync_api.sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = chrome.new_page()
            page.goto(f"{base}/lab/tree/notebooks/{STEM}.ipynb?token={token}")
            page.wait_for_function(f"() => ({_KERNEL})() === 'idle'", timeout=60_000)
            page.wait_for_timeout(1000)  # the kernel's info reply reaches the notebook's metadata
            assert not page.evaluate(_DIRTY), "opening the notebook changed it"
            page.evaluate(_SET_PARAMETERS)
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(_ALL_RAN, timeout=120_000, polling=500)
            page.locator(".jp-Notebook").first.click()
            assert page.evaluate(_DIRTY)
            page.keyboard.press("Control+s")
            page.wait_for_function(f"() => !({_DIRTY})()", timeout=30_000)
        finally:
            chrome.close()


def test_lab_runs_a_notebook_and_leaves_the_checkout_clean(chromium, sync_api, server):
    base, token, tmp_path = server
    tracked = notebooks_dir() / f"{STEM}.ipynb"
    before, status = tracked.read_bytes(), _git_status()
    try:
        _run_in_lab(sync_api, chromium, base, token)
    finally:
        if tracked.read_bytes() != before:  # the failure below, without leaving the checkout dirty
            tracked.write_bytes(before)
            pytest.fail("the save wrote into the committed notebook")
    assert _git_status() == status
    assert stale_notebooks(only=[STEM]) == []
    copy = lab.saved_copy(STEM)
    assert copy.is_relative_to(tmp_path), copy
    saved = nbformat.read(copy, as_version=4)
    assert 'profile = "smoke"' in saved.cells[1].source, "the copy holds the notebook as edited in Lab"
    outputs = [o for c in saved.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"], outputs
    text = json.dumps(outputs)
    assert "TqdmWarning" not in text
    verdicts = next(c for c in saved.cells if c.cell_type == "code" and c.source == "A.verdicts()")
    html = verdicts.outputs[0]["data"]["text/html"]
    assert "NaN" not in html and "None" not in html and "inconclusive" in html
    assert "<td" in html and "..." not in html


def test_a_notebook_kernel_trains_as_the_study_does():
    """After the setup cell a kernel runs torch on the study's threads (one on the CPU) and tqdm.auto's bars are
    plain text, without ipywidgets' warning in the notebook."""
    import nbclient

    from dmllab.pipeline.execute import ensure_kernel
    from dmllab.pipeline.jobs import threads_per_worker

    cell = nbformat.v4.new_code_cell(
        "import dmllab.pipeline.notebook as nb\n"
        f'A = nb.setup({{"profile": "smoke", "execution": "device=cpu"}}, "{STEM}")\n'
        "import torch\nfrom tqdm.auto import tqdm\n"
        'list(tqdm(range(3), desc="steps"))\nprint("threads", torch.get_num_threads())'
    )
    ran = nbclient.NotebookClient(
        nbformat.v4.new_notebook(cells=[cell]), kernel_name=ensure_kernel()
    ).execute()
    streams = {name: "" for name in ("stdout", "stderr")}
    for out in ran.cells[0].outputs:
        streams[out.name] += out.text
    assert f"threads {threads_per_worker('cpu', 1)}\n" in streams["stdout"]
    assert "steps: 100%" in streams["stderr"] and "Warning" not in streams["stderr"], streams["stderr"]
