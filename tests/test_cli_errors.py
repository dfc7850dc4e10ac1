"""Every user-facing failure of the CLI ends in one line ``dmllab: error: ...`` and a non-zero exit status;
a traceback only with ``--debug``."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest
import torch

import dmllab.training
from dmllab.cli import error_message, main

sys.path.insert(0, str(Path(__file__).resolve().parent / "data"))
from data_layouts import make_cub  # noqa: E402

TRAIN = ["train", "--method", "proxynca++", "--dataset", "synthetic", "--profile", "smoke", "--quiet"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path / "cache"))


def one_line_error(capsys, code, expected_code=2) -> str:
    err = capsys.readouterr().err
    assert code == expected_code, err
    assert err.startswith("dmllab: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "weights_only=False" not in err
    return err


def _reading(err):
    err.dmllab_action = "reading"  # as dmllab.fileio.naming marks it
    return err


def failing_run(exc):
    def run(*args, **kwargs):
        raise exc

    return run


@pytest.mark.parametrize(
    ("exc", "expect"),
    [
        (
            dmllab.training.NonFiniteLossError(
                "non-finite loss (nan) at stage stage1, epoch 3, step 7; kept"
            ),
            "non-finite loss (nan) at stage stage1, epoch 3, step 7; kept; the training diverged: lower the learning rate",
        ),
        (
            OSError(errno.ENOSPC, "No space left on device", "/data/runs/x/last.pt"),
            "no space left on device writing /data/runs/x/last.pt",
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "/ro/results"),
            "read-only file system writing /ro/results",
        ),
        (PermissionError(errno.EACCES, "Permission denied", "/root/x"), "permission denied: /root/x"),
        (
            _reading(PermissionError(errno.EACCES, "Permission denied", "/d/images.txt")),
            "denied reading /d/images.txt",
        ),
    ],
)
def test_training_failures_are_one_line(monkeypatch, capsys, exc, expect):
    monkeypatch.setattr(dmllab.training, "run", failing_run(exc))
    err = one_line_error(capsys, main(TRAIN))
    assert expect in err


def test_undecodable_image_during_training(monkeypatch, capsys):
    from dmllab.data import ImageLoadError

    monkeypatch.setattr(
        dmllab.training, "run", failing_run(ImageLoadError("cannot decode image /d/a.jpg: bad"))
    )
    assert "cannot decode image /d/a.jpg" in one_line_error(capsys, main(TRAIN))


def test_unexpected_errors_are_one_line_too_and_debug_shows_the_traceback(monkeypatch, capsys):
    monkeypatch.setattr(dmllab.training, "run", failing_run(ZeroDivisionError("division by zero")))
    err = one_line_error(capsys, main(TRAIN), expected_code=1)
    assert "ZeroDivisionError: division by zero" in err and "--debug" in err
    with pytest.raises(ZeroDivisionError):
        main([*TRAIN, "--debug"])  # accepted after the sub-command as well
    with pytest.raises(ZeroDivisionError):
        main(["--debug", *TRAIN])


def test_presets_generic_handler(monkeypatch, capsys):
    from dmllab.training import presets

    monkeypatch.setattr(presets, "list_methods", failing_run(RuntimeError("registry broken")))
    assert "registry broken" in one_line_error(capsys, main(["presets"]), expected_code=1)


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["--seed", "-1"], "run.seed must be an integer >= 0, got -1"),
        (["--set", "schedule.epochs=0"], "schedule.epochs must be a positive integer, got 0"),
        # the loss's own check (its constructor, run at a toy size before anything else)
        (["--set", "loss.temperature=nan"], "loss: temperature must be a finite number > 0; got nan"),
        (["--set", "loss.temperature=-1"], "loss: temperature must be a finite number > 0; got -1"),
    ],
)
def test_config_values_rejected_at_once(capsys, argv, expect):
    assert expect in one_line_error(capsys, main([*TRAIN, *argv]))


def test_malformed_index_named_by_train_and_data_check(tmp_path, capsys):
    root = make_cub(tmp_path / "CUB_200_2011")
    lines = (root / "images.txt").read_text().splitlines()
    lines[2] = lines[2].split()[0]  # a truncated row
    (root / "images.txt").write_text("\n".join(lines) + "\n")
    argv = ["train", "--method", "proxynca++", "--dataset", "cub", "--profile", "smoke", "--quiet"]
    err = one_line_error(capsys, main([*argv, "--data-root", str(root)]))
    assert "images.txt, line 3: expected 2 columns" in err
    assert main(["data", "check", "cub", str(root), "--quiet"]) == 1
    assert "images.txt, line 3" in capsys.readouterr().out


def test_evaluate_corrupt_or_missing_model_files(tmp_path, capsys):
    bad = tmp_path / "final.pt"
    bad.write_bytes(b"PK\x03\x04 truncated zip")
    assert "model file" in one_line_error(capsys, main(["evaluate", str(bad)]))
    assert "corrupt or truncated" in error_message(_raised(lambda: main(["--debug", "evaluate", str(bad)])))
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    assert str(empty) in one_line_error(capsys, main(["evaluate", str(empty)]))
    folder = tmp_path / "run"
    folder.mkdir()
    assert "is not a stored run" in one_line_error(capsys, main(["evaluate", str(folder)]))
    assert "no run folder or checkpoint" in one_line_error(capsys, main(["evaluate", str(tmp_path / "x")]))


def _raised(fn):
    try:
        fn()
    except Exception as err:  # noqa: BLE001
        return err
    raise AssertionError("no error")


@pytest.mark.parametrize("kind", ["folder", "empty", "corrupt"])
def test_weights_file_problems(tmp_path, capsys, kind):
    path = tmp_path / "w.pth"
    if kind == "folder":
        path.mkdir()
        torch.save({}, path / "inner.pth")
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        torch.save({"w": torch.ones(3)}, path)
        path.write_bytes(path.read_bytes()[:40])
    argv = [*TRAIN, "--set", f"model.weights_path={path}"]
    err = one_line_error(capsys, main(argv))
    assert {
        "folder": "is a folder (it holds inner.pth)",
        "empty": "is empty (0 bytes)",
        "corrupt": "is corrupt or not a PyTorch state-dict file",
    }[kind] in err


def test_error_message_is_one_line_whatever_the_exception():
    msg = error_message(ValueError("first line\n  second line"))
    assert msg == "first line second line"
    assert error_message(KeyError("unknown method 'x'")) == "unknown method 'x'"
    assert os.linesep not in error_message(OSError(errno.ENOSPC, "No space left on device"))


def test_python_dash_m_dmllab_is_the_command_line():
    """``python -m dmllab`` runs the same command line as the ``dmllab`` script."""
    import subprocess

    root = str(Path(dmllab.training.__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-m", "dmllab", "--help"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: dmllab") and "study" in out.stdout
