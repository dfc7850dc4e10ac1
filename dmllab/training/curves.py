"""Live curves: a run's per-epoch metrics in its run folder while it trains, and ``dmllab runs``.

:class:`LiveCurves` appends one JSON line per epoch to ``<run folder>/curves.jsonl`` as the epoch ends (the
history row: loss, learning rates, validation metrics, plus images/s and elapsed time), one ``write`` of a whole
line on a file opened for appending, flushed at once: a reader (``tail -f``, ``pandas.read_json(lines=True)``,
:func:`read_curves`) sees every finished epoch, never a partial row. :class:`TensorBoardCurves` writes the same
values as TensorBoard scalars to ``<run folder>/tensorboard/`` where TensorBoard is installed
(``pip install dmllab[tensorboard]``). The run store (:func:`dmllab.training.store.run`) attaches both.

The curves are a live log, not the run's record: ``history.csv`` is (checksummed, written when the run ends).
A run resumed from its epoch checkpoint first drops the lines of the epochs it trains again, so the file holds
each epoch once. ``dmllab runs`` (:func:`run_states`) lists the run store's runs with their state and last epoch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from dmllab.training.callbacks import Callback

CURVES_FILE = "curves.jsonl"
TENSORBOARD_DIR = "tensorboard"
#: What the run store carries from a training run's folder into its finished one.
LIVE_FILES = (CURVES_FILE, TENSORBOARD_DIR)

Trainer = Any


def _clean(value: Any) -> Any:
    """A JSON value: floats with NaN/inf as None (strict JSON); ints, bools and strings as they are."""
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    value = float(value)
    return value if math.isfinite(value) else None


def read_curves(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a curves file (``[]`` when it does not exist); a last line still being written is left out."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            break  # only the last line can be partial (one write per line)
    return rows


class _EpochMeter(Callback):
    """What both writers add to a history row: the epoch's images, images/s (over the training steps, data
    included, evaluation excluded) and the seconds since the stage started in this process."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self._start: tuple[int, float] = (0, 0.0)

    def _train_seconds(self, trainer: Trainer) -> float:
        return trainer.timings["data"] + trainer.timings["step"]

    def on_train_start(self, trainer: Trainer) -> None:
        self.t0 = time.perf_counter()

    def on_epoch_start(self, trainer: Trainer, epoch: int, sched_epoch: int) -> None:
        self._start = (trainer.images, self._train_seconds(trainer))

    def values(self, trainer: Trainer, row: dict) -> dict[str, Any]:
        images = trainer.images - self._start[0]
        seconds = self._train_seconds(trainer) - self._start[1]
        return {
            **{k: _clean(v) for k, v in row.items()},
            "total_epochs": trainer.state.plan.total_epochs,
            "images": images,
            "images_per_s": images / seconds if seconds > 0 else None,
            "elapsed_s": time.perf_counter() - self.t0,
            "device": str(trainer.device),
        }


class LiveCurves(_EpochMeter):
    """Appends every epoch's row to ``folder/curves.jsonl`` as the epoch ends (module docstring).

    Args:
        folder: the run folder (made on the first epoch).
        identity: what every row also says (method, dataset, profile), so that a line reads on its own.
    """

    def __init__(self, folder: str | os.PathLike, identity: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.path = Path(folder) / CURVES_FILE
        self.identity = dict(identity or {})

    def on_train_start(self, trainer: Trainer) -> None:
        """Keep the lines before the epochs this stage trains now (a resumed or retrained run)."""
        super().on_train_start(trainer)
        stage, done = trainer.state.plan.name, trainer.state.epoch
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return
        rows = read_curves(self.path)
        cut = next(
            (i for i, r in enumerate(rows) if r.get("stage") == stage and r.get("epoch", 0) > done), None
        )
        if cut is None and len(rows) == len(lines):
            return  # nothing trained again, no partial line
        from dmllab.fileio import write_atomic

        write_atomic(self.path, "".join(json.dumps(r) + "\n" for r in rows[:cut]).encode())

    def on_epoch_end(self, trainer: Trainer, epoch: int, row: dict) -> None:
        line = json.dumps({**self.identity, **self.values(trainer, row), "time": time.time()}) + "\n"
        from dmllab.fileio import naming

        with naming(self.path, "writing"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as fh:  # one write of the whole line (under the buffer's size)
                fh.write(line)  # closing flushes it


def tensorboard_available() -> bool:
    """Whether TensorBoard is installed (the ``tensorboard`` extra); nothing is imported to find out."""
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoardCurves(_EpochMeter):
    """The same values as :class:`LiveCurves` as TensorBoard scalars under ``folder/tensorboard/``, tagged
    ``<stage>/<name>`` with the epoch as the step (needs TensorBoard: :func:`tensorboard_available`)."""

    def __init__(self, folder: str | os.PathLike) -> None:
        super().__init__()
        self.log_dir = Path(folder) / TENSORBOARD_DIR
        self.writer = None

    def on_epoch_end(self, trainer: Trainer, epoch: int, row: dict) -> None:
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.log_dir))
        stage = row.get("stage", "run")
        for name, value in self.values(trainer, row).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and name not in ("epoch",):
                self.writer.add_scalar(f"{stage}/{name}", value, global_step=epoch)
        self.writer.flush()

    def on_stage_end(self, trainer: Trainer) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def curve_callbacks(folder: str | os.PathLike, identity: dict[str, Any]) -> list[Callback]:
    """The live-curve callbacks of a run whose folder is ``folder``: :class:`LiveCurves`, and
    :class:`TensorBoardCurves` where TensorBoard is installed."""
    hooks: list[Callback] = [LiveCurves(folder, identity)]
    if tensorboard_available():
        hooks.append(TensorBoardCurves(folder))
    return hooks


