"""The report's summary and claims as data for its template (:mod:`dmllab.pipeline.report`), from the profile's
claims frame (:func:`dmllab.experiments.multiplicity.claims_frame`): the verdicts counted per paper
(:func:`count_lines`), every claim (:func:`claim_lines`) and every check (:func:`check_lines`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dmllab.experiments import gate, multiplicity, verdicts
from dmllab.experiments.artifact import PAPER_TITLES, PAPERS, Artifact

if TYPE_CHECKING:
    import pandas as pd

PROFILE_NOTES = {
    "smoke": "smoke profile: seconds-long runs that only check that every notebook works; the numbers mean nothing.",
    "quick": (
        "quick profile: every artifact run offline on 2 CPU cores. Dataset-free figures use the papers' own toy "
        "settings; artifacts that train image models train a small pre-trained CNN on the synthetic fine-grained "
        "benchmark instead of the papers' networks on CUB/Cars/SOP/In-Shop, so absolute numbers are not "
        "comparable with the papers'; what is judged is each effect's direction, and equivalence within +-1 "
        "point (docs/preregistration.md)."
    ),
    "paper": "paper profile: the authors' datasets, networks and hyper-parameters; the paper's effects are the "
    "yardstick as printed.",
}
PAPER_SEEDS = "seeds for the paper's effect"
POWER_NOTE = f"{int(100 * verdicts.POWER)}% power of a two-sided t test at 5% (noncentral t) with the observed per-seed sd"


def _num(v: Any, fmt: str = "+.3g") -> str:
    return "" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(float(v), fmt)


def _seeds(n: Any) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "> 1000"
    return str(int(n))


def count_lines(frame: pd.DataFrame, papers: Sequence[str] = PAPERS) -> list[dict[str, Any]]:
    """One line per paper with claims in ``frame`` and a last line for all of them: the verdict classes, the
    primary / secondary claims tested with the yes / no surviving Holm / BH, the shared claims, the checks."""
    counts = multiplicity.counts(frame, papers)
    if counts.empty:
        return []
    total = counts.sum(numeric_only=True).to_dict()
    out = []
    for rec in [*counts.to_dict("records"), {"paper": "", **total}]:
        out.append(
            {
                "paper": rec["paper"],
                "title": PAPER_TITLES.get(rec["paper"], "all papers"),
                "classes": [int(rec[v]) for v in verdicts.VERDICTS],
                "primary": f"{int(rec['primary yes'])} / {int(rec['primary no'])} of {int(rec['primary'])}",
                "secondary": f"{int(rec['secondary yes'])} / {int(rec['secondary no'])} of {int(rec['secondary'])}",
                "shared": int(rec["shared"]),
                "checks": f"{int(rec['checks passed'])} of {int(rec['checks'])}" if rec["checks"] else "",
            }
        )
    return out


def _effect(rec: dict[str, Any]) -> tuple[str, str]:
    """``(effect, interval)`` as text."""
    effect = _num(rec["effect"])
    low, high = rec["95% low"], rec["95% high"]
    return effect, "" if low != low else f"[{_num(low)}, {_num(high)}]"


def claim_lines(frame: pd.DataFrame, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The verdict claims of ``frame`` as lines of the claims table."""
    out = []
    for rec in frame[frame["kind"] == "verdict"].to_dict("records"):
        effect, interval = _effect(rec)
        verdict = str(rec["verdict"])
        power = ""
        if verdict == "inconclusive" and rec["seeds"] >= 2:
            power = f"{_seeds(rec['seeds to resolve'])} at the observed effect"
            if math.isfinite(rec["yardstick"]) and rec["yardstick"] > 0:
                needed = _seeds(rec[PAPER_SEEDS])
                power += f"; {needed} for {_num(rec['yardstick'])}"
        train = ""
        if math.isfinite(rec["train better"]) or math.isfinite(rec["train worse"]):
            train = f"{_num(rec['train better'], '.1f') or '?'} / {_num(rec['train worse'], '.1f') or '?'}"
        shared = ""
        if rec["shared with"]:
            others = []
            for name in rec["shared with"].split(", "):
                artifact, _, key = name.partition(":")
                others.append(f"{labels.get(artifact, artifact)} ({key})")
            plural = "s" if len(others) > 1 else ""
            shared = f"{len(others)} other claim{plural} read the same comparison (runs, metric, condition)"
        out.append(
            {
                "artifact": rec["artifact"],
                "label": rec["label"],
                "key": rec["key"],
                "claim": rec["claim"],
                "primary": bool(rec["primary"]),
                "paper_says": rec["paper says"],
                "paper_effect": _num(rec["paper effect"]),
                "unit": rec["unit"],
                "effect": effect,
                "interval": interval,
                "seeds": int(rec["seeds"]),
                "verdict": verdict,
                "css": verdict.replace(" ", "-"),
                "why": rec["why"],
                "shared": shared,
                "shared_names": ", ".join(others) if rec["shared with"] else "",
                "counted": bool(rec["counted"]),
                "adjusted": rec["adjusted"],
                "adjusted_p": _p(rec["adjusted p"]),
                "family": rec["family"],
                "power": power,
                "train": train,
                "learning": rec["learning"],
            }
        )
    return out


