"""Tidy result files: one measured value per row, with the parameters and the provenance that produced it.

Every notebook and study writes its numbers here and every figure and report is made from these files, never
from notebook outputs. Columns, in order::

    experiment, paper, artifact, variant, dataset, profile, seed, draw, metric, value,
    param_* (free, sorted),
    git_sha, dmllab_version, torch_version, torchvision_version, numpy_version, pml_version, sklearn_version,
    device, timestamp, config_hash, run_id

Retrieval metrics (R@K, NMI, MAP@R, ...) are stored in percent, as the papers print them. ``draw``: the draw of the
offline benchmark the row's run trained on (empty for a row of no run).

Writes are atomic (:func:`dmllab.fileio.write_atomic`: a temporary file in the same folder, flushed to disk and
moved over the old one) while the lock ``.locks/<name>.lock`` beside it is held (:func:`dmllab.locks.exclusive`), for the rows and
the extra figure tables alike, so concurrent writers never lose rows and a reader never sees a partial row. A
value written again unchanged keeps the provenance it was first written with (:data:`PRODUCED_COLUMNS`), and a
file whose content would not change is not rewritten: a re-run that changes nothing leaves every file
byte-identical.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmllab import paths, rowkeys
from dmllab.fileio import naming, regular_file, write_atomic
from dmllab.locks import exclusive
from dmllab.paths import git_sha

if TYPE_CHECKING:  # pandas is imported lazily: ``import dmllab`` must stay cheap.
    import pandas as pd

CORE_COLUMNS: tuple[str, ...] = tuple(
    "experiment paper artifact variant dataset profile seed draw metric value".split()
)
PROVENANCE_COLUMNS: tuple[str, ...] = tuple(
    "git_sha dmllab_version torch_version torchvision_version numpy_version pml_version sklearn_version device "
    "timestamp config_hash run_id".split()
)
# When and with what code a value was produced: a value written again unchanged keeps the ones it has.
PRODUCED_COLUMNS: tuple[str, ...] = tuple(
    c for c in PROVENANCE_COLUMNS if c not in ("device", "config_hash", "run_id")
)
PARAM_PREFIX = "param_"
# Core columns every row must give; the others (variant, dataset, seed) may be left empty.
REQUIRED_COLUMNS: tuple[str, ...] = ("experiment", "paper", "artifact", "profile", "metric", "value")
# The columns a reader of a result file needs (the experiment and profile it selects by, the measurement).
READ_COLUMNS: tuple[str, ...] = ("experiment", "profile", "seed", "metric", "value")
_STRING_COLUMNS = tuple(c for c in CORE_COLUMNS + PROVENANCE_COLUMNS if c not in ("seed", "draw", "value"))

# The packages the provenance records: (column, import name, distribution name). A stored run's record keeps the
# first five by import name (dmllab.training.store.provenance), the rows of every CSV all six.
_PACKAGES: tuple[tuple[str, str, str], ...] = (
    ("dmllab_version", "dmllab", "dmllab"),
    ("torch_version", "torch", "torch"),
    ("torchvision_version", "torchvision", "torchvision"),
    ("numpy_version", "numpy", "numpy"),
    ("pml_version", "pytorch_metric_learning", "pytorch-metric-learning"),
    ("sklearn_version", "sklearn", "scikit-learn"),
)
RUN_RECORD_PACKAGES: tuple[str, ...] = tuple(module for _, module, _ in _PACKAGES[:5])


def columns_in_order(columns: Iterable[str]) -> list[str]:
    """Order ``columns`` as the schema says: core, sorted ``param_*``, provenance.

    Raises:
        ValueError: for a column that is none of these (a typo such as ``"valeu"``), listing the valid ones.
    """
    columns = set(columns)
    unknown = sorted(
        c for c in columns if c not in CORE_COLUMNS + PROVENANCE_COLUMNS and not c.startswith(PARAM_PREFIX)
    )
    if unknown:
        raise ValueError(
            f"unknown result column(s) {unknown}; valid columns: {', '.join(CORE_COLUMNS + PROVENANCE_COLUMNS)} "
            f"and free parameter columns prefixed {PARAM_PREFIX!r}"
        )
    params = sorted(c for c in columns if c.startswith(PARAM_PREFIX))
    return list(CORE_COLUMNS) + params + list(PROVENANCE_COLUMNS)


def package_version(module: str) -> str | None:
    """``module.__version__`` without importing the package when it is not imported yet (a quick run on cached
    features never uses torchvision and should not pay for importing it): the package's ``version.py`` (where
    torch-family wheels keep the full version, e.g. ``0.29.1+cu130``, which their distribution metadata lacks), else
    the installed distribution's version; None when it is not installed. The one reader of versions: the CSV
    columns (:func:`provenance`) and a stored run's record (:func:`package_versions`) agree."""
    import importlib.util
    import re
    import sys

    if module in sys.modules:
        return getattr(sys.modules[module], "__version__", None)
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        path = Path(folder) / "version.py"
        found = (
            re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", path.read_text(), re.M)
            if path.exists()
            else None
        )
        if found:
            return found.group(1)
    distribution = next((d for _, m, d in _PACKAGES if m == module), module)
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def package_versions(modules: Iterable[str] = RUN_RECORD_PACKAGES) -> dict[str, str]:
    """``{import name: version}`` of the installed ``modules`` (:func:`package_version`)."""
    found = {m: package_version(m) for m in modules}
    return {m: v for m, v in found.items() if v is not None}


