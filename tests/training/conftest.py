"""Shared fixtures: every test writes caches, runs and checkpoints under one temporary folder."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("dmllab")
    old = {k: os.environ.get(k) for k in ("DMLLAB_CACHE", "DMLLAB_RESULTS", "DMLLAB_FIGURES")}
    os.environ["DMLLAB_CACHE"] = str(root / "cache")
    os.environ["DMLLAB_RESULTS"] = str(root / "results")
    os.environ["DMLLAB_FIGURES"] = str(root / "figures")
    yield root
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def smoke_cfg():
    """ProxyNCA++ on the smoke profile (24 synthetic classes x 10 images at 32x32, 2 epochs)."""
    from dmllab.training import presets

    return presets.get("proxynca++", "synthetic", "smoke")
