from __future__ import annotations

import pytest

from dmllab.cli import main


def test_wrong_data_root_is_a_clean_error(tmp_path, capsys):
    code = main(
        [
            "train",
            "--method",
            "proxynca++",
            "--dataset",
            "cub",
            "--profile",
            "smoke",
            "--data-root",
            str(tmp_path / "missing"),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "does not exist" in err and "Traceback" not in err


def test_unknown_set_key_lists_valid_keys(capsys):
    code = main(
        [
            "train",
            "--method",
            "proxynca++",
            "--dataset",
            "synthetic",
            "--profile",
            "smoke",
            "--set",
            "loss.tempx=1",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    # the loss's constructor keywords are the valid ones
    assert code == 2 and "loss.tempx" in err and "temperature" in err.partition("valid:")[2]


def test_presets_lists_methods(capsys):
    assert main(["presets", "--method", "proxynca++", "--profile", "paper"]) == 0
    out = capsys.readouterr().out
    assert "heated_softmax" in out and "lr 0.004/proxy 400" in out


@pytest.mark.parametrize("method", ["proxyncaa"])
def test_unknown_method(method, capsys):
    assert main(["train", "--method", method, "--dataset", "cub", "--quiet"]) == 2
    assert "valid methods" in capsys.readouterr().err


@pytest.mark.parametrize("given", [["--seed", "1", "--set", "run.seed=2"], ["--set", "run.seed=2"]])
def test_a_seed_and_a_run_seed_that_disagree_are_an_error(capsys, given):
    argv = [
        "train",
        "--method",
        "proxynca++",
        "--dataset",
        "synthetic",
        "--profile",
        "smoke",
        "--quiet",
        *given,
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    seed = given[1] if given[0] == "--seed" else "0"
    assert (
        f"--seed {seed} and --set run.seed=2 disagree: a run has one seed" in err
        and len(err.splitlines()) == 1
    )