def provenance(device: str | None = None) -> dict[str, str]:
    """Where a value came from: git commit, package versions, device and a UTC timestamp.

    ``config_hash`` and ``run_id`` are left empty; results that come from a stored training run fill them in.
    """
    prov = {"git_sha": git_sha() or "unknown"}
    prov.update({col: package_version(module) or "not installed" for col, module, _ in _PACKAGES})
    prov["device"] = "" if device is None else str(device)
    prov["timestamp"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return prov | {"config_hash": "", "run_id": ""}


def run_provenance(record: Mapping[str, Any]) -> dict[str, str]:
    """The provenance columns of the rows of a stored run, from the record the run store wrote when the run was
    trained (``provenance.json``: git commit, package versions, UTC time); a column it does not record is left
    out (and filled from :func:`provenance` where the row is written)."""
    versions = {str(k).replace("-", "_"): v for k, v in (record.get("versions") or {}).items()}
    out = {col: versions.get(module) for col, module, _ in _PACKAGES}
    out["git_sha"] = record.get("git_sha")
    when = record.get("timestamp")
    out["timestamp"] = when[:-1] + "+00:00" if isinstance(when, str) and when.endswith("Z") else when
    return {col: str(value) for col, value in out.items() if value}


def _normalise_rows(rows: Iterable[Mapping[str, Any]], prov: Mapping[str, str]) -> list[dict[str, Any]]:
    out = []
    for i, row in enumerate(rows):
        row = dict(row)
        missing = [c for c in REQUIRED_COLUMNS if row.get(c) is None]
        if missing:
            raise ValueError(f"result row {i} lacks required column(s) {missing}: {row}")
        try:
            row["value"] = float(row["value"])
        except (TypeError, ValueError):
            raise ValueError(f"result row {i}: value must be a number, got {row['value']!r}") from None
        columns_in_order(row)  # rejects unknown columns
        for col, val in prov.items():
            if row.get(col) in (None, ""):
                row[col] = val
        out.append(row)
    return out


# A writer waiting for a result file's lock says so after LOCK_NOTICE_S and gives up after LOCK_TIMEOUT_S
# (rewriting one file takes well under a second: a holder that long is stuck).
LOCK_NOTICE_S = 5.0
LOCK_TIMEOUT_S = 600.0


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with exclusive(
        path.parent / ".locks" / f"{path.name}.lock",  # one hidden folder, not a lock beside every CSV
        waiting=lambda holder: f"{path} is being written by another process ({holder}): waiting for it",
        notice_s=LOCK_NOTICE_S,
        timeout=LOCK_TIMEOUT_S,
        what=f"writing {path}",
    ):
        yield


def _to_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame.from_records(rows) if rows else pd.DataFrame(columns=list(CORE_COLUMNS))


def identity_columns(frame: pd.DataFrame) -> list[str]:
    """The columns that say which measurement a row is: all but ``value`` and :data:`PRODUCED_COLUMNS`."""
    return sorted(c for c in frame.columns if c != "value" and c not in PRODUCED_COLUMNS)


def keep_produced(new: pd.DataFrame, old: pd.DataFrame) -> pd.DataFrame:
    """``new`` where each row that ``old`` holds with the same identity and value takes the old row's
    :data:`PRODUCED_COLUMNS`: a value written again unchanged keeps the provenance it was first written with."""
    return rowkeys.carry_over(new, old, PRODUCED_COLUMNS)


def _update(path: str | os.PathLike, change: Callable[[pd.DataFrame | None], pd.DataFrame]) -> None:
    """Apply ``change(existing frame or None) -> new frame`` to ``path`` under the lock, atomically; the new file
    replaces the old one only when it passes :func:`read_rows` (otherwise ValueError, and the old file stays)."""
    path = Path(path)
    with _locked(path):
        existing = read_rows(path, duplicates=True) if path.exists() else None
        frame = change(existing)
        text = frame.reindex(columns=columns_in_order(frame.columns)).to_csv(index=False, lineterminator="\n")
        try:
            parse_rows(text, path)
        except ValueError as err:
            raise ValueError(
                f"not writing {path}: {_cut(str(err), 400)} (the file keeps its old rows)"
            ) from None
        write_atomic(path, text.encode("utf-8"))


def write_rows(
    path: str | os.PathLike,
    rows: Iterable[Mapping[str, Any]],
    *,
    mode: str = "append",
    device: str | None = None,
) -> None:
    """Write tidy result rows to the CSV at ``path``.

    Args:
        path: the CSV file (its folder is created).
        rows: mappings with at least ``experiment, paper, artifact, profile, metric, value``; optional
            ``variant, dataset, seed``, ``param_*`` columns and provenance columns. Missing provenance is
            filled from :func:`provenance` (with ``device``).
        mode: ``"append"`` keeps the existing rows (the columns become the union of both), ``"replace"``
            rewrites the file with ``rows`` only.
        device: recorded in the ``device`` column where the rows do not give one.

    Raises ValueError: unknown mode, unknown column, a missing required column or a non-numeric value."""
    if mode not in ("append", "replace"):
        raise ValueError(f"unknown mode {mode!r}; valid modes: append, replace")
    new = _to_frame(_normalise_rows(rows, provenance(device)))

    def change(existing: pd.DataFrame | None) -> pd.DataFrame:
        import pandas as pd

        if existing is None or existing.empty:
            return new
        if mode == "replace":
            return keep_produced(new, existing)
        return pd.concat([existing, new], ignore_index=True)

    _update(path, change)


#: The device of a row or table line that records none: everything written before rows and tables carried their
#: device (the committed quick results, extra tables included) was computed on the CPU.
UNRECORDED_DEVICE = "cpu"


def device_kind(device: Any) -> str:
    """The kind of a ``device`` value: ``"cuda"`` for ``"cuda:1"``; :data:`UNRECORDED_DEVICE` for a missing one
    (NaN, None, "")."""
    if device is None or (isinstance(device, float) and device != device) or str(device) in ("", "<NA>"):
        return UNRECORDED_DEVICE
    return str(device).split(":", 1)[0]


def _device_mask(frame: pd.DataFrame, device: str) -> pd.Series:
    """Rows of ``frame`` from the kind of ``device`` (a frame without a device column: :data:`UNRECORDED_DEVICE`)."""
    import pandas as pd

    if "device" not in frame.columns:
        return pd.Series(device_kind(device) == UNRECORDED_DEVICE, index=frame.index)
    return frame["device"].map(device_kind) == device_kind(device)


def select_device(frame: pd.DataFrame, device: str | None) -> pd.DataFrame:
    """The rows of ``frame`` from ``device``, by kind (cuda:0 and cuda are one device; a row without a device is
    :data:`UNRECORDED_DEVICE`); ``device=None``: every row."""
    if device is None or frame.empty:
        return frame
    return frame[_device_mask(frame, device)].reset_index(drop=True)


def replace_experiment(
    path: str | os.PathLike,
    experiment: str,
    rows: Iterable[Mapping[str, Any]],
    *,
    profile: str | None = None,
    device: str | None = None,
) -> None:
    """Replace the rows of one experiment (and, if given, one profile and the device of the new rows) in
    ``path``; keep all other rows.

    Re-running a notebook therefore replaces its own numbers instead of piling up duplicates, while the
    rows of other experiments or profiles in the same file stay, and so do the rows of another device: a study on
    a GPU adds its rows next to the CPU rows of the same profile instead of overwriting them. With ``profile``
    given, the device of the replaced rows is ``device`` (the kind: "cuda:0" replaces "cuda"; a row without a
    device is :data:`UNRECORDED_DEVICE`). A ``param_*`` column that only the replaced rows filled goes with them (the file
    keeps no column that no row uses).
    """
    rows = _normalise_rows(rows, provenance(device))
    for row in rows:
        if row["experiment"] != experiment:
            raise ValueError(
                f"row of experiment {row['experiment']!r} passed to replace_experiment({experiment!r})"
            )
    new = _to_frame(rows)

    def change(existing: pd.DataFrame | None) -> pd.DataFrame:
        if existing is None or existing.empty:
            return new
        drop = existing["experiment"] == experiment
        if profile is not None:
            drop &= existing["profile"] == profile
            if device is not None:
                drop &= _device_mask(existing, device)
        kept = existing[~drop]
        stale = [
            c for c in kept.columns if c.startswith(PARAM_PREFIX) and c not in new and kept[c].isna().all()
        ]
        block = keep_produced(new, existing[drop])
        return rowkeys.splice(existing.drop(columns=stale), drop, block)

    _update(path, change)


def read_rows(path: str | os.PathLike, *, duplicates: bool = False) -> pd.DataFrame:
    """Read a tidy CSV into a DataFrame (string columns as strings, ``seed`` as nullable Int64, ``value`` float,
    every number exactly as written).

    The file is checked first: it must have a header, every row must have as many fields as the header and the
    file must end with a line break (every file :func:`write_rows` writes does); a file cut mid-row, or a row that
    is not a number in ``value`` or ``seed``, is refused instead of read as a row of empty fields. Two rows of one
    measurement (the same :func:`identity_columns`: a row copied, a file concatenated with itself) are refused
    too, since they would count as two seeds and shrink every interval, unless ``duplicates`` (the writers, which
    replace them).

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        ValueError: a malformed file, naming it and the line.
    """
    path = Path(path)
    try:
        regular_file(path, "result file")
    except FileNotFoundError as err:
        raise FileNotFoundError(str(err) if os.path.islink(path) else f"no result file at {path}") from None
    size = path.stat().st_size
    if size > MAX_CSV_BYTES:
        raise ValueError(
            f"result file {path} is {size / 2**20:,.0f} MiB; a result file is at most {MAX_CSV_BYTES >> 20} MiB"
        )
    with naming(path, "reading"):
        data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"result file {path} is not UTF-8 text (byte {err.start}: {data[err.start : err.start + 1]!r}); "
            f"{_REWRITE}"
        ) from None
    return parse_rows(text, path, duplicates=duplicates)


