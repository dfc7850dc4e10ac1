"""The report ``figures/report.html``, rebuilt from ``results/`` by ``dmllab report`` (and ``dmllab study``): the
study's results section.

It opens with a summary (:func:`summary_html`): per paper, the claims' verdicts counted in four classes (a
comparison two artifacts share counted once) and the checks apart, the number of claims tested for Holm's
adjustment, then every claim with its effect, 95% interval over seeds, verdict, Holm-adjusted p and verdict, what
differs from the paper, and a link to its artifact (:mod:`dmllab.experiments.verdicts`). Then each paper's
artifacts in the paper's order (:func:`dmllab.experiments.registry.label_key`): description, figures (relative
``<img>`` links to ``figures/<id>*.png``), the reproduced numbers (mean +- std over seeds; per device where rows
come from several), the paper's printed numbers side by side, the claims and the checks. One self-contained HTML
file with inline CSS; images are linked, not embedded, so it opens from ``figures/``.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dmllab import paths
from dmllab.experiments import registry, verdicts
from dmllab.experiments.artifact import PAPER_TITLES, PAPERS, Artifact
from dmllab.experiments.compare import paper_vs_reproduced, summarise
from dmllab.fileio import write_atomic
from dmllab.pipeline.prose import inline_html, paragraphs
from dmllab.pipeline.summary import check_rows, claim_rows, summary_html
from dmllab.profiles import PROFILES

if TYPE_CHECKING:
    import pandas as pd

_CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 0 auto; max-width: 1200px;
       padding: 0 1.5em 1.5em; color: #1d2330; background: #ffffff; line-height: 1.4; }
header { border-bottom: 3px solid #3b6ea5; margin-bottom: .6em; }
h1 { color: #23466e; font-size: 1.6em; margin: .5em 0 .2em; }
h2 { color: #23466e; border-bottom: 1px solid #c9d6e6; padding-bottom: .2em; }
h3 { color: #23466e; } h4 { margin: 1.2em 0 .3em; }
.meta { font-size: .85em; color: #4a5568; margin: .3em 0; }
.note { background: #eef4fb; padding: .5em 1em; border-left: 4px solid #3b6ea5; font-size: .9em; }
section.artifact { margin: 1.5em 0 2.5em 0; }
.figs img { max-width: 100%; border: 1px solid #dde3ea; margin: .4em 0 0; }
figure { margin: 0 0 .8em; } figcaption { font-size: .85em; color: #4a5568; }
table { border-collapse: collapse; margin: .6em 0; font-size: .88em; }
th, td { border: 1px solid #c9d6e6; padding: .2em .5em; text-align: right; vertical-align: top; }
th { background: #e6eef8; } td:first-child, th:first-child { text-align: left; }
table.claims td, table.claims th { text-align: left; } table.claims td.num { text-align: right; white-space: nowrap; }
td.claim { max-width: 26em; } td.art { white-space: nowrap; } td.differs { max-width: 22em; font-size: .9em; color: #4a5568; }
tr.light td.differs { color: #9aa5b1; } tr.nt td { color: #8a8f98; }
#summary-counts td:first-child { white-space: nowrap; }
.missing { color: #a0522d; font-style: italic; }
.yes, .passes { color: #1b7f3b; font-weight: bold; } .no, .fails { color: #b22222; font-weight: bold; }
.na { color: #777; } .why { font-size: .85em; color: #4a5568; }
.scroll { overflow-x: auto; }
"""


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


def numbers_table(rows: pd.DataFrame, *, max_rows: int = MAX_TABLE_ROWS, csv_name: str = "the CSV") -> str:
    """HTML pivot of the reproduced numbers: one line per variant/dataset/parameters (and device, where the rows
    come from several), one column per metric.

    Parameters with one value over all rows are listed above the table instead of repeated in every line;
    tables longer than ``max_rows`` lines are cut (the CSV has them all).
    """
    several = "device" in rows.columns and rows["device"].nunique() > 1
    summary = summarise(rows, by=("device",) if several else ())
    summary["cell"] = [_fmt(m, s, n) for m, s, n in zip(summary["mean"], summary["std"], summary["n"])]
    index = [c for c in summary.columns if c not in ("metric", "mean", "std", "n", "cell")]
    if not index:
        return summary.set_index("metric")[["cell"]].T.to_html(index=False, border=0, escape=True)
    summary[index] = summary[index].astype(object).where(summary[index].notna(), "")
    constant = [c for c in index if summary[c].nunique() <= 1]
    varying = [c for c in index if c not in constant] or index[:1]
    fixed = ", ".join(
        f"{c.removeprefix('param_')} = {summary[c].iloc[0]}" for c in constant if c not in varying
    )
    table = summary.pivot_table(index=varying, columns="metric", values="cell", aggfunc="first", sort=False)
    table.columns.name = None
    table = table.reset_index().rename(columns=lambda c: c.removeprefix("param_"))
    note = f"<p class='meta'>{html.escape(fixed)}</p>" if fixed else ""
    if len(table) > max_rows:
        note += f"<p class='meta'>first {max_rows} of {len(table)} lines; all in {html.escape(csv_name)}</p>"
        table = table.head(max_rows)
    return (
        note
        + "<div class='scroll'>"
        + table.to_html(index=False, border=0, escape=True, na_rep="")
        + "</div>"
    )


