"""Bounds that keep a command from running away, and the one validation layer the notebooks use too.

``data.num_workers`` (and ``dmllab data cache --workers``) may not exceed the cores this process may use; a
notebook's setup cell checks every parameter with :func:`dmllab.validation.check_parameter`, the checker the
command line and the study use.
"""

from __future__ import annotations

import os
import time

import pytest

from dmllab.cli import main
from dmllab.validation import InvalidValueError, usable_cores

TRAIN = ["train", "--method", "proxynca++", "--dataset", "synthetic", "--profile", "smoke", "--quiet"]


def test_usable_cores_is_the_affinity():
    assert usable_cores() == len(os.sched_getaffinity(0)) >= 1


def test_num_workers_beyond_the_usable_cores_is_one_line_at_once(capsys):
    t0 = time.perf_counter()
    assert main([*TRAIN, "--set", "data.num_workers=10000"]) == 2
    err = capsys.readouterr().err.strip()
    assert time.perf_counter() - t0 < 30  # refused before any worker is started
    cores = usable_cores()
    expected = (
        f"data.num_workers must be 'auto' or an integer in 0..{cores} (the CPU cores this process may use)"
    )
    assert expected in err and "got 10000" in err and "\n" not in err


def test_num_workers_up_to_the_usable_cores_and_auto_are_accepted():
    from dmllab.training import apply_overrides, presets

    cfg = presets.get("proxynca++", "synthetic", "smoke")
    for value in ("0", str(usable_cores()), "auto"):
        apply_overrides(cfg, [f"data.num_workers={value}"])
    for value in (str(usable_cores() + 1), "-1", "1.5"):
        with pytest.raises(InvalidValueError, match="data.num_workers"):
            apply_overrides(cfg, [f"data.num_workers={value}"])


def test_data_cache_workers_beyond_the_usable_cores_is_one_line(tmp_path, capsys):
    argv = ["data", "cache", "cub", str(tmp_path), "--workers", "10000", "--quiet"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert f"--workers must be an int in 1..{usable_cores()}" in err and "\n" not in err


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("steps", 0, "parameter steps must be a positive integer"),
        (
            "temperatures",
            [1.0, 0.0],
            "parameter temperatures must be a non-empty list, each a finite number > 0",
        ),
        ("seeds", [0, -2], "parameter seeds must be"),
    ],
)
def test_the_notebook_setup_checks_ranges_with_the_validation_layer(
    name, value, needle, tmp_path, monkeypatch
):
    """Values of the right kind but out of range: refused by the setup cell itself (the same message the
    validation layer gives), prefixed by the notebook's name."""
    from dmllab.pipeline import notebook as nb

    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "results"))
    namespace = {"profile": "smoke", "execution": "device=cpu", name: value}
    with pytest.raises(InvalidValueError, match=f"notebook pnpp_fig3_two_moons: {needle}"):
        nb.setup(namespace, "pnpp_fig3_two_moons")


def test_every_value_the_setup_resolves_goes_through_check_parameter(tmp_path, monkeypatch):
    from dmllab.experiments import params as params_mod
    from dmllab.pipeline import notebook as nb

    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "results"))
    checked: dict[str, object] = {}
    real = params_mod.check_parameter

    def recording(name, value):
        checked[name] = value
        real(name, value)

    monkeypatch.setattr(params_mod, "check_parameter", recording)
    context = nb.setup(
        {"profile": "smoke", "execution": "device=cpu", "train_missing": False}, "pnpp_fig3_two_moons"
    )
    resolved = {k: v for k, v in context.params.values.items() if v is not None}
    assert set(resolved) <= set(checked) and "train_missing" in checked
    assert checked["seeds"] == context.seeds
