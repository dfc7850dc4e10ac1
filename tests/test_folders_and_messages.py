"""Errors name the file and the cause: relative DMLLAB_* folders are resolved once, at the start of a command (the
study's workers and kernels run elsewhere), a dangling link as a folder is named as one, and a long value is cut in
a message instead of echoed whole."""

from __future__ import annotations

import os

import pytest

from dmllab.cli import main
from dmllab.errors import error_message
from dmllab.paths import FOLDER_VARIABLES, resolve_folders


def test_relative_folders_are_made_absolute_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {"DMLLAB_RESULTS": "res", "DMLLAB_CACHE": "~/c", "DMLLAB_FIGURES": str(tmp_path / "figs")}
    resolve_folders(env)
    assert env["DMLLAB_RESULTS"] == str(tmp_path / "res")
    assert env["DMLLAB_CACHE"] == os.path.expanduser("~/c")
    assert env["DMLLAB_FIGURES"] == str(tmp_path / "figs")


@pytest.mark.parametrize("name", FOLDER_VARIABLES)
def test_a_folder_that_is_a_dangling_link_is_named(tmp_path, name):
    link = tmp_path / "folder"
    link.symlink_to(tmp_path / "gone")
    env = {n: str(tmp_path / n.lower()) for n in FOLDER_VARIABLES} | {name: str(link)}
    with pytest.raises(
        ValueError, match=rf"{name} folder {link} is a dangling link \(to {tmp_path / 'gone'}"
    ):
        resolve_folders(env)


def test_the_command_line_resolves_the_folders_before_any_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DMLLAB_RESULTS", "relative-results")
    main(["presets", "--method", "proxynca++", "--profile", "smoke"])
    assert os.environ["DMLLAB_RESULTS"] == str(tmp_path / "relative-results")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path / "dangling"))
    assert main(["presets", "--method", "proxynca++", "--profile", "smoke"]) == 2
    assert "DMLLAB_CACHE folder" in capsys.readouterr().err


def test_a_long_value_is_cut_in_an_error_message():
    message = error_message(ValueError(f"cannot parse {'a' * 100_000!r} as a float for loss.temperature"))
    assert len(message) < 300 and "[100,002 characters]" in message and message.endswith("loss.temperature")
    short = "unknown config key 'run.note'; valid keys: a, b"
    assert error_message(KeyError(short)) == short


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ["study", "--profile", "smoke", "--only", "pnpp_fig3_two_moons", "--plan", "--seeds", "10000000"],
            "--seeds",
        ),
        (["data", "cache", "cub", "/nonexistent", "--shorter-side", str(2**40)], "--shorter-side"),
        (["pretrain", "--width", str(2**63)], "--width"),
        (
            [
                "train",
                "--method",
                "proxynca++",
                "--dataset",
                "synthetic",
                "--profile",
                "smoke",
                "--protocol",
                "mlrc",
                "--mlrc-dim",
                str(2**40),
                "--quiet",
            ],  # fmt: skip
            "--mlrc-dim",
        ),
    ],
)
def test_command_line_integers_have_upper_bounds(argv, words, capsys):
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_usage_error_cuts_a_long_value(capsys) -> None:
    from dmllab.cli import main

    with pytest.raises(SystemExit):
        main(["train", "proxynca++", "--seed", "9" * 5000])
    err = capsys.readouterr().err
    assert "[5,002 characters]" in err and "9" * 200 not in err


def test_tune_bounds_its_trials() -> None:
    from dmllab.pipeline import tune

    with pytest.raises(ValueError, match=r"trials must be an int in 1\.\.10000"):
        tune.tune(["proxynca++"], profile="smoke", trials=tune.MAX_TRIALS + 1)
