"""``make study`` on a fresh machine, then again with nothing changed: the wall time of each step, and whether the
fresh machine reproduces the committed result CSVs.

A fresh machine is simulated by empty folders, under ``--workdir``, for everything the study reads or writes
besides the checkout's sources: the cache (``$DMLLAB_CACHE``: the generated benchmark images, the pre-trained
SmallCNN, the frozen-prefix feature caches, all built again), the run store and the result CSVs
(``$DMLLAB_RESULTS``) and the figures (``$DMLLAB_FIGURES``). Each pass is a fresh process that runs what
``make study`` runs (``dmllab study --profile quick --jobs auto``: :func:`dmllab.pipeline.study.run_study`) and
reports its steps (plan, train, notebooks, plots, report). Pass ``from_empty`` trains every run; pass
``unchanged`` repeats it with nothing changed.

``results/benchmarks/study.csv``: one row per pass (process wall, the study's steps, runs trained / reused /
diverged / failed, the mean wall of one training run on its share of the cores, notebooks run / cached / failed).
``results/benchmarks/study_reproduce.csv``: one row per result CSV of the study, compared with the committed file
of the same name in ``results/`` (every column but ``git_sha`` and ``timestamp``; rows of durations such as
``wall_time_s`` are counted, not compared): rows, rows that differ, their metrics, the columns where they differ.
``results/benchmarks/study_figures.csv``: one row per PNG figure, compared pixel by pixel with the committed one
(a figure that plots durations differs by design). ``--compare-only --workdir W`` repeats only the
comparisons for a study kept with ``--keep``.

    .venv/bin/python benchmarks/bench_study.py                       # the whole quick study (about 1.5 h on 2 cores)
    .venv/bin/python benchmarks/bench_study.py --only pnpp_fig3 --out /tmp/study.csv   # a subset, to try it
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import child_result, machine, write_csv

REPO = Path(__file__).resolve().parent.parent
# Provenance that differs between any two executions by design; every other column must match.
VOLATILE = ("git_sha", "timestamp")

_RUN = r"""
import json, sys
from dmllab.pipeline.outcome import format_summary
from dmllab.pipeline.study import run_study
res = run_study(sys.argv[1], only=sys.argv[2] or None, jobs=sys.argv[3], say=lambda s: print(s, file=sys.stderr))
print(format_summary(res), file=sys.stderr)
runs = [r.wall_s for r in res.training if r.status in ("ok", "diverged")]
nb = list(res.notebooks) + list(res.plots)
print("RESULT " + json.dumps({
    "study_s": res.wall_s, "steps": dict(res.phase_s), "runs": len(res.plan.runs),
    "trained": sum(r.status == "ok" for r in res.training),
    "diverged": sum(r.status == "diverged" for r in res.training) + len(res.plan.diverged),
    "failed": sum(r.status == "FAILED" for r in res.training),
    "reused": len(res.plan.runs) - len(res.plan.missing),
    "run_mean_s": sum(runs) / len(runs) if runs else None,
    "notebooks_run": sum(not r.cached for r in nb),
    "notebooks_cached": sum(r.cached for r in nb),
    "notebooks_failed": sum(r.status == "FAILED" for r in nb)}))
