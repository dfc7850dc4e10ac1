"""The report ``figures/report.html``, rebuilt from ``results/`` by ``dmllab report`` (and ``dmllab study``): one
self-contained HTML file (inline CSS, figures linked from ``figures/``) rendered from ``templates/report.html.j2``,
which lays it out, with :mod:`dmllab.pipeline.summary` and :mod:`dmllab.pipeline.forest`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmllab import paths
from dmllab.experiments import multiplicity, registry, verdicts
from dmllab.experiments.artifact import PAPER_TITLES, PAPERS, Artifact
from dmllab.experiments.compare import paper_vs_reproduced, summarise
from dmllab.experiments.pnpp._common import SWEEP_TAGS
from dmllab.fileio import write_atomic
from dmllab.pipeline import summary
from dmllab.pipeline.forest import forest, legend
from dmllab.pipeline.prose import human, inline_spans, paragraphs
from dmllab.profiles import PROFILES

if TYPE_CHECKING:
    import pandas as pd

TEMPLATE = "report.html.j2"


def infer_profile(frames: Sequence[pd.DataFrame]) -> str | None:
    """The most reproduced profile among the result rows (preferring paper, then quick, then smoke)."""
    present = set()
    for frame in frames:
        present.update(frame["profile"].dropna().astype(str))
    for profile in ("paper", "quick", "smoke"):
        if profile in present:
            return profile
    return None


def _fmt(mean: float, std: float, n: int) -> str:
    if n > 1 and std == std:  # std is NaN for one seed
        return f"{mean:.4g} ± {std:.2g}"
    return f"{mean:.4g}"


MAX_TABLE_ROWS = 40


def _cell(value: Any) -> str:
    """A table cell's text: empty for a missing value, a float as a person writes it (``1/9``, ``4e2``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return human(value) if isinstance(value, float) else str(value)


def _table(frame: pd.DataFrame, notes: Sequence[str] = ()) -> dict[str, Any]:
    """What the template's table macro draws: ``notes`` above it, the column names, the rows' cells."""
    return {
        "notes": list(notes),
        "columns": [str(c) for c in frame.columns],
        "rows": [[_cell(v) for v in row] for row in frame.itertuples(index=False)],
    }


def numbers_table(
    rows: pd.DataFrame, *, max_rows: int = MAX_TABLE_ROWS, csv_name: str = "the CSV"
) -> dict[str, Any]:
    """The pivot of the reproduced numbers (:func:`_table`): one line per variant/dataset/parameters (and device,
    where the rows come from several), one column per metric.

    Parameters with one value over all rows are listed above the table instead of repeated in every line;
    tables longer than ``max_rows`` lines are cut (the CSV has them all).
    """
    several = "device" in rows.columns and rows["device"].nunique() > 1
    stats = summarise(rows, by=("device",) if several else ())
    stats["cell"] = [_fmt(m, s, n) for m, s, n in zip(stats["mean"], stats["std"], stats["n"])]
    index = [c for c in stats.columns if c not in ("metric", "mean", "std", "n", "cell")]
    if not index:
        return _table(stats.set_index("metric")[["cell"]].T)
    stats[index] = stats[index].astype(object).where(stats[index].notna(), "")
    constant = [c for c in index if stats[c].nunique() <= 1]
    varying = [c for c in index if c not in constant] or index[:1]
    fixed = ", ".join(
        f"{c.removeprefix('param_')} = {stats[c].iloc[0]}" for c in constant if c not in varying
    )
    table = stats.pivot_table(index=varying, columns="metric", values="cell", aggfunc="first", sort=False)
    table.columns.name = None
    table = table.reset_index().rename(columns=lambda c: c.removeprefix("param_"))
    notes = [fixed] if fixed else []
    marks = [c for c in table.columns[1:] if c in SWEEP_TAGS]
    if marks:  # a sweep's flags as a mark on the rows they tag, said in words, instead of True/False columns
        on = table[marks].astype(str).isin(["True", "true", "1", "1.0"])
        tags = [", ".join(m for m in marks if row[m]) for _, row in on.iterrows()]
        first = table.columns[0]
        table[first] = [f"{v} ({t})" if t else v for v, t in zip(table[first], tags)]
        table = table.drop(columns=marks)
        notes.append("; ".join(f"({m}) {SWEEP_TAGS[m]}" for m in marks))
    if len(table) > max_rows:
        notes.append(f"first {max_rows} of {len(table)} lines; all in {csv_name}")
        table = table.head(max_rows)
    return _table(table, notes)


