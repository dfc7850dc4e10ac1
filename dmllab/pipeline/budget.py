"""What a study leaves out (docs/guide/gpu.md): an artifact that needs a dataset not in ``--datasets``
(:func:`dataset_overrides`; one over several datasets runs on those available), and under ``--max-gpu-hours`` the
artifacts, in the papers' order of importance, that do not fit in what is left of the budget or cannot be priced
(:func:`select`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dmllab.experiments.artifact import Artifact

if TYPE_CHECKING:
    from dmllab.pipeline.cost import Price, Unpriced


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