#: The size of the largest result file dmllab reads (a link to an endless device, a file grown by mistake).
MAX_CSV_BYTES = 256 << 20
_REWRITE = "run the experiment that writes it again (dmllab study --only <artifact>), or restore it from git"


def _cut(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters (a long value in an error message)."""
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text):,} characters)"


def parse_rows(text: str, path: str | os.PathLike, *, duplicates: bool = False) -> pd.DataFrame:
    """The tidy CSV ``text`` (of the file ``path``, named in errors) as :func:`read_rows` reads it, with its
    checks: the same function checks a file before a writer replaces one with it."""
    import csv
    import io

    import pandas as pd

    rewrite = _REWRITE
    if not text.strip():
        raise ValueError(f"result file {path} is empty (not even a header); {rewrite}")
    if not text.endswith("\n"):
        raise ValueError(f"result file {path} is cut mid-row (no line break at its end); {rewrite}")
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as err:
        raise ValueError(f"result file {path} is not a valid CSV ({err}); {rewrite}") from None
    if rows:
        width = len(rows[0])
        for number, row in enumerate(rows[1:], start=2):
            if row and len(row) != width:  # blank lines are skipped, as pandas does
                raise ValueError(
                    f"result file {path}, row {number}: {len(row)} fields where the header has {width}; {rewrite}"
                )
    frame = pd.read_csv(io.StringIO(text), dtype={c: "string" for c in _STRING_COLUMNS})
    for column, kind in (("seed", "Int64"), ("draw", "Int64"), ("value", float)):
        if column in frame:
            try:
                frame[column] = pd.to_numeric(frame[column], errors="raise").astype(kind)
            except (ValueError, TypeError, OverflowError) as err:
                raise ValueError(
                    f"result file {path}: column {column!r} holds a non-number or an integer beyond 64 bits ({err}); {rewrite}"
                ) from None
    _check_columns(frame, path)
    _check_parameters(frame, path)
    check_plausible(frame, path)
    if not duplicates:
        _refuse_duplicates(frame, path, rewrite)
    return frame


def _refuse_duplicates(frame: pd.DataFrame, path: Path, rewrite: str) -> None:
    """Raise ValueError naming ``path`` and the first two lines that hold one measurement, or one arm's seed
    measured under two runs (two files' rows merged: the seed would count twice)."""
    pair = rowkeys.first_duplicate(frame, identity_columns(frame))
    if pair is not None:
        first, second = (i + 2 for i in pair)  # file lines: the header is line 1
        raise ValueError(
            f"result file {path}: lines {first} and {second} hold the same measurement (same experiment, profile, "
            f"variant, dataset, seed, parameters, metric and run); a duplicated row would count as another seed; "
            f"{rewrite}"
        )
    arm = [c for c in identity_columns(frame) if c not in ("run_id", "config_hash")]
    pair = rowkeys.first_duplicate(frame, arm) if "run_id" in frame else None
    if pair is not None:
        first, second = (i + 2 for i in pair)
        raise ValueError(
            f"result file {path}: lines {first} and {second} hold one measurement (same experiment, profile, "
            f"variant, dataset, seed, parameters and metric) from two runs ({frame['run_id'].iloc[pair[0]]} and "
            f"{frame['run_id'].iloc[pair[1]]}): rows of two result files merged; {rewrite}"
        )


def _check_columns(frame: pd.DataFrame, path: Path) -> None:
    """Raise ValueError naming ``path`` and the columns every reader needs (:data:`READ_COLUMNS`) it lacks."""
    missing = [c for c in READ_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(
            f"result file {path} lacks the column(s) {', '.join(missing)} (its header: "
            f"{_cut(', '.join(map(str, frame.columns)))}); {_REWRITE}"
        )


def _check_parameters(frame: pd.DataFrame, path: Path) -> None:
    """Raise ValueError naming ``path``, the line, the column and the value of a ``param_*`` cell that is not a
    number in a column of numbers: its row would match no comparison and be dropped from every claim."""
    import pandas as pd

    for column in (c for c in frame.columns if c.startswith(PARAM_PREFIX)):
        if frame[column].dtype.kind in "biuf":
            continue
        cells = frame[column].dropna()
        numbers = pd.to_numeric(cells, errors="coerce")
        if numbers.notna().any() and numbers.isna().any():
            line = int(cells.index[numbers.isna().to_numpy()][0]) + 2
            value = str(cells[numbers.isna()].iloc[0])
            raise ValueError(
                f"result file {path}, line {line}: parameter {column} is {_cut(value, 60)!r}, not a number like "
                f"the column's other values; {_REWRITE}"
            )


def check_plausible(frame: pd.DataFrame, path: str | os.PathLike, what: str = "result file") -> None:
    """Raise ValueError naming ``path``, the line, the metric and the value of the first value that is infinite or
    outside its metric's range ([0, 100] for a percentage, :data:`PERCENT_PREFIXES`; else any finite number). NaN
    passes: it is how a run that diverged is recorded."""
    import numpy as np

    values = frame["value"].to_numpy(dtype=float)
    metrics = frame["metric"].astype(str).to_numpy()
    bad = np.isinf(values)
    percent = np.fromiter((m.startswith(PERCENT_PREFIXES) for m in metrics), bool, len(metrics))
    with np.errstate(invalid="ignore"):
        bad |= percent & ((values < 0) | (values > 100))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        where = "in [0, 100] (a percentage)" if percent[i] else "finite"
        raise ValueError(
            f"{what} {path}, line {i + 2}: {metrics[i]} = {float(values[i])!r} is not a plausible value (it must be "
            f"{where}); {int(bad.sum())} such value(s) in all; {_REWRITE}"
        )


# ---------------------------------------------------------------------------------------- artifact files


def artifact_csv(artifact_id: str, table: str | None = None, folder: str | os.PathLike | None = None) -> Path:
    """``<folder>/<id>.csv`` (the artifact's rows) or ``<folder>/<id>.<table>.csv`` (an extra figure table);
    ``folder``: an execution's :func:`dmllab.paths.destination`, by default ``results/``."""
    folder = Path(folder) if folder is not None else paths.results_dir()
    return folder / (f"{artifact_id}.csv" if table is None else f"{artifact_id}.{table}.csv")


def read_artifact_rows(
    artifact_id: str, profile: str, device: str | None = None, folder: str | os.PathLike | None = None
) -> pd.DataFrame:
    """The rows of artifact ``artifact_id`` for ``profile`` in ``<folder>/<id>.csv`` (:func:`artifact_csv`; empty
    when there are none); with ``device``, only that device's rows (:func:`select_device`)."""
    import pandas as pd

    path = artifact_csv(artifact_id, folder=folder)
    if not path.exists():
        return pd.DataFrame(
            columns=["experiment", "profile", "variant", "dataset", "seed", "metric", "value"]
        )
    rows = read_rows(path)
    rows = rows[(rows["experiment"] == artifact_id) & (rows["profile"] == profile)].reset_index(drop=True)
    return select_device(rows, device)


def latest_device(rows: pd.DataFrame) -> str | None:
    """The device kind of the newest row (by ``timestamp``): the execution that wrote last; None without rows."""
    if rows.empty:
        return None
    if "device" not in rows.columns:
        return UNRECORDED_DEVICE
    newest = rows.sort_values("timestamp").iloc[-1] if "timestamp" in rows.columns else rows.iloc[-1]
    return device_kind(newest["device"])


def read_tables(
    artifact_id: str,
    tables: Iterable[str],
    profile: str,
    device: str | None = None,
    folder: str | os.PathLike | None = None,
) -> dict[str, pd.DataFrame]:
    """``{"rows": ..., <table>: ...}``: everything a figure of the artifact may draw from, read from its CSVs in
    ``folder`` (:func:`artifact_csv`); with ``device``, that device's lines only (:func:`select_device`)."""
    import pandas as pd

    out = {"rows": read_artifact_rows(artifact_id, profile, device, folder)}
    for name in tables:
        path = artifact_csv(artifact_id, name, folder)
        frame = pd.read_csv(regular_file(path, "table file")) if path.exists() else pd.DataFrame()
        if "profile" in frame.columns:
            frame = frame[frame["profile"] == profile].drop(columns="profile").reset_index(drop=True)
        frame = select_device(frame, device)
        if "device" in frame.columns:
            frame = frame.drop(columns="device")
        out[name] = frame
    return out


def write_table(path: str | os.PathLike, frame: Any, *, profile: str, device: str | None = None) -> None:
    """Write an extra figure table (a DataFrame) with a ``profile`` column (and a ``device`` column when
    ``device`` is given), replacing that profile's lines of that device (a line without a device is
    :data:`UNRECORDED_DEVICE`); under the file's lock and atomically, as :func:`write_rows`, and not rewritten
    when unchanged."""
    import pandas as pd

    path = Path(path)
    frame = pd.DataFrame(frame).assign(profile=profile)
    if device is not None:
        frame = frame.assign(device=device_kind(device))
    with _locked(path):
        if path.exists():
            with naming(path, "reading"):
                old = pd.read_csv(regular_file(path, "table file"))
            if "profile" in old.columns:
                drop = old["profile"] == profile
                if device is not None:
                    drop &= _device_mask(old, device)
                frame = rowkeys.splice(old, drop, frame)
        text = frame.to_csv(index=False, lineterminator="\n", float_format="%.6g")
        write_atomic(path, text.encode("utf-8"))  # not rewritten when unchanged


# ------------------------------------------------------------------------------------------ row builders
# Metrics that are durations (``wall_time_s``, ``elapsed_s``, ``loss_ms``, ...): they differ between any two
# executions, unlike every other value, which the same seed, device and thread count reproduce exactly.
TIMING_SUFFIXES: tuple[str, ...] = ("_s", "_ms")


def is_timing(metric: str) -> bool:
    """Whether ``metric`` is a duration (:data:`TIMING_SUFFIXES`)."""
    return str(metric).endswith(TIMING_SUFFIXES)


# Metrics stored in percent, as the papers print them (every dmllab.metrics output is a fraction in [0, 1]).
PERCENT_PREFIXES: tuple[str, ...] = ("R@", "NMI", "P@", "RP", "MAP@R", "accuracy", "train_R@")


def to_percent(metric: str, value: float) -> float:
    """``value`` in the CSV convention: retrieval/clustering/accuracy fractions -> percent, others unchanged."""
    return 100.0 * float(value) if metric.startswith(PERCENT_PREFIXES) else float(value)


def tidy(metrics: Mapping[str, float], *, percent: bool = True, **columns: Any) -> list[dict[str, Any]]:
    """One tidy row per ``metric -> value`` of ``metrics``, every row carrying ``columns``.

    Keyword columns outside the core and provenance schema get the ``param_`` prefix (``temperature=0.1`` ->
    ``param_temperature``), so callers write the varied quantity by its name. With ``percent`` the metric values
    are converted by :func:`to_percent`.
    """
    fixed = {}
    for key, value in columns.items():
        known = key in CORE_COLUMNS or key in PROVENANCE_COLUMNS or key.startswith(PARAM_PREFIX)
        fixed[key if known else PARAM_PREFIX + key] = value
    return [
        {**fixed, "metric": m, "value": to_percent(m, v) if percent else float(v)} for m, v in metrics.items()
    ]
