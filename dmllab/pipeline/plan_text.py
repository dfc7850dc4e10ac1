"""The study plan as text (:func:`format_plan`, what ``dmllab study --plan`` prints) and its training estimate
(:func:`estimate`), in lines of at most :data:`WIDTH` columns."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from dmllab import fileio
from dmllab.pipeline.plan import Plan, _kind

#: The plan's printed lines fit this many columns.
WIDTH = 120


def trunks_text(trunks: list[tuple[int, int]]) -> str:
    """The pre-trained SmallCNN trunks a plan builds before training, in words."""
    draws = ", ".join(f"width {w} draw {d}" for w, d in trunks)
    return f"{len(trunks)} pre-trained SmallCNN trunk(s) ({draws}), built once each before training"


def trunks_s(trunks: list[tuple[int, int]]) -> float:
    """Seconds to prepare ``trunks`` ``(width, draw)`` one after another on one CPU thread
    (:data:`dmllab.profiles.TYPICAL_TRUNK_S`, scaled by the width squared)."""
    from dmllab.profiles import TYPICAL_TRUNK_S

    return sum(TYPICAL_TRUNK_S * (width / 16) ** 2 for width, _ in trunks)


def duration(seconds: float | None) -> str:
    """:func:`dmllab.fileio.duration`, or that there is no estimate."""
    return "unknown (no stored run to estimate from)" if seconds is None else fileio.duration(seconds)


def estimate(plan: Plan, jobs: int, gpu_hours: float | None = None) -> str:
    """The plan's training estimate as text: compute, wall time on the ``jobs`` workers it uses (at most one per
    missing run, plus :func:`trunks_s` on a CPU), and its basis (a typical run, or ``gpu_hours`` where none)."""
    est = plan.estimate_s
    workers = max(1, min(jobs, len(plan.missing)))
    if est is None and plan.fast_dev_run:
        return "a fast dev run: seconds per run on a GPU, up to a minute or two on a CPU"
    kind = _kind(plan.device)
    if est is None and gpu_hours is not None:
        head = f"{gpu_hours:,.1f} GPU-hours from the cost model (the runs it prices, below"
        if kind == "cpu":
            return (
                f"{head}); the time on cpu is not estimated: it comes only from stored {plan.profile} runs on cpu, "
                "and none is stored"
            )
        return f"{head}; no stored {plan.profile} run on {kind} yet)"
    text = _runs_estimate(plan, workers)
    if est is not None and plan.dependencies and kind == "cpu":
        prep = trunks_s(plan.dependencies)
        text += (
            f"; plus about {duration(prep)} preparing {len(plan.dependencies)} SmallCNN trunk(s) first, one after "
            f"another before any run starts (on one idle CPU thread): about {duration(prep + est / workers)} "
            "in all"
        )
    return text


def _runs_estimate(plan: Plan, workers: int) -> str:
    """The missing runs' training estimate as text (:func:`estimate` without the trunks)."""
    est = plan.estimate_s
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
    elif est is None:
        return f"not estimated (no stored {plan.profile} run on {kind} to estimate from" + (
            f", and no typical {plan.profile} run measured on a GPU in the calibration)" if gpu else ")"
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
    costs = cost_lines(plan)
    total = next((float(x.split()[1].replace(",", "")) for x in costs if x.startswith("total: ")), None)
    lines.append(f"estimated training time of the missing runs: {estimate(plan, jobs, total)}")
    if plan.dependencies:
        lines.append(f"prepared first: {trunks_text(plan.dependencies)}")
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


def cost_lines(plan: Plan) -> list[str]:
    """Per artifact (in the order of importance) the GPU hours of the runs it adds to the ones above it, then the
    total with its range and the approximations used; [] for a fast dev run and when no run on a real dataset is
    priced."""
    from dmllab.experiments.registry import by_importance
    from dmllab.pipeline.cost import STAGE2_LOW, Price, Unpriced, hours_text, total

    missing = [r for r in plan.missing if r.price is not None]
    if plan.fast_dev_run:
        return []  # its runs are not the real study's (left-out artifacts are still listed)
    if plan.calibration is None or not any(
        isinstance(r.price, Price) and r.price.from_images for r in missing
    ):
        return []  # nothing priced from its images: no run on a real dataset
    owner: dict[str, str] = {}
    for a in by_importance(list(plan.artifacts)):
        for r in missing:
            if a.id in r.artifacts:
                owner.setdefault(r.run.key, a.id)
    lines = [
        f"GPU-hours on {plan.calibration.device} (cost model: dmllab.pipeline.cost, calibrated by "
        f"{plan.calibration.source}), missing runs, each counted for the first artifact below that needs it:",
        f"{'artifact':<34} {'tier':<10} {'runs':>5} {'GPU-h':>9} {'low-high':>17} {'cumulative':>10}",
    ]
    cumulative = 0.0
    for a in by_importance(list(plan.artifacts)):
        mine = [r.price for r in missing if owner.get(r.run.key) == a.id]
        if not mine:
            continue
        central, low, high, unpriced = total(mine)
        cumulative += central
        span = f"{hours_text(low)}-{hours_text(high)}"
        lines.append(
            f"{a.id[:34]:<34} {a.tier:<10} {len(mine):>5} {hours_text(central):>9} {span:>17} {hours_text(cumulative):>10}"
            + (f"  + {unpriced} not priced" if unpriced else "")
        )
    prices = [r.price for r in missing]
    central, low, high, unpriced = total(prices)
    priced = [p for p in prices if isinstance(p, Price)]
    lines.append(
        f"total: {hours_text(central)} GPU-hours ({hours_text(low)}-{hours_text(high)}) for {len(priced)} runs"
        + (f"; {len(prices) - len(priced)} runs not priced" if len(priced) < len(prices) else "")
    )
    lines.append(
        f"  range: low = model-bound with stage 2 at {STAGE2_LOW:g} x stage 1; high = the measured end-to-end "
        "rate where one is measured (else the central value)"
    )
    notes: dict[str, int] = {}
    for p in priced:
        for note in p.notes:
            key = note if "batch" not in note else "batch sizes not measured: interpolated or nearest"
            key = key if "crops scaled" not in note else "crops not measured: scaled by the pixel ratio"
            notes[key] = notes.get(key, 0) + 1
    for note, n in sorted(notes.items(), key=lambda kv: -kv[1]):
        lines.append(f"  approximation ({n} runs): {note}")
    for why, n in Counter(p.why for p in prices if isinstance(p, Unpriced)).most_common():
        lines.append(f"  not priced ({n} runs): {why}")
    return lines
