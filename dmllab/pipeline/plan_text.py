"""The study plan as text (:func:`format_plan`, what ``dmllab study --plan`` prints) and its training estimate
(:func:`estimate`), in lines of at most :data:`WIDTH` columns."""

from __future__ import annotations

from pathlib import Path

from dmllab import fileio
from dmllab.pipeline import budget
from dmllab.pipeline.plan import Plan, _kind

#: The plan's printed lines fit this many columns.
WIDTH = 120


def duration(seconds: float | None) -> str:
    """:func:`dmllab.fileio.duration`, or that there is no estimate."""
    return "unknown (no stored run to estimate from)" if seconds is None else fileio.duration(seconds)


def estimate(plan: Plan, jobs: int) -> str:
    """The plan's training estimate as text: compute, wall time with the workers it will really use (``jobs``,
    at most one per missing run), and its basis when it is a typical run (or why there is none)."""
    est = plan.estimate_s
    workers = max(1, min(jobs, len(plan.missing)))
    if est is None and plan.fast_dev_run:
        return "a fast dev run: seconds per run on a GPU, up to a minute or two on a CPU"
    kind = _kind(plan.device)
    gpu = kind != "cpu"
    shared = None
    if plan.typical_s is not None and gpu and workers > 1 and plan.calibration is not None:
        shared = plan.calibration.gpu_run_s(plan.profile, workers)  # W workers sharing one device, measured
    if plan.typical_s is not None:
        where = f"on one {kind} worker" if gpu else "on one CPU thread"
        table = (
            f"measured in {Path(plan.calibration.source).name}"
            if gpu and plan.calibration
            else "dmllab.profiles.TYPICAL_RUN_S"
        )
        on = f" on {kind}" if gpu else ""
        basis = (
            f" (no stored {plan.profile} run{on} yet: {plan.typical_s:.0f} s per run, the typical {plan.profile} "
            f"run {where}, {table})"
        )
    elif est is None and gpu:
        basis = (
            f" (no stored {plan.profile} run on {kind} yet, and no typical {plan.profile} run measured on a GPU "
            "in the calibration)"
        )
    else:
        basis = ""
    if shared is not None and est:
        wall = f", about {duration(len(plan.missing) * shared)} with {workers} workers sharing the device (measured)"
    elif est and workers > 1:
        wall = f", about {duration(est / workers)} with {workers} workers" + (
            " (if they shared the device without slowing each other: not measured)"
            if gpu and plan.typical_s
            else ""
        )
    else:
        wall = ""
    return f"{duration(est)} of compute" + wall + basis


def _fit(line: str) -> list[str]:
    """``line`` wrapped to :data:`WIDTH` columns (continuation lines indented)."""
    import textwrap

    if len(line) <= WIDTH:
        return [line]
    return textwrap.wrap(line, WIDTH, subsequent_indent="    ", break_on_hyphens=False)


def format_plan(plan: Plan, *, jobs: int = 1, limit: int = 40) -> str:
    """The plan as text, at most :data:`WIDTH` columns: where it runs, one entry per unique run (first ``limit``:
    key, seed, stored, wall time, artifacts, then its config on the next line), the totals and the estimate, the
    GPU hours per artifact (with a calibration), and what was left out and why."""
    from dmllab.training import presets

    lines = [f"study plan, profile {plan.profile}: {len(plan.artifacts)} artifacts"]
    if plan.placement:
        lines.append(plan.placement)
    if plan.runs:
        lines.append(f"{'run key':<16} {'seed':>4}  {'stored':<6} {'wall':>7}  artifacts / config")
    for r in plan.runs[:limit]:
        key = r.run.key.split("/")[0][:16]
        wall = "" if r.wall_s is None else f"{r.wall_s:6.0f}s"
        stored = "yes" if r.stored else "div." if r.diverged else "no"
        head = f"{key:<16} {r.run.seed:>4}  {stored:<6} {wall:>7}  "
        users = ",".join(r.artifacts)
        room = WIDTH - len(head)
        lines.append(head + (users if len(users) <= room else users[: room - 3] + "..."))
        lines += _fit(" " * 6 + presets.describe(r.run.config))
    if len(plan.runs) > limit:
        lines.append(f"... {len(plan.runs) - limit} more runs")
    toys = [a.id for a in plan.artifacts if a.id not in {x for r in plan.runs for x in r.artifacts}]
    lines.append("")
    lines.append(
        f"{plan.requested} runs requested by the artifacts, {len(plan.runs)} unique after de-duplication; "
        f"{len(plan.stored)} stored, "
        + (
            f"{len(plan.diverged)} recorded as diverged (not retrained; --force does), "
            if plan.diverged
            else ""
        )
        + f"{len(plan.missing)} to train"
    )
    lines.append(f"estimated training time of the missing runs: {estimate(plan, jobs)}")
    costs = budget.cost_lines(plan)
    if costs:
        lines += ["", *costs]
    if toys:
        lines.append(f"artifacts without training runs (computed in their notebooks): {', '.join(toys)}")
    if plan.left_out:
        why = []
        if plan.datasets is not None:
            why.append(f"--datasets {','.join(plan.datasets)}")
        if plan.max_gpu_hours is not None:
            why.append(f"--max-gpu-hours {plan.max_gpu_hours:g}, taken in the papers' order of importance")
        lines.append(f"left out ({'; '.join(why)}): {len(plan.left_out)} artifacts")
        lines += [f"  {aid}: {reason}" for aid, reason in plan.left_out.items()]
    for artifact, error in plan.errors.items():
        lines.append(f"ERROR listing the runs of {artifact}: {error}")
    return "\n".join(x for line in lines for x in _fit(line))
