"""One-off migration: the committed result CSVs' run keys from the old key rule to the current one.

The run key became the complete spec (every component keyword with its constructor's default, numbers canonical,
``run.threads`` on the CPU; ``SCHEMA_VERSION`` 3), so every ``config_hash`` and ``run_id`` in ``results/*.csv``
changed although no number did. This script lists the quick study's placed runs (every artifact, on the CPU pool,
one thread per run: how the committed quick runs were trained, by the study's workers of commit 82254ba) under the
old code (``git archive OLD``, run in a subprocess) and under this checkout, pairs them by artifact and position,
and rewrites in every committed CSV only the columns ``config_hash`` and ``run_id`` of the rows that name a run, and
fills ``draw`` (the draw of the benchmark the run trained on, known to the new plan); every other field is kept
byte for byte. It refuses an old key that maps to two new ones, or a row whose key the old plan does not know.

    python benchmarks/rekey_results.py              # rewrite results/*.csv, print the counts
    python benchmarks/rekey_results.py --check      # only check that every row's key is a planned key now
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OLD = "f4ac02b"  # the last commit of the old key rule (SCHEMA_VERSION 2)
PROFILE = "quick"


def list_runs() -> list[dict]:
    """Every artifact's placed quick runs as the study plans them on the CPU pool: artifact, position, key,
    config hash, draw. Runs against whichever dmllab is on the path (old or new)."""
    from dmllab.experiments import registry
    from dmllab.experiments.execution import Execution
    from dmllab.pipeline import plan
    from dmllab.training.config import config_hash

    execution = Execution("cpu").on("cpu", 1)
    out = []
    for artifact in registry.select(None):
        runs = plan._runs(artifact, PROFILE, execution, {"seeds": None, "datasets": None})
        for i, run in enumerate(runs):
            out.append(
                {
                    "artifact": artifact.id,
                    "index": i,
                    "run_id": run.key,
                    "config_hash": config_hash(run.config),
                    "draw": run.draw,
                }
            )
    return out


def _listing(tree: Path) -> list[dict]:
    """:func:`list_runs` under the dmllab of ``tree`` (a fresh interpreter)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = f"import json, sys; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); import rekey_results as r; "
    code += "print(json.dumps(r.list_runs()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tree)
    if out.returncode:
        raise SystemExit(f"listing the runs under {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def key_map(old: list[dict], new: list[dict]) -> dict[str, dict]:
    """``old run_id -> {run_id, config_hash, draw}`` of the same planned run; refuses an ambiguous mapping."""
    by_place = {(r["artifact"], r["index"]): r for r in new}
    if len(old) != len(new) or set(by_place) != {(r["artifact"], r["index"]) for r in old}:
        raise SystemExit(f"the old and new plans differ in their runs ({len(old)} vs {len(new)})")
    mapping: dict[str, dict] = {}
    hashes: dict[str, str] = {}
    for r in old:
        n = by_place[(r["artifact"], r["index"])]
        target = {"run_id": n["run_id"], "config_hash": n["config_hash"], "draw": n["draw"]}
        if mapping.setdefault(r["run_id"], target) != target:
            raise SystemExit(f"old run {r['run_id']} is two runs now: {mapping[r['run_id']]} and {target}")
        if hashes.setdefault(r["config_hash"], n["config_hash"]) != n["config_hash"]:
            raise SystemExit(f"old config hash {r['config_hash']} is two config hashes now")
    return mapping


def _write(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def rekey_csv(path: Path, mapping: dict[str, dict]) -> tuple[str, int]:
    """The text of ``path`` with the rows that name a run re-keyed and their draw filled in (a ``draw`` column
    after ``seed`` added where missing), and how many rows were re-keyed."""
    text = path.read_text(encoding="utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if _write(rows) != text:
        raise SystemExit(f"{path} does not read back byte for byte through the csv module; not touched")
    header = rows[0]
    if "draw" not in header:
        at = header.index("seed") + 1
        rows = [row[:at] + ["draw" if i == 0 else ""] + row[at:] for i, row in enumerate(rows)]
        header = rows[0]
    col = {name: header.index(name) for name in ("config_hash", "run_id", "draw")}
    count = 0
    for row in rows[1:]:
        old = row[col["run_id"]]
        if not old:
            continue
        if old not in mapping:
            raise SystemExit(f"{path}: run {old} is not a run of the old quick plan")
        new = mapping[old]
        row[col["run_id"]], row[col["config_hash"]] = new["run_id"], new["config_hash"]
        row[col["draw"]] = "" if new["draw"] is None else str(new["draw"])
        count += 1
    return _write(rows), count


def _csvs() -> list[Path]:
    """The committed artifact CSVs whose rows carry run keys (the header has ``run_id``)."""
    names = subprocess.run(
        ["git", "ls-files", "results/*.csv"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    paths = [REPO / n for n in names if "/" not in n[len("results/") :]]
    return [p for p in paths if "run_id" in p.read_text(encoding="utf-8").split("\n", 1)[0].split(",")]


def check(new: list[dict]) -> int:
    """Print and count the committed rows whose run key is not a run of the current quick plan."""
    planned = {r["run_id"] for r in new}
    stale = 0
    for path in _csvs():
        with path.open(newline="") as fh:
            ids = {row["run_id"] for row in csv.DictReader(fh) if row["run_id"]}
        stale += len(ids - planned)
        if ids - planned:
            print(f"{path.name}: {len(ids - planned)} run keys not in the current plan")
    print(f"{len(planned)} planned quick runs; {stale} committed run keys not among them")
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--old", default=OLD, help=f"the commit of the old key rule (default {OLD})")
    parser.add_argument("--check", action="store_true", help="only check the committed keys against the plan")
    args = parser.parse_args()
    new = _listing(REPO)
    if args.check:
        return 1 if check(new) else 0
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", args.old], cwd=REPO, capture_output=True, check=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        old = _listing(Path(tmp))
    mapping = key_map(old, new)
    total = 0
    for path in _csvs():
        text, count = rekey_csv(path, mapping)
        path.write_text(text, encoding="utf-8")
        total += count
        print(f"{path.name}: {count} rows re-keyed")
    print(f"{total} rows re-keyed in {len(_csvs())} files ({len(mapping)} old run keys)")
    return 1 if check(new) else 0


if __name__ == "__main__":
    sys.exit(main())
