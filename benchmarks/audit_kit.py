"""What the reliability audit's cases are made of (benchmarks/audit.py runs them; benchmarks/audit_boundaries.py
holds the trust-boundary cases): the outcomes and classes, a case and its scratch space, the judges of an answer
(:func:`expect_error`, :func:`expect_value`, :func:`cli`) and the fixtures several classes share. Both case modules
import this one; neither imports the other's cases back."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "results" / "reliability" / "audit.csv"
CORRECT, NAMED, UNHELPFUL, WRONG, TRACE, HANG, BREACH, DATALOSS = (
    "correct answer",
    "named error",
    "unhelpful error",
    "silent wrong",
    "traceback",
    "hang",
    "breach",
    "data loss",
)
OUTCOMES = (CORRECT, NAMED, UNHELPFUL, WRONG, TRACE, HANG, BREACH, DATALOSS)
EXPECTED_TYPES = (ValueError, KeyError, OSError, FloatingPointError)
CLASSES = (
    "degenerate embeddings",
    "integrity",
    "values",
    "locks",
    "file errors",
    "api tracebacks",
    "security",
    "index files",
    "downloads",
    "bounds",
    "links",
    "check before replace",
    "tampered inputs",
    "plausibility",
    "input bounds",
    "messages",
)


@dataclass(frozen=True)
class Case:
    cls: str
    name: str
    run: Callable[[Ctx], tuple[str, str]]
    timeout: float = 120.0


class Ctx:
    """Scratch space of a worker: a fresh folder per case, shared fixtures built once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._n = 0
        self._memo: dict[str, object] = {}

    def folder(self) -> Path:
        self._n += 1
        d = self.root / f"case{self._n}"
        d.mkdir(parents=True)
        return d

    def memo(self, key: str, make: Callable[[], object]) -> object:
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]


# --------------------------------------------------------------------------------------------------- judging
def _one_line(msg: str) -> bool:
    return "\n" not in msg.strip()


def expect_error(fn: Callable[[], object], *needles: str, types: tuple = EXPECTED_TYPES) -> tuple[str, str]:
    """The case must raise one of ``types`` whose one-line message holds every needle."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except types as err:
        msg = str(err)
        missing = [n for n in needles if n not in msg]
        if missing or not _one_line(msg):
            return UNHELPFUL, f"{type(err).__name__}: {msg[:160]} (lacks {missing})"
        return NAMED, f"{type(err).__name__}: {msg[:160]}"
    except Exception as err:  # noqa: BLE001
        return TRACE, f"{type(err).__name__}: {str(err)[:160]}"
    return WRONG, "accepted"


def expect_value(fn: Callable[[], object], check: Callable[[object, list], bool | str]) -> tuple[str, str]:
    """The case must return a value that ``check(value, warnings)`` accepts (True, or a string naming what is
    wrong)."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = fn()
    except EXPECTED_TYPES as err:
        return NAMED, f"refused: {type(err).__name__}: {str(err)[:160]}"
    except Exception as err:  # noqa: BLE001
        return TRACE, f"{type(err).__name__}: {str(err)[:160]}"
    verdict = check(value, [str(w.message) for w in caught])
    if verdict is True:
        return CORRECT, str(value)[:160]
    return WRONG, f"{verdict if isinstance(verdict, str) else 'wrong'}: {str(value)[:160]}"


def cli(argv: list[str], *needles: str, expect_rc: int | None = None) -> tuple[str, str]:
    """Run ``dmllab <argv>`` in-process; an error is expected (non-zero exit, one line naming every needle)."""
    from dmllab.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rc = main(argv)
    except SystemExit as exc:  # argparse: a usage line and "error: argument ..."
        rc = exc.code
    except BaseException as exc:  # noqa: BLE001
        return TRACE, f"{type(exc).__name__}: {str(exc)[:160]}"
    text = err.getvalue().strip()
    last = text.splitlines()[-1] if text else ""
    if rc == 0:
        return WRONG, f"exit 0: {out.getvalue().strip()[-160:]}"
    if "Traceback" in text or "rerun with --debug" in last:
        return TRACE, last[:200]
    if expect_rc is not None and rc != expect_rc:
        return UNHELPFUL, f"exit {rc}: {last[:160]}"
    full = text + "\n" + out.getvalue()
    missing = [n for n in needles if n not in full]
    if missing:
        return UNHELPFUL, f"exit {rc}: {last[:160]} (lacks {missing})"
    return NAMED, f"exit {rc}: {last[:160]}"


@contextlib.contextmanager
def stderr_capture():
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        yield buf


# ---------------------------------------------------------------------------------------------- fixtures
def _clustered(seed: int, n: int = 100, dim: int = 8, classes: int = 12):
    import numpy as np

    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    return (rng.normal(size=(classes, dim))[y] + rng.normal(size=(n, dim))).astype(np.float32), y


def _layouts():
    sys.path.insert(0, str(REPO / "tests" / "data"))
    import data_layouts

    return data_layouts


def _smoke_cfg():
    from dmllab.training import presets

    return presets.get("proxynca++", "synthetic", "smoke")


def _fake_run(ctx: Ctx):
    """A store holding one run written by RunStore.save (no training): (cfg, store)."""
    from dmllab.training import RunStore
    from dmllab.training.config import config_hash
    from dmllab.training.protocol import RunResult

    cfg = _smoke_cfg()
    store = RunStore(ctx.folder() / "runs")
    result = RunResult(
        {"R@1": 0.5, "R@2": 0.6}, [{"epoch": 1, "loss": 1.0}], 1, [], 2.0, config_hash(cfg), 0, "cpu"
    )
    store.save(cfg, 0, result)
    return cfg, store


def _tiny_fs(ctx: Ctx, kib: int = 64) -> Path | None:
    """A tmpfs of ``kib`` KiB (a real full disk), None where it cannot be mounted."""
    d = ctx.folder() / "tiny"
    d.mkdir()
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(d)], capture_output=True)
    return d if ok.returncode == 0 else None


def _unmount(d: Path | None) -> None:
    if d is not None:
        subprocess.run(["umount", str(d)], capture_output=True)


@contextlib.contextmanager
def _enospc():
    """Writes that fail as a full disk would (where no small tmpfs can be mounted)."""
    import builtins

    real_open, real_fdopen = builtins.open, os.fdopen

    class Full(io.RawIOBase):
        def __init__(self, fh):
            self.fh = fh

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            self.fh.close()

        def writable(self):
            return True

    def fake_open(path, mode="r", *a, **k):
        fh = real_open(path, mode, *a, **k)
        return Full(fh) if any(c in mode for c in "wax") else fh

    builtins.open, os.fdopen = fake_open, lambda fd, mode="r", *a, **k: Full(real_fdopen(fd, mode, *a, **k))
    try:
        yield
    finally:
        builtins.open, os.fdopen = real_open, real_fdopen