def _num(v: float, fmt: str = ".4g") -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


STAND_IN_NOTE = (
    "The rows come from the offline benchmark: they face the paper's cells side by side, without a difference "
    "(absolute numbers are not comparable); the figures draw the paper's differences between rows instead."
)


def reference_table(artifact: Artifact, rows: pd.DataFrame, reference: pd.DataFrame) -> dict[str, Any]:
    """Paper vs reproduced (:func:`dmllab.experiments.compare.paper_vs_reproduced`, drawn as :func:`_table`), or
    ``{"missing": why}`` where nothing faces a printed cell."""
    if artifact.reference is None:
        return {"missing": "The paper prints no numbers for this artifact."}
    table = paper_vs_reproduced(artifact, rows, reference)
    if table.empty:
        return {"missing": "No reproduced row maps onto a printed cell of the paper."}
    stand_in = table["delta"].isna().all()
    shown = table.assign(
        paper=[
            _num(v) + (f" ± {_num(e, '.2g')}" if e == e else "")
            for v, e in zip(table["paper"], table["paper +-"])
        ],
        reproduced=[_fmt(m, s, n) for m, s, n in zip(table["reproduced"], table["std"], table["seeds"])],
        delta=[_num(d, "+.3g") for d in table["delta"]],
    ).drop(columns=["paper +-", "std"] + (["delta", "within paper +-"] if stand_in else []))
    return _table(shown, [STAND_IN_NOTE] if stand_in else [])


def _figures(a: Artifact, figures_dir: Path, out: Path) -> list[dict[str, str]]:
    """Each figure of ``a``: its relative link, name and caption, or that it is not drawn yet."""
    found = []
    for figure in a.figures:
        png = figures_dir / f"{a.id}{figure.suffix}.png"
        rel = Path(os.path.relpath(png, out.parent)).as_posix() if png.exists() else ""
        found.append({"src": rel, "name": png.name, "caption": figure.caption})
    return found


def _artifact(
    a: Artifact,
    rows: pd.DataFrame | None,
    frame: pd.DataFrame,
    reference: pd.DataFrame,
    profile: str | None,
    figures_dir: Path,
    out: Path,
    labels: dict[str, str],
) -> dict[str, Any]:
    """What the template shows of one artifact."""
    from dmllab.experiments.registry import module_path

    mine = frame[frame["artifact"] == a.id] if len(frame) else frame
    has_rows = rows is not None and not rows.empty
    return {
        "id": a.id,
        "label": a.label,
        "title": a.title,
        "paper_title": PAPER_TITLES[a.paper],
        "module": module_path(a.id),
        "paragraphs": [inline_spans(par) for par in paragraphs(a.description)],
        "not_reproduced": list(a.not_reproduced.items()),
        "has_rows": has_rows,
        "figures": _figures(a, figures_dir, out) if has_rows else [],
        "numbers": numbers_table(rows, csv_name=f"results/{a.id}.csv") if has_rows else None,
        "reference": reference_table(a, rows, reference) if has_rows and a.reference else None,
        "differs": summary.differs_lines(a, profile) if has_rows else [],
        "cover": verdicts.seeds_cover(a, rows) if has_rows else "",
        "claims": summary.claim_lines(mine, labels) if len(mine) else [],
        "checks": summary.check_lines(mine) if len(mine) else [],
    }


