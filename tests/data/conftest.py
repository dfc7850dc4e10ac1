"""Fixtures: miniature copies of the four real benchmarks (builders in data_layouts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_layouts import make_cars, make_cub, make_inshop, make_sop


@pytest.fixture
def cub_root(tmp_path: Path) -> Path:
    return make_cub(tmp_path / "CUB_200_2011")


@pytest.fixture
def cars_root(tmp_path: Path) -> Path:
    return make_cars(tmp_path / "cars")


@pytest.fixture
def sop_root(tmp_path: Path) -> Path:
    return make_sop(tmp_path / "Stanford_Online_Products")


@pytest.fixture
def inshop_root(tmp_path: Path) -> Path:
    return make_inshop(tmp_path / "In-shop")
