"""What a study leaves out: the datasets a researcher has (``dmllab study --datasets``) and a GPU-hour budget
(``--max-gpu-hours``), and the plan's table of what each artifact costs (:func:`cost_lines`).

**Datasets** (:func:`dataset_overrides`): an artifact whose parameters list its ``datasets`` runs on the ones
available (its notebook gets the shorter list, so the rows of the others are absent and its claims say so:
:func:`dmllab.experiments.verdicts.missing_datasets`); an artifact left with none, one whose single ``dataset`` is
not available, or one whose runs read an unavailable dataset some other way is left out, with the reason.

**Budget** (:func:`select`): the artifacts in the papers' order of importance
(:func:`dmllab.experiments.registry.by_importance`, headline tables first), each with the GPU hours of the runs it
adds to those already chosen (central value, :mod:`dmllab.pipeline.cost`), are taken while they fit in the budget;
one that does not fit, or whose runs the calibration cannot price, is left out and a later, cheaper one may still
fit. Artifacts without training runs cost nothing and are always kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dmllab.experiments.artifact import Artifact

if TYPE_CHECKING:
    from dmllab.pipeline.cost import Price, Unpriced
    from dmllab.pipeline.plan import Plan


def real_datasets() -> list[str]:
    """The datasets read from a folder (the ones ``--datasets`` names)."""
    from dmllab.data import DATASETS
    from dmllab.data.real import is_real_dataset

    return [n for n in DATASETS.names() if is_real_dataset(n)]


def check_datasets(datasets: Sequence[str] | str | None) -> tuple[str, ...] | None:
    """``datasets`` as a tuple (a comma-separated string is split), None for all.

    Raises:
        ValueError: a name that is not a real dataset, or none at all (one line listing the valid names).
    """
    if datasets is None:
        return None
    names = [d.strip() for d in datasets.split(",")] if isinstance(datasets, str) else list(datasets)
    names = [n for n in names if n]
    valid = real_datasets()
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise ValueError(
            f"--datasets {','.join(bad) if bad else repr(datasets)}: name the datasets you have, comma-separated, "
            f"among {', '.join(valid)}"
        )
    return tuple(dict.fromkeys(names))


def _is_real(name: Any) -> bool:
    from dmllab.data.real import is_real_dataset

    return isinstance(name, str) and is_real_dataset(name)


def dataset_overrides(
    artifact: Artifact, profile: str, datasets: Sequence[str] | None
) -> tuple[dict[str, Any], str]:
    """``(parameter overrides, why it is left out)`` of ``artifact`` on ``profile`` with only ``datasets``
    available (module docstring); ``({}, "")`` when nothing changes, a non-empty reason when it is left out."""
    if datasets is None:
        return {}, ""
    declared = artifact.defaults(profile)
    listed = declared.get("datasets")
    if isinstance(listed, list):
        keep = [d for d in listed if not _is_real(d) or d in datasets]
        if not keep:
            return {}, f"needs {', '.join(listed)} (not in --datasets)"
        return ({"datasets": keep} if keep != listed else {}), ""
    single = declared.get("dataset")
    if _is_real(single) and single not in datasets:
        return {}, f"needs {single} (not in --datasets)"
    return {}, ""


def unavailable(datasets_read: Sequence[str], datasets: Sequence[str] | None) -> list[str]:
    """The real datasets among ``datasets_read`` that are not in ``datasets`` (all available when None)."""
    if datasets is None:
        return []
    return sorted({d for d in datasets_read if _is_real(d) and d not in datasets})


def select(
    ordered: Sequence[tuple[str, Mapping[str, Price | Unpriced]]],
    already: set[str],
    budget_h: float,
) -> tuple[list[str], dict[str, str]]:
    """``(chosen artifact ids, {left-out id: why})``: ``ordered`` is ``(artifact id, {run key: price of each run
    it needs})`` in the order of importance; runs in ``already`` (stored) cost nothing (module docstring)."""
    from dmllab.pipeline.cost import Unpriced

    chosen, left_out, taken, spent = [], {}, set(already), 0.0
    for aid, prices in ordered:
        new = {k: p for k, p in prices.items() if k not in taken}
        unknown = sorted({p.why for p in new.values() if isinstance(p, Unpriced)})
        if unknown:
            left_out[aid] = f"its cost is unknown: {unknown[0]}"
            continue
        hours = sum(p.hours for p in new.values())  # type: ignore[union-attr]
        if spent + hours > budget_h + 1e-9:
            left_out[aid] = f"needs {hours:,.1f} GPU-h, {budget_h - spent:,.1f} of {budget_h:g} left"
            continue
        chosen.append(aid)
        taken |= set(new)
        spent += hours
    return chosen, left_out


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f}"


def cost_lines(plan: Plan) -> list[str]:
    """Per artifact (in the order of importance) the GPU hours of the runs it adds to the ones above it, then the
    total with its range and the approximations used; [] for a fast dev run and when no run on a real dataset is
    priced."""
    from dmllab.experiments.registry import by_importance
    from dmllab.pipeline.cost import STAGE2_LOW, Price, Unpriced

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
        priced = [p for p in mine if isinstance(p, Price)]
        central = sum(p.seconds for p in priced)
        cumulative += central
        span = f"{_hours(sum(p.low_s for p in priced))}-{_hours(sum(p.high_s for p in priced))}"
        unpriced = len(mine) - len(priced)
        lines.append(
            f"{a.id[:34]:<34} {a.tier:<10} {len(mine):>5} {_hours(central):>9} {span:>17} {_hours(cumulative):>10}"
            + (f"  + {unpriced} not priced" if unpriced else "")
        )
    prices = [r.price for r in missing]
    priced = [p for p in prices if isinstance(p, Price)]
    low, high = sum(p.low_s for p in priced), sum(p.high_s for p in priced)
    central = sum(p.seconds for p in priced)
    lines.append(
        f"total: {_hours(central)} GPU-hours ({_hours(low)}-{_hours(high)}) for {len(priced)} runs"
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
    for why, n in _counts(p.why for p in prices if isinstance(p, Unpriced)).items():
        lines.append(f"  not priced ({n} runs): {why}")
    return lines


def _counts(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
