"""Shared fixtures for the model tests: isolated caches so no test reads or writes the user's files."""

from __future__ import annotations

import pytest


@pytest.fixture
def isolated_caches(tmp_path, monkeypatch):
    """Point dmllab's cache and torch's hub cache at empty temporary folders."""
    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path / "dmllab-cache"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    return tmp_path
