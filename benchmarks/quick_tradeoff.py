"""Cost against signal for every quick recipe measured on validation: what `make study` from empty would take with
each one, set against the quick profile's target of 30 minutes for `make study` from empty on 2 cores. Reads CSVs
only (no training, a second or two).

Inputs (written by the other benchmark scripts, docs/benchmarks.md):

* the selection CSVs of ``select_quick.py`` / ``select_quick_size.py`` (``quick_selection*.csv``): per candidate
  recipe and seed, the validation signal (R@1 after training minus the pre-trained network's, last epoch) and the
  trainer's phase timings;
* ``study.csv`` (``bench_study.py``): the measured study from empty, its training phase and its other phases
  (plan, notebooks, plots, report).

Per candidate (medians over its seeds): ``fixed_s``, the set-up and the test evaluation (R@K + NMI) of a run, and
``train_steps_s``, its data and forward/backward/update time (a selection run's per-epoch validation is left out: study
runs train on ``trainval`` without it). ``relative_train`` divides ``train_steps_s`` by the preset's **in the same CSV**
(measured side by side in one run). The study's mean run (``run_mean_s`` of ``study.csv``) is split the same way,
into the preset's ``fixed_s`` and the rest, its training steps; a candidate's study run then takes

    projected_run_s = fixed_s + (run_mean_s - fixed_s of the preset) * relative_train
    projected_study_s = other phases of the study + train phase of the study * projected_run_s / run_mean_s

It assumes every run of the study scales like the ProxyNCA++ preset run (all quick methods share the trunk, the
data and the schedule) and the notebooks' time stays as measured. One extra row per CSV, ``no training``, keeps
only the preset's set-up and test evaluation: the study's floor without a single training step.

    .venv/bin/python benchmarks/quick_tradeoff.py    # -> results/benchmarks/quick_tradeoff.csv
    .venv/bin/python benchmarks/quick_tradeoff.py --store <bench_study.py --keep workdir>/results/runs
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchutil import write_csv  # noqa: E402
from select_quick import ADOPTED  # noqa: E402
from select_quick_size import REFERENCE  # noqa: E402

BENCH = Path(__file__).resolve().parent.parent / "results" / "benchmarks"
SOURCES = (
    "quick_selection",
    "quick_selection_schedules",
    "quick_selection_size",
    "quick_selection_width",
    "quick_selection_batch",
    "quick_selection_small",
    "quick_selection_optim",
)
STUDY_TARGET_S = 30 * 60.0
#: A run's cost that does not depend on the number of training steps, and the part that does (a selection run's
#: per-epoch validation, ``eval_s``, is in neither: study runs train on ``trainval`` without it).
FIXED_PHASES = ("setup_s", "test_s")
TRAIN_PHASES = ("data_s", "step_s")


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _cost(rows: list[dict[str, str]], phases: tuple[str, ...]) -> float:
    return statistics.median(sum(float(r[p] or 0.0) for p in phases) for r in rows)


def tradeoff(selection: dict[str, list[dict[str, str]]], study: dict[str, str]) -> list[dict]:
    """The rows of ``quick_tradeoff.csv`` from the selection CSVs (name -> rows) and the study's from-empty row."""
    train_s, run_mean_s = float(study["train_s"]), float(study["run_mean_s"])
    other_s = float(study["study_s"]) - train_s
    out: list[dict] = []
    for source, rows in selection.items():
        by_cand: dict[str, list[dict[str, str]]] = {}
        for r in rows:
            by_cand.setdefault(r["candidate"], []).append(r)
        refs = [c for c in by_cand if c in (ADOPTED, REFERENCE)]
        if len(refs) != 1:
            raise ValueError(
                f"{source}: expected the preset's recipe ({ADOPTED} or {REFERENCE}) once, found {refs}"
            )
        ref = by_cand[refs[0]]
        ref_fixed, ref_train = _cost(ref, FIXED_PHASES), _cost(ref, TRAIN_PHASES)
        study_train_part = run_mean_s - ref_fixed  # the preset's training steps in a study run
        entries = [
            (cand, rs, 100 * statistics.mean(float(r["signal_last"]) for r in rs), _cost(rs, TRAIN_PHASES))
            for cand, rs in by_cand.items()
        ]
        entries.append(("no training", ref, None, 0.0))
        for cand, rs, signal, train_part in entries:
            fixed = _cost(rs, FIXED_PHASES)
            rel = train_part / ref_train
            run_s = fixed + study_train_part * rel
            projected = other_s + train_s * run_s / run_mean_s
            out.append(
                {
                    "source": source,
                    "candidate": cand,
                    "preset": cand == refs[0],
                    "seeds": len(rs),
                    "validation_signal": signal,
                    "fixed_s": fixed,
                    "train_steps_s": train_part,
                    "relative_train": rel,
                    "projected_run_s": run_s,
                    "projected_study_min": projected / 60,
                    "meets_30_min": projected <= STUDY_TARGET_S,
                    "overrides": rs[0]["overrides"]
                    if signal is not None
                    else "the preset's set-up and test evaluation only",
                }
            )
    return out


def store_split(store: Path) -> str:
    """Summed over the finished runs of a run store: their wall time, the time of their epochs (``time_s`` of each
    ``history.csv``) and the rest (set-up, test evaluation, saving)."""
    import json

    walls, epochs = [], []
    for metrics in sorted(store.glob("*/seed*/metrics.json")):
        history = _read(metrics.with_name("history.csv"))
        walls.append(float(json.loads(metrics.read_text())["wall_time_s"]))
        epochs.append(sum(float(r["time_s"]) for r in history))
    if not walls:
        raise SystemExit(f"no finished runs under {store}")
    n, w, e = len(walls), sum(walls), sum(epochs)
    return (
        f"{store}: {n} runs, per run {w / n:.1f} s = epochs {e / n:.1f} s + the rest {(w - e) / n:.1f} s "
        f"({100 * (w - e) / w:.1f} % of the runs' time)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=BENCH, help="folder of the input CSVs")
    parser.add_argument("--out", type=Path, default=BENCH / "quick_tradeoff.csv")
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="a study's run store (e.g. bench_study.py --keep's <workdir>/results/runs): print how its "
        "runs split into epochs and the rest (set-up, test evaluation), to check the split above",
    )
    args = parser.parse_args(argv)
    if args.store is not None:
        print(store_split(args.store))
    study = [r for r in _read(args.bench / "study.csv") if r["pass"] == "from_empty"]
    if not study:
        parser.error(f"no from_empty row in {args.bench / 'study.csv'} (run benchmarks/bench_study.py)")
    selection = {s: _read(args.bench / f"{s}.csv") for s in SOURCES if (args.bench / f"{s}.csv").is_file()}
    if not selection:
        parser.error(f"none of {', '.join(SOURCES)} in {args.bench}")
    rows = tradeoff(selection, study[-1])
    rows.sort(key=lambda r: r["projected_study_min"])
    write_csv(args.out, rows)
    for r in rows:
        sig = "    -" if r["validation_signal"] is None else f"{r['validation_signal']:+5.2f}"
        print(
            f"{r['source']:27s} {r['candidate']:14s} signal {sig}  train x{r['relative_train']:.2f}  run {r['projected_run_s']:5.1f} s  "
            f"study {r['projected_study_min']:6.1f} min"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