def _num(v: float, fmt: str = ".4g") -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def reference_table(artifact: Artifact, rows: pd.DataFrame, reference: pd.DataFrame) -> str:
    """Paper vs reproduced, as HTML (:func:`dmllab.experiments.compare.paper_vs_reproduced`)."""
    if artifact.reference is None:
        return '<p class="missing">The paper prints no numbers for this artifact.</p>'
    table = paper_vs_reproduced(artifact, rows, reference)
    if table.empty:
        return '<p class="missing">No reproduced row maps onto a printed cell of the paper.</p>'
    shown = table.assign(
        paper=[
            _num(v) + (f" ± {_num(e, '.2g')}" if e == e else "")
            for v, e in zip(table["paper"], table["paper +-"])
        ],
        reproduced=[_fmt(m, s, n) for m, s, n in zip(table["reproduced"], table["std"], table["seeds"])],
        delta=[_num(d, "+.3g") for d in table["delta"]],
    ).drop(columns=["paper +-", "std"])
    note = (
        "<p class='meta'>The quick profile's rows come from the offline benchmark, so they face the paper's "
        "CUB cells only as an orientation: absolute numbers are not comparable.</p>"
    )
    return note + "<div class='scroll'>" + shown.to_html(index=False, border=0, escape=True) + "</div>"


def artifact_html(
    a: Artifact,
    rows: pd.DataFrame | None,
    frame: pd.DataFrame,
    reference: pd.DataFrame,
    profile: str | None,
    figures_dir: Path,
    out: Path,
    labels: dict[str, str],
) -> str:
    """One artifact's section: title, description, figures, numbers, paper vs reproduced, claims, checks."""
    from dmllab.experiments.registry import module_path

    body = [f'<section class="artifact" id="{a.id}"><h3>{html.escape(a.label)}: {html.escape(a.title)}</h3>']
    body.append(
        f"<p class='meta'>{html.escape(PAPER_TITLES[a.paper])}, <b>{html.escape(a.label)}</b> &middot; notebook "
        f"<code>notebooks/{a.id}.ipynb</code> &middot; <code>{module_path(a.id)}</code></p>"
    )
    body += [f"<p>{inline_html(par)}</p>" for par in paragraphs(a.description)]
    for row, why in a.not_reproduced.items():
        body.append(f"<p class='missing'>not reproduced: {html.escape(row)}: {html.escape(why)}</p>")
    if rows is None or rows.empty:
        body.append(
            f"<p class='missing'>not run yet (no {html.escape(str(profile))} rows in results/{a.id}.csv)</p>"
        )
        return "".join(body) + "</section>"
    body.append("<div class='figs'>")
    for figure in a.figures:
        png = figures_dir / f"{a.id}{figure.suffix}.png"
        if png.exists():
            rel = Path(os.path.relpath(png, out.parent)).as_posix()
            caption = f"<figcaption>{html.escape(figure.caption)}</figcaption>" if figure.caption else ""
            body.append(
                f'<figure><img src="{html.escape(rel)}" alt="{html.escape(png.stem)}">{caption}</figure>'
            )
        else:
            body.append(f"<p class='missing'>figure {html.escape(png.name)} not drawn yet</p>")
    body.append("</div><h4>Reproduced numbers</h4>")
    body.append(numbers_table(rows, csv_name=f"results/{a.id}.csv"))
    if a.reference is not None:
        body.append("<h4>Paper vs reproduced</h4>" + reference_table(a, rows, reference))
    mine = frame[frame["artifact"] == a.id] if len(frame) else frame
    if (mine["kind"] == "verdict").any():
        body.append("<h4>The paper's claims</h4>" + claim_rows(mine, labels, with_artifact=False))
        if profile and verdicts.seeds_cover(a, profile) == verdicts.DATA_SEEDS_COVER:
            body.append(f"<p class='meta'>{html.escape(verdicts.DATA_SEEDS_COVER)}</p>")
    if (mine["kind"] == "check").any():
        body.append("<h4>Checks</h4>" + check_rows(mine))
    return "".join(body) + "</section>"


def _provenance_header(frames: Sequence[pd.DataFrame], profile: str | None) -> str:
    def values(col: str) -> str:
        seen = sorted({str(v) for f in frames if col in f for v in f[col].dropna().unique()})
        return ", ".join(seen) if seen else "n/a"

    items = [
        ("profile", profile or "none (no results yet)"),
        ("newest result", values("timestamp").rsplit(", ", 1)[-1]),
        ("git commit", values("git_sha")),
        ("dmllab", values("dmllab_version")),
        ("torch", values("torch_version")),
        ("device", values("device")),
    ]
    return "<p class='meta'>" + " &middot; ".join(f"<b>{k}</b>: {html.escape(v)}" for k, v in items) + "</p>"


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
    frame = verdicts.claims_frame(artifacts, shown, profile or "", status)
    labels = {a.id: a.label for a in artifacts}

    body = [
        f"<header><h1>dmllab: reproduced results, {html.escape(str(profile))} profile</h1>"
        f"{_provenance_header(list(shown.values()), profile)}"
        f"<p class='meta'>{len(done)} of {len(artifacts)} artifacts have {html.escape(str(profile))} rows.</p>"
        "</header>",
        summary_html(frame, artifacts, profile or "", status),
    ]
    for paper in PAPERS:
        mine = [a for a in artifacts if a.paper == paper]
        if not mine:
            continue
        body.append(f"<section class='paper' id='paper-{paper}'><h2>{html.escape(PAPER_TITLES[paper])}</h2>")
        body += [
            artifact_html(a, shown.get(a.id), frame, reference, profile, figures_dir, out, labels)
            for a in mine
        ]
        body.append("</section>")

    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>dmllab report</title>"
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, page.encode("utf-8"))  # not rewritten when unchanged
    return out
