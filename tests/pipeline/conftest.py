"""Shared fixtures: tiny notebooks that need no dmllab artifact, for the study runner."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

PARAMS = 'profile = "quick"\nseeds = None\ndevice = "auto"\ndata_root = None'


def make_tiny_notebook(path: Path, body: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(PARAMS, metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(body),
    ]
    nbformat.write(nb, path)
    return path


@pytest.fixture
def tiny_notebooks(tmp_path: Path) -> Path:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    make_tiny_notebook(
        folder / "alpha_ok.ipynb",
        "import os, sys\nassert profile == 'smoke', profile\n"
        "open(os.environ['TINY_OUT'] + '/alpha.txt', 'w').write(os.environ['OMP_NUM_THREADS'] + ' ' + sys.executable)",
    )
    make_tiny_notebook(folder / "beta_fails.ipynb", "x = 1\nraise RuntimeError('boom in beta')")
    make_tiny_notebook(folder / "_template.ipynb", "raise SystemExit('templates are never run')")
    return folder
