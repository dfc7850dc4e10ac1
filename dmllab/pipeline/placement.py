"""Where a study's runs train (:func:`plan_study`): the CPU pool (one worker per usable core, one torch thread
each), workers sharing a GPU, or, with ``--device auto --jobs auto`` on a machine with CUDA, the faster of the two
by measured rates (the GPU where one side has no rate); docs/guide/gpu.md, "Where the runs train". The plan's
header says which, with both times (:attr:`Placement.line`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from dmllab.experiments.artifact import Artifact
from dmllab.experiments.execution import Execution
from dmllab.pipeline.cost import Calibration
from dmllab.pipeline.jobs import resolve_jobs, threads_per_worker, usable_cores
from dmllab.pipeline.plan import Plan, make_plan
from dmllab.pipeline.plan_text import duration
from dmllab.profiles import TYPICAL_RUN_S, resolve_device


@dataclass(frozen=True)
class Placement:
    """Where the runs train: the device, the local workers and their torch threads, and the plan's header line."""

    device: str
    workers: int
    threads: int
    line: str


def gpu_workers(jobs: int | str, profile: str, calibration: Calibration | None) -> int:
    """Workers sharing one GPU: ``jobs`` as given, or for "auto" the measured worker count with the lowest
    seconds per run (at most the usable cores), 1 where none is measured."""
    if jobs != "auto":
        return resolve_jobs(jobs, "cuda")
    measured = {
        w: s
        for w in (calibration.quick_run_s if calibration is not None else {})
        if w <= usable_cores() and (s := calibration.gpu_run_s(profile, w)) is not None  # type: ignore[union-attr]
    }
    return min(measured, key=measured.get) if measured else 1  # type: ignore[arg-type]


def _gpu_wall(plan: Plan, workers: int, calibration: Calibration | None) -> tuple[float | None, str]:
    """Wall seconds of the plan's missing runs on ``workers`` GPU workers and their basis: the measured seconds per
    run with that many sharing the device, else the plan's estimate divided by the workers (not measured)."""
    per_run = calibration.gpu_run_s(plan.profile, workers) if calibration is not None else None
    if per_run is not None:
        return len(plan.missing) * per_run, ""
    if plan.estimate_s is None:
        return None, ""
    used = max(1, min(workers, len(plan.missing)))
    return (
        plan.estimate_s / used,
        " if they share the device without slowing each other (not measured)" if used > 1 else "",
    )


def plan_study(
    artifacts: Sequence[Artifact],
    profile: str,
    execution: Execution,
    *,
    jobs: int | str,
    calibration: Calibration | None,
    **plan_options: Any,
) -> tuple[Plan, Placement]:
    """The study's plan on the device it trains on, and that placement (module docstring): ``execution``'s device
    is the one asked for (``auto`` or a device), resolved here once; the plan's execution is the placed one (its
    device and the torch threads of each run). ``plan_options`` go to :func:`~dmllab.pipeline.plan.make_plan`.

    Raises:
        ValueError: as :func:`~dmllab.pipeline.plan.make_plan`, :func:`~dmllab.pipeline.jobs.resolve_jobs` and
            :func:`~dmllab.profiles.resolve_device`.
    """
    requested = execution.device or "auto"
    resolved = resolve_device(requested)
    kind = resolved.split(":", 1)[0]

    def on(dev: str, workers: int) -> Plan:  # every run placed with the threads its worker will run it on
        where = execution.on(dev, threads_per_worker(dev, workers))
        return make_plan(artifacts, profile, where, calibration=calibration, **plan_options)

    def placed(plan: Plan, where: Placement) -> tuple[Plan, Placement]:
        return replace(plan, placement=where.line), where

    def cpu_pool(plan: Plan, why: str) -> tuple[Plan, Placement]:
        workers = resolve_jobs(jobs, "cpu")
        line = f"placement: the CPU pool, {workers} workers of one thread each{why}"
        return placed(plan, Placement("cpu", workers, threads_per_worker("cpu", workers), line))

    if kind == "cpu" or kind == "mps":
        workers = resolve_jobs(jobs, resolved)
        plan = on(resolved, workers)
        if kind == "cpu":
            return cpu_pool(plan, " (--device cpu)" if requested == "cpu" else "")
        line = f"placement: {workers} worker(s) on {resolved}"
        return placed(plan, Placement(resolved, workers, threads_per_worker(resolved, workers), line))
    workers = gpu_workers(jobs, profile, calibration)
    gpu = on(resolved, workers)
    gpu_s, caveat = _gpu_wall(gpu, workers, calibration)
    card = f" ({calibration.device})" if calibration is not None else ""
    gpu_text = f"{workers} GPU worker(s) on {resolved}{card}: " + (
        "time unknown" if gpu_s is None else f"about {duration(gpu_s)}{caveat}"
    )
    why = ""
    if requested == "auto" and jobs == "auto" and TYPICAL_RUN_S.get(profile) is not None:
        cpu_workers = resolve_jobs("auto", "cpu")
        cpu = on("cpu", cpu_workers)
        cpu_s = (
            None if cpu.estimate_s is None else cpu.estimate_s / max(1, min(cpu_workers, len(cpu.missing)))
        )
        if cpu_s is not None and (gpu_s is None or cpu_s <= gpu_s):
            return cpu_pool(
                cpu,
                f": about {duration(cpu_s)} for its {len(cpu.missing)} runs, faster than {gpu_text} "
                "(measured rates; --device cuda forces the GPU)",
            )
        why = (
            f" (measured rates; the CPU pool of {cpu_workers} workers: about {duration(cpu_s)}; --device cpu "
            "forces it)"
            if cpu_s is not None
            else ""
        )
    line = f"placement: {gpu_text}{why}"
    return placed(gpu, Placement(resolved, workers, threads_per_worker(resolved, workers), line))
