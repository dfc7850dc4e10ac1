"""``dmllab study --fast-dev-run`` (docs/guide/study.md): every planned run (first seed) a fast dev run, the rest
of the study on its rows in scratch folders (:func:`scratch_paths`), and its summary (:func:`format_fast_dev`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dmllab import paths
from dmllab.pipeline.plan import Plan

FAST_DEV_FOLDER = "fast-dev-run"


def scratch_dirs() -> tuple[Path, Path]:
    """``(results, figures)`` of a fast dev run: ``<results>/fast-dev-run`` (its run store ``runs/``, executed
    notebooks ``executed/<profile>/``, CSVs ``scratch/<profile>/``) and ``<figures>/fast-dev-run`` (figures and
    report in ``scratch/<profile>/``)."""
    return paths.results_dir() / FAST_DEV_FOLDER, paths.figures_dir() / FAST_DEV_FOLDER


@contextmanager
def scratch_paths() -> Iterator[tuple[Path, Path]]:
    """Within the block, ``DMLLAB_RESULTS`` and ``DMLLAB_FIGURES`` point at :func:`scratch_dirs` (inherited by the
    workers, kernels and SLURM jobs), so a fast dev run never writes the committed results nor a real run store."""
    results, figures = scratch_dirs()
    saved = {k: os.environ.get(k) for k in ("DMLLAB_RESULTS", "DMLLAB_FIGURES")}
    os.environ["DMLLAB_RESULTS"], os.environ["DMLLAB_FIGURES"] = str(results), str(figures)
    try:
        yield results, figures
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def fast_dev_header(plan: Plan) -> str:
    """What a fast dev run does and where it writes (printed before it trains)."""
    from dmllab.training.protocol import FAST_DEV_EPOCHS, FAST_DEV_WARMUP_EPOCHS

    where = paths.destination(plan.profile, plan.device)  # within scratch_paths
    results, figures = where.results, where.figures
    n = plan.fast_dev_run
    seeds = sorted({r.run.seed for r in plan.runs})
    lines = [
        f"fast dev run of the {plan.profile} profile on {plan.device}: every run trains {n} batch(es) per epoch, "
        f"at most {FAST_DEV_WARMUP_EPOCHS} warm-up + {FAST_DEV_EPOCHS} schedule epoch per stage, evaluates "
        f"{n} batch(es) per split; first seed of each artifact only (seed {', '.join(map(str, seeds)) or '-'})",
        f"fast dev run: results in {results}, run store in {paths.runs_dir()}, figures and report in {figures} "
        "(the committed results/ and figures/ are not touched)",
    ]
    if plan.execution.pretrained is False:
        lines.append(
            "fast dev run: --pretrained none: every run from random initialisation (no ImageNet or pre-trained "
            "weights loaded)"
        )
    return "\n".join(lines)


def _artifact_runs(result: Any) -> dict[str, list[str]]:
    """``artifact id -> the keys of its planned runs``."""
    out: dict[str, list[str]] = {a.id: [] for a in result.plan.artifacts}
    for r in result.plan.runs:
        for a in r.artifacts:
            out.setdefault(a, []).append(r.run.key)
    return out


def _memory(infos: list[Mapping[str, Any]]) -> str:
    rss = [i["peak_rss_mb"] for i in infos if "peak_rss_mb" in i]
    cuda = [i["cuda_max_allocated_mb"] for i in infos if "cuda_max_allocated_mb" in i]
    parts = [f"CUDA {max(cuda) / 1024:.2f} GB"] if cuda else []
    parts += [f"RSS {max(rss) / 1024:.2f} GB"] if rss else []
    return ", ".join(parts) or "-"


def format_fast_dev(result: Any) -> str:
    """A fast dev run's summary (module docstring): per artifact the runs trained, their steps, peak memory (CUDA
    max allocated; on the CPU the RSS of the run and its loader workers) and time; what was shrunk to fit."""
    plan = result.plan
    jobs = {r.name: r for r in result.training}
    notebooks = {r.name: r for r in result.notebooks}
    by_artifact = _artifact_runs(result)
    rows = []
    stored = {r.run.key for r in plan.stored}  # trained by an earlier fast dev run of the same command
    for a in plan.artifacts:
        keys = by_artifact.get(a.id, [])
        ran = [jobs[k] for k in keys if k in jobs]
        reused = sum(k in stored for k in keys)
        ok = sum(r.status == "ok" for r in ran) + reused
        nb = notebooks.get(a.id)
        if nb is None:
            found = "not run"
        elif nb.status == "ok":
            found = f"found its {len(keys)} run(s)" if keys else "ok (no training runs)"
        elif "MissingRunError" in nb.error:
            failed = sum(r.status != "ok" for r in ran)
            found = "DID NOT FIND its runs" + (f" ({failed} failed to train)" if failed else "")
        else:
            found = f"FAILED{f' (cell {nb.cell})' if nb.cell is not None else ''}"
        rows.append(
            (
                a.id,
                f"{ok}/{len(keys)}" + (f" ({reused} stored)" if reused else ""),
                str(sum(int(r.info.get("steps", 0)) for r in ran)),
                _memory([r.info for r in ran]),
                f"{sum(r.wall_s for r in ran):.0f} s",
                f"{found}{f' ({nb.wall_s:.0f} s)' if nb is not None and not nb.cached else ''}",
            )
        )
    head = ("artifact", "runs", "steps", "peak memory", "train", "notebook")
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["", "fast dev run, per artifact:"]
    for r in [head, *rows]:
        lines.append(
            "  ".join(
                f"{v:<{w}}" if i in (0, 3, 5) else f"{v:>{w}}" for i, (v, w) in enumerate(zip(r, widths))
            )
        )
    shrunk = list(dict.fromkeys(line for r in result.training for line in r.info.get("shrunk", ())))
    if shrunk:
        lines.append(
            "shrunk for speed or to fit the data (the real run trains its full crops and batches, which may need more "
            "classes or images than these splits hold):"
        )
        lines += [f"  {line}" for line in shrunk]
    if plan.execution.pretrained is False:
        lines.append(
            "random initialisation (--pretrained none): the real study loads the pre-trained weights"
        )
    bad_runs = [r for r in result.training if r.status != "ok"]
    bad_nbs = [r for r in list(result.notebooks) + list(result.plots) if r.status != "ok"]
    if result.stopped or result.problems or plan.errors or bad_runs or bad_nbs or not result.notebooks:
        lines.append(
            f"NOT READY: {len(result.problems)} preflight problem(s), {len(plan.errors)} planning error(s), "
            f"{len(bad_runs)} run(s) and {len(bad_nbs)} notebook(s) failed (listed below)"
        )
    else:
        lines.append(
            "READY: every run trained and every notebook found its runs; the real study runs the same code "
            f"without --fast-dev-run ({len(plan.artifacts)} artifacts)"
        )
    return "\n".join(lines)
