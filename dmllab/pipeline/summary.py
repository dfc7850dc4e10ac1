"""The report's summary and claims tables (:mod:`dmllab.pipeline.report`), from the profile's claims frame
(:func:`dmllab.experiments.verdicts.claims_frame`): per paper the verdicts counted in four classes (a comparison two
artifacts share counted once), the claims tested for Holm's adjustment and the checks apart; then every claim with
its effect, interval, verdict, Holm-adjusted p and verdict, and what differs from the paper here."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dmllab.experiments import verdicts
from dmllab.experiments.artifact import PAPER_TITLES, PAPERS, Artifact

if TYPE_CHECKING:
    import pandas as pd

INTERVAL_NOTE = (
    "Each claim's effect is measured once per seed (paired: both arms share the seed) and judged by Student's t "
    "95% interval over seeds, mean ± t(0.975, n-1) sd / √n: <b>yes</b> when the whole interval has the claimed "
    "sign, <b>no</b> when it lies entirely on the other side, <b>inconclusive</b> otherwise (also with fewer than "
    "2 seeds); <b>not testable</b> when the paper's procedure cannot be kept on this profile or a method the claim "
    "compares does not train here (its effect is shown, greyed). Checks are analytic properties of a toy: they "
    "pass when the property holds on every seed."
)
PROFILE_NOTES = {
    "smoke": "smoke profile: seconds-long runs that only check that every notebook works; the numbers mean nothing.",
    "quick": (
        "quick profile: every artifact run offline on 2 CPU cores. Dataset-free figures use the papers' own toy "
        "settings; artifacts that train image models train a small pre-trained CNN on the synthetic fine-grained "
        "benchmark instead of the papers' networks on CUB/Cars/SOP/In-Shop, so absolute numbers are not "
        "comparable with the papers' (the side-by-side tables show them anyway); what is judged is the direction "
        "of each effect the paper claims."
    ),
    "paper": "paper profile: the authors' datasets, networks and hyper-parameters; the paper's numbers are shown "
    "next to the reproduced ones with the difference (here - paper).",
}


def _p(p: float) -> str:
    return "" if p != p else ("< 0.001" if p < 0.001 else f"{p:.3f}")


def _verdict(verdict: str, why: str = "") -> str:
    css = verdict if verdict in ("yes", "no", "passes", "fails") else "na"
    why = f"<br><span class='why'>{html.escape(why)}</span>" if why else ""
    return f'<span class="{css}">{html.escape(verdict)}</span>{why}'


def _link(artifact_id: str, text: str) -> str:
    return f'<a href="#{html.escape(artifact_id)}">{html.escape(text)}</a>'


def claim_rows(frame: pd.DataFrame, labels: dict[str, str], *, with_artifact: bool) -> str:
    """The verdict claims of ``frame`` (:func:`dmllab.experiments.verdicts.claims_frame`) as an HTML table: claim
    (and its artifact), effect, 95% interval, seeds, verdict and why, Holm-adjusted p and verdict, what differs
    from the paper here (light beside a yes), a shared comparison marked."""
    head = (
        ["claim"] + (["artifact"] if with_artifact else []) + ["effect", "95% interval", "seeds", "verdict"]
    )
    head += ["Holm p", "Holm", "what differs from the paper here"]
    out = ["<table class='claims'><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for rec in frame[frame["kind"] == "verdict"].to_dict("records"):
        css = (
            "nt" if rec["verdict"] == verdicts.NOT_TESTABLE else ("light" if rec["verdict"] == "yes" else "")
        )
        unit = f" <span class='why'>{html.escape(rec['unit'])}</span>" if rec["unit"] else ""
        effect = "" if rec["effect"] != rec["effect"] else f"{rec['effect']:+.3g}{unit}"
        low, high = rec["95% low"], rec["95% high"]
        interval = "" if low != low else f"[{low:+.3g}, {high:+.3g}]"
        why = rec["why"]
        if rec["same as"]:
            shared = ", ".join(labels.get(a, a) for a in rec["same as"].split(", "))
            why = "; ".join(
                filter(
                    None,
                    [why, f"same comparison as {shared}" + ("" if rec["counted"] else ", counted there")],
                )
            )
        cells = [f"<td class='claim'>{html.escape(rec['claim'])}</td>"]
        if with_artifact:
            cells.append(f"<td class='art'>{_link(rec['artifact'], rec['label'])}</td>")
        cells += [
            f"<td class='num'>{effect}</td>",
            f"<td class='num'>{interval}</td>",
            f"<td class='num'>{rec['seeds']}</td>",
            f"<td>{_verdict(rec['verdict'], why)}</td>",
            f"<td class='num'>{_p(rec['holm p'])}</td>",
            f"<td>{_verdict(rec['holm verdict']) if rec['holm verdict'] else ''}</td>",
            f"<td class='differs'>{html.escape(rec['differs'])}</td>",
        ]
        out.append(f"<tr class='{css}'>" + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def check_rows(frame: pd.DataFrame) -> str:
    """The checks of ``frame`` as an HTML table: property, measured value (mean over seeds), passes or fails."""
    checks = frame[frame["kind"] == "check"]
    if checks.empty:
        return ""
    out = [
        "<table class='claims'><tr><th>check</th><th>measured</th><th>unit</th><th>seeds</th><th>result</th></tr>"
    ]
    for rec in checks.to_dict("records"):
        measured = "" if rec["effect"] != rec["effect"] else f"{rec['effect']:+.3g}"
        out.append(
            f"<tr><td class='claim'>{html.escape(rec['claim'])}</td><td class='num'>{measured}</td>"
            f"<td>{html.escape(rec['unit'])}</td><td class='num'>{rec['seeds']}</td>"
            f"<td>{_verdict(rec['verdict'], rec['why'])}</td></tr>"
        )
    return "".join(out) + "</table>"


def _trains(status: verdicts.TrainingStatus, profile: str) -> str:
    """Which compared methods train on ``profile`` (the offline benchmark's gain rows), or that it is unknown."""
    where = f"results/{verdicts.STATUS_ARTIFACT}.csv"
    if not status:
        return (
            f"Whether the methods a claim compares train on this profile is unknown (no {verdicts.GAIN_METRIC} "
            f"rows in {where}): such claims are judged as if they did, and say so."
        )
    fails = sorted(m for m, (gain, threshold) in status.items() if gain < threshold)
    return (
        f"A method trains when its test R@1 gain over the pre-trained network reaches its threshold ({where}): "
        f"{len(status) - len(fails)} of {len(status)} do"
        + (f"; not {', '.join(html.escape(m) for m in fails)}." if fails else ".")
    )


def summary_html(
    frame: pd.DataFrame, artifacts: Sequence[Artifact], profile: str, status: verdicts.TrainingStatus
) -> str:
    """The summary the report opens with: verdict counts per paper, Holm's m, what the intervals cover, whether the
    compared methods train (``status``: :func:`dmllab.experiments.verdicts.training_status`), then every claim per
    paper."""
    counts = verdicts.counts(frame, PAPERS)
    labels = {a.id: a.label for a in artifacts}
    total = counts.sum(numeric_only=True)
    with_checks = bool(total.get("checks", 0))
    head = ["paper", *verdicts.VERDICTS, "tested (Holm)", "Holm: yes / no", "shared"]
    head += ["checks passed"] if with_checks else []
    out = [
        "<section id='summary'><h2>Summary</h2><table id='summary-counts'><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr>"
    ]
    for rec in [*counts.to_dict("records"), {"paper": "", **total.to_dict()}]:
        name = (
            f"<a href='#paper-{rec['paper']}'>{html.escape(PAPER_TITLES[rec['paper']])}</a>"
            if rec["paper"]
            else "<b>all papers</b>"
        )
        cells = [name] + [str(int(rec[v])) for v in verdicts.VERDICTS]
        cells += [
            str(int(rec["tested"])),
            f"{int(rec['holm yes'])} / {int(rec['holm no'])}",
            str(int(rec["shared"])),
        ]
        if with_checks:
            cells.append(f"{int(rec['checks passed'])} of {int(rec['checks'])}" if rec["checks"] else "")
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    out.append("</table>")
    m = int(total.get("tested", 0))
    drawn = [a for a in artifacts if verdicts.seeds_cover(a, profile) == verdicts.DATA_SEEDS_COVER]
    cover = html.escape(verdicts.SEEDS_COVER) + (
        f" Except in {', '.join(_link(a.id, a.label + ' (' + a.paper + ')') for a in drawn)}: "
        + html.escape(verdicts.DATA_SEEDS_COVER)
        if drawn
        else ""
    )
    out.append(
        f"<p class='meta'>{INTERVAL_NOTE} A comparison two artifacts share is counted once (<i>shared</i>). "
        f"Holm: the two-sided p-values of the m = {m} claims tested on this profile (counted once; not the "
        "not-testable ones, not the checks) are adjusted together; the raw verdict stays the headline. "
        f"{cover} {_trains(status, profile)}</p>"
    )
    if profile in PROFILE_NOTES:
        out.append(f"<p class='note'>{html.escape(PROFILE_NOTES[profile])}</p>")
    out.append("<div id='summary-claims'>")
    for paper in counts["paper"]:
        out.append(f"<h3>{html.escape(PAPER_TITLES[paper])}</h3>")
        out.append(claim_rows(frame[frame["paper"] == paper], labels, with_artifact=True))
    return "".join(out) + "</div></section>"