# ---------------------------------------------------------------------------------------------- dmllab runs
def run_states(root: str | os.PathLike) -> list[dict[str, Any]]:
    """Every run folder of the run store ``root`` that has curves or a result: its run (``key/seed<k>``), state
    (``training``: its lock is held by a running process and it has no result yet; ``stopped``: neither;
    ``done``; ``diverged``), its last curve row and the seconds since that row was written; newest first."""
    from dmllab.locks import is_held

    root = Path(root)
    out = []
    for folder in root.glob("*/seed*"):
        if not folder.is_dir() or folder.name.startswith("."):
            continue
        curves = folder / CURVES_FILE
        rows = read_curves(curves)
        if (folder / "metrics.json").is_file():
            state = "done"
        elif (folder / "diverged.json").is_file():
            state = "diverged"
        elif rows:
            lock = root / ".locks" / f"{folder.parent.name}.{folder.name}.lock"
            state = "training" if is_held(lock) else "stopped"
        else:
            continue
        mtime = curves.stat().st_mtime if curves.is_file() else (folder / "metrics.json").stat().st_mtime
        out.append({"run": f"{folder.parent.name}/{folder.name}", "state": state,
                    "last": rows[-1] if rows else {}, "age_s": time.time() - mtime})  # fmt: skip
    return sorted(out, key=lambda r: r["age_s"])


def _fmt_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _num(row: dict[str, Any], key: str, fmt: str, scale: float = 1.0) -> str:
    v = row.get(key)
    return format(scale * v, fmt) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


#: The columns of ``dmllab runs``.
RUNS_HEAD = (
    "run",
    "state",
    "method",
    "dataset",
    "profile",
    "stage",
    "epoch",
    "loss",
    "val R@1",
    "img/s",
    "updated",
)


def format_runs(states: list[dict[str, Any]]) -> str:
    """``dmllab runs``' table: one line per run (:func:`run_states`)."""
    lines = [RUNS_HEAD]
    for s in states:
        r = s["last"]
        epoch = f"{r['epoch']}/{r.get('total_epochs', '?')}" if "epoch" in r else "-"
        lines.append((s["run"], s["state"], r.get("method", "-"), r.get("dataset", "-"), r.get("profile", "-"),
                      r.get("stage", "-"), epoch, _num(r, "loss", ".4f"), _num(r, "val_R@1", ".2f", 100.0),
                      _num(r, "images_per_s", ".0f"), _fmt_age(s["age_s"]) + " ago"))  # fmt: skip
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(RUNS_HEAD))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def _runs(args: argparse.Namespace) -> int:
    from dmllab import paths

    root = Path(args.store) if args.store else paths.runs_dir()
    states = run_states(root)
    if not args.all:
        states = [s for s in states if s["state"] in ("training", "stopped")] or states[: args.last]
    states = [s for s in states if args.profile in (None, s["last"].get("profile"))][: args.last]
    if not states:
        print(f"no runs with curves in {root}")
        return 0
    print(format_runs(states))
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list the run store's runs in progress with their last epoch",
        description="List the runs of the run store that are training (or stopped before their end) with their "
        "last finished epoch, loss, validation R@1, images/s and when that epoch ended, from each run's "
        f"live curves (<run folder>/{CURVES_FILE}; TensorBoard events in <run folder>/{TENSORBOARD_DIR}/ "
        "where TensorBoard is installed). Without a run in progress: the latest finished ones.",
    )
    p.add_argument("--store", default=None, help="the run store folder (default: results/runs)")
    p.add_argument("--profile", default=None, help="only the runs of this profile (quick, smoke, paper, ...)")
    p.add_argument("--all", action="store_true", help="also the finished and diverged runs")
    p.add_argument(
        "--last", type=int, default=20, help="show at most this many runs, newest first (default 20)"
    )
    p.set_defaults(func=_runs)