"""

FIELDS = [
    "pass",
    "wall_s",
    "study_s",
    "plan_s",
    "prepare_s",
    "train_s",
    "notebooks_s",
    "plots_s",
    "report_s",
    "runs",
    "trained",
    "reused",
    "diverged",
    "failed",
    "run_mean_s",
    "notebooks_run",
    "notebooks_cached",
    "notebooks_failed",
    "profile",
    "only",
    "jobs",
    "cpu_count",
    "cpu",
    "cpu_isa",
]


def one_pass(name: str, env: dict[str, str], profile: str, only: str, jobs: str) -> dict:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, profile, only, str(jobs)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the {name} pass failed (exit {proc.returncode}); its output is above")
    r = child_result(proc.stdout)
    steps = r.pop("steps")
    row = {"pass": name, "wall_s": wall, "study_s": r.pop("study_s")}
    row.update({f"{k}_s": float(v) for k, v in steps.items()})
    row.update(r)
    from dmllab.numerics import cpu_isa_mode

    row.update(
        profile=profile,
        only=only,
        jobs=jobs,
        cpu_count=os.cpu_count(),
        cpu=machine(),
        cpu_isa=cpu_isa_mode(env),
    )
    return row


def compare_csvs(fresh: Path, committed: Path) -> list[dict]:
    """Each result CSV of ``fresh`` against the file of the same name in ``committed``: every column but
    :data:`VOLATILE`, on the rows whose metric is not a duration (:func:`dmllab.results.is_timing`, counted apart)."""
    import pandas as pd

    from dmllab.results import is_timing

    rows = []
    for path in sorted(fresh.glob("*.csv")):
        mine = pd.read_csv(path, dtype=str, keep_default_na=False)
        row = {
            "csv": path.name,
            "rows": len(mine),
            "committed_rows": 0,
            "timing_rows": 0,
            "differing_rows": len(mine),
            "differing_metrics": "",
            "differing_columns": "(no committed file)",
        }
        rows.append(row)
        if not (committed / path.name).exists():
            continue
        ref = pd.read_csv(committed / path.name, dtype=str, keep_default_na=False)
        row["committed_rows"] = len(ref)
        if set(ref.columns) != set(mine.columns) or len(ref) != len(mine):
            extra = sorted(set(ref.columns) ^ set(mine.columns))
            row["differing_columns"] = "(columns " + " ".join(extra) + ")" if extra else "(rows)"
            continue
        timing = mine["metric"].map(is_timing) if "metric" in mine else pd.Series(False, index=mine.index)
        cols = [c for c in mine.columns if c not in VOLATILE]
        diff = mine[cols].ne(ref[cols]) & ~timing.to_numpy()[:, None]
        differs = diff.any(axis=1)
        row.update(
            timing_rows=int(timing.sum()),
            differing_rows=int(differs.sum()),
            differing_metrics=" ".join(sorted(set(mine.loc[differs, "metric"]))) if "metric" in mine else "",
            differing_columns=" ".join(c for c in cols if diff[c].any()),
        )
    return rows


def compare_figures(fresh: Path, committed: Path) -> list[dict]:
    """Each PNG figure of ``fresh`` against the committed file of the same name in ``committed``, pixel by pixel
    (decoded RGBA: the files' bytes may differ in metadata only). A figure that plots durations differs by design."""
    import numpy as np
    from PIL import Image

    rows = []
    for path in sorted(fresh.glob("*.png")):
        row = {
            "figure": path.name,
            "identical": False,
            "differing_pixels": "",
            "max_abs_diff": "",
            "note": "(no committed file)",
        }
        rows.append(row)
        if not (committed / path.name).exists():
            continue
        mine = np.asarray(Image.open(path).convert("RGBA"), dtype=np.int16)
        ref = np.asarray(Image.open(committed / path.name).convert("RGBA"), dtype=np.int16)
        if mine.shape != ref.shape:
            row["note"] = f"(size {mine.shape[1]}x{mine.shape[0]} vs {ref.shape[1]}x{ref.shape[0]})"
            continue
        diff = np.abs(mine - ref).max(axis=2)
        row.update(
            identical=not diff.any(),
            differing_pixels=int((diff > 0).sum()),
            max_abs_diff=int(diff.max()),
            note="",
        )
    return rows


FIGURE_FIELDS = ["figure", "identical", "differing_pixels", "max_abs_diff", "note"]


REPRO_FIELDS = [
    "csv",
    "rows",
    "committed_rows",
    "timing_rows",
    "differing_rows",
    "differing_metrics",
    "differing_columns",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--jobs", default="auto", help="N or auto, as make study (JOBS=auto)")
    ap.add_argument("--only", default="", help="artifact ids or prefixes, comma-separated (default: all)")
    ap.add_argument(
        "--workdir", default=None, help="the fresh machine's folders (default: a temporary folder)"
    )
    ap.add_argument(
        "--keep", action="store_true", help="keep --workdir afterwards (the run store, figures, ...)"
    )
    ap.add_argument("--out", default=str(REPO / "results" / "benchmarks" / "study.csv"))
    ap.add_argument("--reproduce-out", default=None, help="default: study_reproduce.csv next to --out")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted --workdir ... --keep run: its stored runs are reused, so the first pass"
        " is recorded as 'resumed' (its wall time covers only the remaining runs)",
    )
    ap.add_argument(
        "--compare-only",
        action="store_true",
        help="no study: compare the CSVs and figures of an earlier --workdir ... --keep with the committed ones",
    )
    args = ap.parse_args()
    rout = Path(args.reproduce_out or Path(args.out).with_name(Path(args.out).stem + "_reproduce.csv"))
    fout = rout.with_name(rout.stem.replace("_reproduce", "") + "_figures.csv")
    if args.compare_only:
        if not args.workdir or not (Path(args.workdir) / "results").is_dir():
            raise SystemExit("--compare-only needs the --workdir of an earlier run kept with --keep")
        work = Path(args.workdir)
        report_reproduction(compare_csvs(work / "results", REPO / "results"), rout)
        report_figures(compare_figures(work / "figures", REPO / "figures"), fout)
        return

    work = Path(args.workdir or tempfile.mkdtemp(prefix="dmllab-study-"))
    if work.exists() and any(work.iterdir()) and not args.resume:
        raise SystemExit(f"--workdir {work} is not empty; a fresh machine starts from empty folders")
    env = dict(
        os.environ,
        DMLLAB_CACHE=str(work / "cache"),
        DMLLAB_RESULTS=str(work / "results"),
        DMLLAB_FIGURES=str(work / "figures"),
        PYTHONPATH=str(REPO),
    )
    try:
        rows = [
            one_pass(name, env, args.profile, args.only, args.jobs)
            for name in ("resumed" if args.resume else "from_empty", "unchanged")
        ]
        out = write_csv(args.out, rows, FIELDS)
        repro = compare_csvs(work / "results", REPO / "results")
        figs = compare_figures(work / "figures", REPO / "figures")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for r in rows:
        print(
            f"{r['pass']}: {r['wall_s']:.0f} s ("
            + ", ".join(f"{k[:-2]} {r[k]:.0f} s" for k in FIELDS[3:9])
            + f"); {r['trained']} trained, {r['reused']} reused, {r['notebooks_run']} notebooks run"
        )
    print(f"-> {out}")
    report_reproduction(repro, rout)
    report_figures(figs, fout)


def report_figures(rows: list[dict], out: Path) -> None:
    if not rows:
        print("no PNG figures to compare")
        return
    write_csv(out, rows, FIGURE_FIELDS)
    same = sum(r["identical"] for r in rows)
    print(f"{same} of {len(rows)} PNG figures pixel-identical to the committed ones")
    for r in rows:
        if not r["identical"]:
            print(f"  {r['figure']}: {r['note'] or str(r['differing_pixels']) + ' pixels differ'}")
    print(f"-> {out}")


def report_reproduction(repro: list[dict], out: Path) -> None:
    write_csv(out, repro, REPRO_FIELDS)
    same = sum(r["differing_rows"] == 0 for r in repro)
    timing = sum(r["timing_rows"] for r in repro)
    print(
        f"{same} of {len(repro)} result CSVs identical to the committed ones (all columns but "
        f"{', '.join(VOLATILE)}; {timing} rows of durations not compared)"
    )
    for r in repro:
        if r["differing_rows"] and r["differing_columns"].startswith("("):
            print(
                f"  {r['csv']}: {r['rows']} rows vs {r['committed_rows']} committed, {r['differing_columns']}"
            )
        elif r["differing_rows"]:
            print(
                f"  {r['csv']}: {r['differing_rows']} of {r['rows']} rows differ ({r['differing_metrics']}) "
                f"in {r['differing_columns']}"
            )
    print(f"-> {out}")


if __name__ == "__main__":
    main()
