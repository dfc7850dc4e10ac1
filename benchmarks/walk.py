"""The walk of a loss temperature and of the device through one smoke study, counted per smoke run.

One smoke study of ``pnpp_fig4a_temperature`` (its temperatures 1 and 1/9, two seeds) runs in this process from the
plan to its notebook (training in process, the notebook's cells executed here with the parameters the study gives
it; no plots, no report), in a fresh run store, and every call of a dmllab function is watched:

* rooms: the dmllab modules whose functions are called with the value (the temperature 1/9 anywhere in an argument,
  within three levels of lists, mappings, dataclasses and specs; the device: a value named ``device`` there, or an
  ``Execution``);
* validations: calls of a dmllab function named ``check``, ``check_*``, ``resolve_*`` (a leading ``_`` too) with
  the value;
* builds: calls of ``dmllab.losses.build_loss``; hashes: calls of ``dmllab.training.config.config_hash``;
  placements: calls of ``dmllab.experiments.lookup.place``; each also per unique run of the plan.

``python benchmarks/walk.py --tree after`` replaces the rows of that tree in ``results/benchmarks/walk.csv`` (and
prints the rooms); run it on each tree (``PYTHONPATH=<tree>``) to compare.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

ONLY = "pnpp_fig4a_temperature"
TEMPERATURE = 1 / 9
COUNTED = {"builds": ("dmllab.losses", "build_loss"), "hashes": ("dmllab.training.config", "config_hash")}
COUNTED["placements"] = ("dmllab.experiments.lookup", "place")


def _holds(value, match, name="", depth=3) -> bool:
    """Whether ``value`` (named ``name``) or what it holds within ``depth`` levels satisfies ``match(name, v)``."""
    if match(name, value):
        return True
    if (
        depth == 0
        or isinstance(value, str | bytes | int | float)
        or type(value).__module__.startswith("torch")
    ):
        return False
    if isinstance(value, Mapping):
        items = [(k if isinstance(k, str) else name, v) for k, v in list(value.items())[:64]]
    elif isinstance(value, list | tuple | set | frozenset):
        items = [(name, v) for v in list(value)[:64]]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [(f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value)]
    elif type(value).__module__.startswith("dmllab") and hasattr(value, "__dict__"):
        items = list(vars(value).items())
    else:
        return False
    return any(_holds(v, match, n, depth - 1) for n, v in items)


def _temperature(name, v) -> bool:
    return isinstance(v, float) and abs(v - TEMPERATURE) < 1e-12


def _device(name, v) -> bool:
    return type(v).__name__ == "Execution" or (name == "device" and isinstance(v, str))


class Watch:
    """The profile hook: per value, the modules it entered and the validations it went through."""

    def __init__(self, root: Path) -> None:
        self.root = str(root) + os.sep
        self.rooms = {"temperature": set(), "device": set()}
        self.validations = Counter()
        self.checks = Counter()  # (walk, module:function) of each validation

    def __call__(self, frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(self.root):
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        args = [(n, frame.f_locals.get(n)) for n in names if n != "self"]
        module = code.co_filename[len(self.root) :]
        checks = re.match(r"_?(check|resolve)(_|$)", code.co_name) is not None
        for walk, match in (("temperature", _temperature), ("device", _device)):
            if any(_holds(v, match, n) for n, v in args):
                self.rooms[walk].add(module)
                self.validations[walk] += checks
                self.checks[walk, f"{module}:{code.co_name}"] += checks


def _count(module_name: str, attr: str, counts: Counter, key: str) -> None:
    """Count every call of ``module.attr``, wherever it was imported by name."""
    import importlib

    original = getattr(importlib.import_module(module_name), attr)

    def counted(*a, **k):
        counts[key] += 1
        return original(*a, **k)

    for module in list(sys.modules.values()):
        if module is not None and getattr(module, attr, None) is original:
            setattr(module, attr, counted)


def execute_in_process(notebook, output, parameters, **kwargs):
    """:func:`dmllab.pipeline.execute.execute_notebook` in this process (so that counters see the notebook): every
    code cell of ``notebook`` in one namespace, papermill's parameters after the tagged cell (also used by
    tests/pipeline/test_resolve_once.py)."""
    import matplotlib
    import nbformat

    from dmllab.pipeline.jobs import JobResult

    matplotlib.use("Agg")
    namespace: dict = {}
    for cell in nbformat.read(str(notebook), as_version=4).cells:
        if cell.cell_type == "code":
            exec(cell.source, namespace)
            if "parameters" in cell.metadata.get("tags", ()):
                namespace.update(parameters)
    return JobResult(Path(notebook).stem, "ok", 0.0, output=str(output))


def measure() -> dict[str, dict[str, float]]:
    import dmllab
    from dmllab.experiments.execution import Execution
    from dmllab.pipeline import execute, study
    from dmllab.pipeline.executors import LocalExecutor

    LocalExecutor.map = lambda self, fn, items, name, *, desc: [fn(i) for i in items]
    execute.ensure_kernel = lambda: "python3"
    execute.execute_notebook = execute_in_process
    execute.run_plots = lambda *a, **k: []
    counts: Counter = Counter()
    for key, (module, attr) in COUNTED.items():
        _count(module, attr, counts, key)
    watch = Watch(Path(dmllab.__file__).parent)
    sys.setprofile(watch)
    try:
        result = study.run_study(
            "smoke", Execution(), only=ONLY, jobs=1, progress=False, report=False, say=lambda s: None
        )
    finally:
        sys.setprofile(None)
    if any(r.status != "ok" for r in result.notebooks) or not result.notebooks:
        raise RuntimeError(f"the notebook failed: {result.notebooks}")
    runs = len(result.plan.runs)
    out = {w: {"rooms": len(watch.rooms[w]), "validations": watch.validations[w] / runs} for w in watch.rooms}
    out["study"] = {"runs": runs, **{k: counts[k] / runs for k in COUNTED}}
    out["rooms"] = {w: sorted(watch.rooms[w]) for w in watch.rooms}
    out["checks"] = {
        w: {k: n for (v, k), n in sorted(watch.checks.items()) if v == w and n} for w in watch.rooms
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", required=True, help="the label of the measured tree (before, after)")
    ap.add_argument("--out", default="results/benchmarks/walk.csv")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dmllab-walk-") as tmp:
        for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
            os.environ[key] = os.path.join(tmp, key.lower())
        measured = measure()
    rooms, checks = measured.pop("rooms"), measured.pop("checks")
    rows = [
        {"tree": args.tree, "walk": walk, "metric": metric, "value": value}
        for walk, metrics in measured.items()
        for metric, value in metrics.items()
    ]
    out = Path(args.out)
    kept = []
    if out.exists():
        with out.open() as fh:
            kept = [r for r in csv.DictReader(fh) if r["tree"] != args.tree]
    sys.path.insert(0, str(Path(__file__).parent))
    from benchutil import write_csv

    write_csv(out, kept + rows, ["tree", "walk", "metric", "value"])
    for row in rows:
        print(f"{row['tree']:>6} {row['walk']:>11} {row['metric']:>12} {row['value']}")
    for walk, modules in rooms.items():
        print(f"{walk} rooms: {', '.join(modules)}")
        print(f"{walk} validations: {', '.join(f'{k} x{n}' for k, n in checks[walk].items())}")


if __name__ == "__main__":
    main()