def _provenance(frames: Sequence[pd.DataFrame], profile: str | None) -> list[tuple[str, str]]:
    def values(col: str) -> str:
        seen = sorted({str(v) for f in frames if col in f for v in f[col].dropna().unique()})
        return ", ".join(seen) if seen else "n/a"

    return [
        ("profile", profile or "none (no results yet)"),
        ("newest result", values("timestamp").rsplit(", ", 1)[-1]),
        ("git commit", values("git_sha")),
        ("dmllab", values("dmllab_version")),
        ("torch", values("torch_version")),
        ("device", values("device")),
    ]


def render(context: dict[str, Any]) -> str:
    """The report's HTML from ``context`` (the template's variables)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("dmllab.pipeline", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template(TEMPLATE).render(**context)


def build_report(
    profile: str | None = None,
    *,
    results: str | os.PathLike | None = None,
    figures: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    reference_directory: str | os.PathLike | None = None,
) -> Path:
    """Write the HTML report and return its path.

    Args:
        profile: which profile's rows to show; ``None`` picks the one present (paper, then quick, then smoke).
        results: folder of ``<id>.csv`` (default: the profile's :func:`dmllab.paths.destination`).
        figures: folder of ``<id>*.png`` (default: the profile's destination).
        out: the HTML file (default ``<figures>/report.html``).
        reference_directory: folder of the papers' numbers (default ``results/reference``).
    """
    from dmllab.reference import load_reference
    from dmllab.results import read_rows

    if profile is not None and profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    where = paths.destination(profile or paths.COMMITTED_PROFILE)
    results_dir = Path(results) if results is not None else where.results
    artifacts = registry.all_artifacts()
    frames = {
        a.id: read_rows(results_dir / f"{a.id}.csv")
        for a in artifacts
        if (results_dir / f"{a.id}.csv").exists()
    }
    if profile is None:
        profile = infer_profile(list(frames.values()))
    where = paths.destination(profile or paths.COMMITTED_PROFILE)
    figures_dir = Path(figures) if figures is not None else where.figures
    out = Path(out) if out is not None else figures_dir / "report.html"
    reference = load_reference(directory=reference_directory)
    shown = {n: f[f["profile"] == profile] for n, f in frames.items()}
    done = [a for a in artifacts if a.id in shown and not shown[a.id].empty]
    status = verdicts.training_status(profile, results_dir) if profile else {}
    fit = verdicts.regime(profile, results_dir) if profile else None
    frame = multiplicity.claims_frame(artifacts, shown, profile or "", status, reference, fit)
    labels = {a.id: a.label for a in artifacts}
    papers = []
    for paper in PAPERS:
        mine = [a for a in artifacts if a.paper == paper]
        claims = frame[frame["paper"] == paper] if len(frame) else frame
        papers.append(
            {
                "id": paper,
                "title": PAPER_TITLES[paper],
                "forest": forest(claims, labels) if len(claims) else None,
                "claims": summary.claim_lines(claims, labels) if len(claims) else [],
                "artifacts": [
                    _artifact(a, shown.get(a.id), frame, reference, profile, figures_dir, out, labels)
                    for a in mine
                ],
            }
        )
    page = render(
        {
            "profile": str(profile),
            "provenance": _provenance(list(shown.values()), profile),
            "done": len(done),
            "total": len(artifacts),
            "verdict_classes": verdicts.VERDICTS,
            "legend": legend(verdicts.VERDICTS),
            "counts": summary.count_lines(frame),
            "papers": papers,
            "profile_note": summary.PROFILE_NOTES.get(profile or "", ""),
            "trains": summary.trains_note(status, profile or ""),
            "regime": summary.regime_note(fit, profile or ""),
            "power_note": summary.POWER_NOTE,
            "q": multiplicity.Q,
            "delta": verdicts.DELTA_POINTS,
        }
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, page.encode("utf-8"))  # not rewritten when unchanged
    return out
