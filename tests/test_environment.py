"""environment.yml (the conda set-up) installs what pyproject.toml declares, from conda-forge only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
#: PyPI names that conda-forge spells otherwise.
CONDA_NAMES = {"torch": "pytorch", "playwright": "playwright-python"}  # conda-forge spells these so
#: What environment.yml adds of its own: the interpreter and the installer of `pip install -e .`.
CONDA_ONLY = {"python", "pip"}


def _split(spec: str) -> tuple[str, str]:
    """``name>=1.2`` -> ``("name", ">=1.2")``, the name lower-cased."""
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*?)\s*$", spec)
    assert m, spec
    return m.group(1).lower(), m.group(2).replace(" ", "")


def test_environment_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    wanted = {CONDA_NAMES.get(name, name): version for name, version in map(_split, declared)}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"], "conda-forge only: the pytorch channel is no longer published"
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = [d for d in env["dependencies"] if isinstance(d, dict)]
    listed = dict(map(_split, conda))
    assert len(listed) == len(conda), "a package is listed twice"
    assert {k: v for k, v in listed.items() if k not in CONDA_ONLY} == wanted
    assert pip == [{"pip": ["-e ."]}], "dmllab itself only: every dependency comes from conda-forge"