def _p(p: float) -> str:
    return "" if p != p else ("< 0.001" if p < 0.001 else f"{p:.3f}")


def check_lines(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The checks of ``frame``: property, measured value (mean over seeds), seeds, passes or fails."""
    out = []
    for rec in frame[frame["kind"] == "check"].to_dict("records"):
        out.append(
            {
                "claim": rec["claim"],
                "measured": _num(rec["effect"]),
                "unit": rec["unit"],
                "seeds": int(rec["seeds"]),
                "verdict": rec["verdict"],
                "why": rec["why"],
            }
        )
    return out


def trains_note(status: verdicts.TrainingStatus, profile: str) -> str:
    """Which compared methods train on ``profile`` (the offline benchmark's validation gate), or that it is
    unknown."""
    where = f"results/{verdicts.STATUS_ARTIFACT}.csv"
    if not status:
        return (
            f"Whether the methods the claims compare train on this profile is unknown (no {verdicts.GAIN_METRIC} "
            f"rows in {where}): every claim is judged as if they did."
        )
    fails = sorted(m for m, g in status.items() if not g.trains)
    return (
        "A method trains (learns) when the 95% lower bound of its validation R@1 gain over the pre-trained network "
        f"with the same pooling is above {gate.THRESHOLD:g} and no seed diverged ({where}): "
        f"{len(status) - len(fails)} of {len(status)} do" + (f"; not {', '.join(fails)}." if fails else ".")
    )


def regime_note(fit: gate.Regime | None, profile: str) -> str:
    """Whether ``profile`` is in the papers' regime (ProxyNCA++'s training R@1), and what follows for the
    regularisers' claims ("" where unknown or on the paper profile)."""
    if fit is None:
        return ""
    where = "in" if fit.fits else "not in"
    then = "" if fit.fits else " Regularisers' claims are not testable here (optimisation-limited)."
    return (
        f"ProxyNCA++'s training R@1 on {profile} is {fit.train_r1:.1f} % ({fit.source}): the profile is {where} the "
        f"papers' regime (>= {gate.REGIME_TRAIN_R1:g} %)." + then
    )


def differs_lines(artifact: Artifact, profile: str | None) -> list[str]:
    """What differs from the paper in ``artifact``'s claims on ``profile``: each distinct part of their
    ``differs`` lines once (a comparison's own change, the profile's analogue of a method)."""
    if not profile:
        return []
    parts: list[str] = []
    for claim in artifact.claims:
        split = getattr(claim.differs, "parts", None)
        parts += list(split(profile)) if split else [claim.differs_on(profile)]
    return list(dict.fromkeys(p for p in parts if p))
