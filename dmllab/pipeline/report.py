"""The figure report ``figures/report.html``, rebuilt from ``results/`` by ``dmllab report`` (and ``dmllab study``).

For every artifact (paper order): title, paper and label, its figures (relative ``<img>`` links to
``figures/<id>*.png``), the reproduced numbers (mean +- std over seeds), the paper's printed numbers side by side
(paper value, reproduced mean +- std, delta, within the paper's +- where it prints one), and each claim's verdict
with its effect and 95% interval over seeds (:mod:`dmllab.experiments.stats`). One self-contained HTML file with
inline CSS; images are linked, not embedded, so it opens from ``figures/``.
"""

from __future__ import annotations

import datetime as _dt
import html
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dmllab import paths
from dmllab.experiments import registry
from dmllab.experiments.artifact import PAPER_TITLES, Artifact
from dmllab.experiments.compare import paper_vs_reproduced, summarise, verdict_table
from dmllab.profiles import PROFILES

if TYPE_CHECKING:
    import pandas as pd

INTERVAL_NOTE = (
    "Verdicts: each claim's effect is measured once per seed (paired: both arms share the seed) and judged by "
    "Student's t 95% interval over seeds, mean +- t(0.975, n-1) sd / sqrt(n): <b>yes</b> when the whole interval "
    "has the claimed sign, <b>no</b> when it lies entirely on the other side, <b>inconclusive</b> otherwise "
    "(also with fewer than 2 seeds)."
)
PROFILE_NOTES = {
    "smoke": "smoke profile: seconds-long runs that only check that every notebook works; the numbers mean nothing.",
    "quick": (
        "quick profile: each artifact listed below, run offline on 2 CPU cores. Dataset-free figures use the "
        "papers' own toy settings; artifacts that train image models train a small pre-trained CNN on the "
        "synthetic fine-grained benchmark instead of the papers' networks on CUB/Cars/SOP/In-Shop, so absolute "
        "numbers are not comparable with the papers' (the side-by-side tables show them anyway); what is judged "
        "is the direction of each effect the paper claims. Artifacts without rows say so."
    ),
    "paper": "paper profile: the authors' datasets, networks and hyper-parameters; the paper's numbers are shown "
    "next to the reproduced ones with the difference (here - paper).",
}

_CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 0 auto; max-width: 1100px;
       padding: 1.5em; color: #1d2330; background: #ffffff; line-height: 1.45; }
