"""What a study did (:class:`StudyResult`: the plan, every job's result, the report, the wall time of each step)
and its plain-text summary (:func:`format_summary`).
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dmllab.pipeline.fastdev import format_fast_dev
from dmllab.pipeline.jobs import JobResult
from dmllab.pipeline.plan import Plan


@dataclass(frozen=True)
class StudyResult:
    plan: Plan
    training: tuple[JobResult, ...]
    notebooks: tuple[JobResult, ...]
    plots: tuple[JobResult, ...]
    report: Path | None
    wall_s: float
    # Wall time of each step, in order (plan, train, notebooks, plots, report), seconds.
    phase_s: Mapping[str, float] = field(default_factory=dict)
    stopped: int | None = None  # the signal that stopped the study (SIGINT, SIGTERM); None: it ran to the end
    problems: tuple[str, ...] = ()  # what the preflight found missing (nothing was trained then)
    checked: tuple[str, ...] = ()  # what the preflight found in place (datasets, weights), one line each

    @property
    def failed(self) -> bool:
        return (
            any(r.status == "FAILED" for r in self.training + self.notebooks + self.plots)
            or bool(self.plan.errors)
            or bool(self.problems)
        )

    @property
    def exit_code(self) -> int:
        """128 + the signal when stopped (130 for Ctrl-C), 1 when a run, notebook or plan failed, else 0."""
        return 128 + int(self.stopped) if self.stopped else int(self.failed)


def format_summary(result: StudyResult) -> str:
    """Plain-text summary: one line per notebook and plotting notebook, training totals, then every failure (and a
    fast dev run's own summary, :func:`format_fast_dev`)."""
    if result.problems:
        return "\n".join(
            [f"nothing was trained: the check before training found {len(result.problems)} problem(s):"]
            + [f"ERROR {problem}" for problem in result.problems]
        )
    lines = []
    if result.stopped:
        lines.append(
            f"STOPPED by {signal.Signals(result.stopped).name}: what finished before is listed below; "
            "run the same command again to go on (finished runs and notebooks are kept)"
        )
    ok_runs = sum(r.status == "ok" for r in result.training)
    diverged = [r for r in result.training if r.status == "diverged"]
    lines.append(
        f"training: {ok_runs} trained, {len(diverged)} diverged, "
        f"{len(result.training) - ok_runs - len(diverged)} failed, "
        f"{len(result.plan.runs) - len(result.plan.missing)} reused from the run store "
        f"({len(result.plan.diverged)} of them recorded as diverged) "
        f"({sum(r.wall_s for r in result.training):.0f} s of training)"
    )
    rows = list(result.notebooks) + list(result.plots)
    width = max([len("notebook")] + [len(r.name) for r in rows])
    lines.append(f"{'notebook':<{width}}  {'status':<6}  {'wall':>8}")
    lines.append(f"{'-' * width}  ------  --------")
    lines += [f"{r.name:<{width}}  {'cached' if r.cached else r.status:<6}  {r.wall_s:>7.1f}s" for r in rows]
    failed = [r for r in list(result.training) + rows if r.status == "FAILED"]
    lines.append(
        f"{len(rows) - sum(r.status != 'ok' for r in rows)} notebooks ok, "
        f"{sum(r.status != 'ok' for r in rows)} failed; study wall time {result.wall_s:.0f} s"
    )
    if result.phase_s:
        lines.append("steps: " + ", ".join(f"{k} {v:.0f} s" for k, v in result.phase_s.items()))
    if result.plan.fast_dev_run:
        lines.append(format_fast_dev(result))
    for artifact, error in result.plan.errors.items():
        lines.append(f"\nFAILED planning {artifact}: {error}")
    for r in diverged:
        lines.append(f"\ndiverged (recorded in the run store, its rows say `diverged`) {r.name}: {r.error}")
    for r in failed:
        where = f" (cell {r.cell})" if r.cell is not None else ""
        lines.append(f"\nFAILED {r.name}{where}: {r.error}")
        if r.output:
            lines.append(f"  see: {r.output}")
    if result.report is not None:
        lines.append(f"\nreport: {result.report}")
    return "\n".join(lines)