header { border-bottom: 3px solid #3b6ea5; margin-bottom: 1.5em; }
h1 { color: #23466e; } h2 { color: #23466e; border-bottom: 1px solid #c9d6e6; padding-bottom: .2em; }
.meta { font-size: .9em; color: #4a5568; } .note { background: #eef4fb; padding: .6em 1em; border-left: 4px solid #3b6ea5; }
section.artifact { margin: 2em 0 3em 0; }
.figs img { max-width: 100%; border: 1px solid #dde3ea; margin: .4em 0; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
th, td { border: 1px solid #c9d6e6; padding: .25em .6em; text-align: right; }
th { background: #e6eef8; } td:first-child, th:first-child { text-align: left; }
.missing { color: #a0522d; font-style: italic; }
.yes { color: #1b7f3b; font-weight: bold; } .no { color: #b22222; font-weight: bold; } .na { color: #777; }
nav ul { columns: 2; font-size: .9em; }
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
    """HTML pivot of the reproduced numbers: one line per variant/dataset/parameters, one column per metric.

    Parameters with one value over all rows are listed above the table instead of repeated in every line;
    tables longer than ``max_rows`` lines are cut (the CSV has them all).
    """
    summary = summarise(rows)
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


def claims_table(artifact: Artifact, rows: pd.DataFrame) -> str:
    """Each claim with the paper's answer, the effect and its 95% interval over seeds, and the verdict."""
    if not artifact.claims:
        return ""
    items = []
    for rec in verdict_table(artifact, rows).to_dict("records"):
        css = {"yes": "yes", "no": "no"}.get(rec["verdict"], "na")
        iv = (
            ""
            if rec["seeds"] < 2 or rec["95% low"] != rec["95% low"]
            else f"[{rec['95% low']:+.3g}, {rec['95% high']:+.3g}]"
        )
        effect = "" if rec["effect"] != rec["effect"] else f"{rec['effect']:+.3g}"
        why = f" ({html.escape(rec['why'])})" if rec["why"] else ""
        items.append(
            f"<tr><td>{html.escape(rec['claim'])}</td><td>{html.escape(rec['paper'])}</td><td>{effect}</td>"
            f"<td>{iv}</td><td>{rec['seeds']}</td><td>{html.escape(rec['unit'])}</td>"
            f'<td><span class="{css}">{html.escape(rec["verdict"])}</span>{why}</td></tr>'
        )
    return (
        "<table><tr><th>claim</th><th>paper</th><th>effect</th><th>95% interval</th><th>seeds</th><th>unit</th>"
        "<th>here</th></tr>" + "".join(items) + "</table>"
    )


def _provenance_header(frames: Sequence[pd.DataFrame], profile: str | None) -> str:
    def values(col: str) -> str:
        seen = sorted({str(v) for f in frames if col in f for v in f[col].dropna().unique()})
        return ", ".join(seen) if seen else "n/a"

    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    items = [
        ("profile", profile or "none (no results yet)"),
        ("report built", now),
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
        results: folder of ``<id>.csv`` (default ``results/``).
        figures: folder of ``<id>*.png`` (default ``figures/`` for quick, ``figures/<profile>/`` otherwise).
        out: the HTML file (default ``<figures>/report.html``).
        reference_directory: folder of the papers' numbers (default ``results/reference``).
    """
    from dmllab.reference import load_reference
    from dmllab.results import read_rows

    if profile is not None and profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    results_dir = Path(results) if results is not None else paths.results_dir()
    artifacts = registry.all_artifacts()
    frames = {
        a.id: read_rows(results_dir / f"{a.id}.csv")
        for a in artifacts
        if (results_dir / f"{a.id}.csv").exists()
    }
    if profile is None:
        profile = infer_profile(list(frames.values()))
    figures_dir = Path(figures) if figures is not None else paths.profile_figures_dir(profile or "quick")
    out = Path(out) if out is not None else figures_dir / "report.html"
    reference = load_reference(directory=reference_directory)
    shown = {n: f[f["profile"] == profile] for n, f in frames.items()}
    done = [a for a in artifacts if a.id in shown and not shown[a.id].empty]

    body = [f"<header><h1>dmllab figure report</h1>{_provenance_header(list(shown.values()), profile)}"]
    if profile in PROFILE_NOTES:
        body.append(f"<p class='note'>{html.escape(PROFILE_NOTES[profile])}</p>")
    body.append(
        f"<p class='meta'>{len(done)} of {len(artifacts)} artifacts have {html.escape(str(profile))} rows. "
        f"{INTERVAL_NOTE}</p>"
    )
    body.append("</header><nav><ul>")
    body += [
        f'<li><a href="#{a.id}">{html.escape(a.label)}: {html.escape(a.title)}</a>'
        + ("" if a in done else " <span class='missing'>(no rows)</span>")
        + "</li>"
        for a in artifacts
    ]
    body.append("</ul></nav>")

    for a in artifacts:
        body.append(
            f'<section class="artifact" id="{a.id}"><h2>{html.escape(a.label)}: {html.escape(a.title)}</h2>'
        )
        body.append(
            f"<p class='meta'>{html.escape(PAPER_TITLES[a.paper])}, <b>{html.escape(a.label)}</b> &middot; "
            f"notebook <code>notebooks/{a.id}.ipynb</code></p><p>{html.escape(a.description.strip())}</p>"
        )
        for row, why in a.not_reproduced.items():
            body.append(f"<p class='missing'>not reproduced: {html.escape(row)}: {html.escape(why)}</p>")
        rows = shown.get(a.id)
        if rows is None or rows.empty:
            body.append(
                f"<p class='missing'>not run yet (no {html.escape(str(profile))} rows in results/{a.id}.csv)</p>"
            )
            body.append("</section>")
            continue
        pngs = [figures_dir / f"{a.id}{f.suffix}.png" for f in a.figures]
        body.append("<div class='figs'>")
        for png in pngs:
            if png.exists():
                rel = os.path.relpath(png, out.parent)
                body.append(f'<img src="{html.escape(Path(rel).as_posix())}" alt="{html.escape(png.stem)}">')
            else:
                body.append(f"<p class='missing'>figure {html.escape(png.name)} not drawn yet</p>")
        body.append("</div><h3>Reproduced numbers</h3>")
        body.append(numbers_table(rows, csv_name=f"results/{a.id}.csv"))
        if a.reference is not None:
            body.append("<h3>Paper vs reproduced</h3>" + reference_table(a, rows, reference))
        if a.claims:
            body.append("<h3>The paper's claims</h3>" + claims_table(a, rows))
        body.append("</section>")

    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>dmllab figure report</title>"
        f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return out


_CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    """The path of a Chromium/Chrome executable on ``PATH`` (or ``$DMLLAB_CHROMIUM``), or None."""
    import shutil

    explicit = os.environ.get("DMLLAB_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in _CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot(
    page: str | os.PathLike,
    png: str | os.PathLike,
    *,
    chromium: str | None = None,
    width: int = 1280,
    height: int = 2000,
    timeout: float = 120.0,
) -> Path:
    """Render ``page`` (an HTML file) with headless Chromium into ``png``; return the PNG path.

    Raises:
        FileNotFoundError: no Chromium found, or it wrote no screenshot (its output is in the message).
    """
    import subprocess
    import tempfile

    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("no chromium executable found (install the OS package 'chromium')")
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dmllab-chromium-") as profile_dir:
        cmd = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile_dir}",
            f"--screenshot={png}",
            f"--window-size={width},{height}",
            Path(page).resolve().as_uri(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if not png.exists():
        raise FileNotFoundError(
            f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
        )
    return png
