"""The ProxyNCA++ paper's facts shared by its artifacts: the enhancement names, the datasets, the reference
tables' names and rows, and the sweep claims.

Runs are shared across artifacts by building the same config the same way (:func:`dmllab.experiments.kit.config`):
the default ProxyNCA++ preset of a profile is one run set used by every table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dmllab.experiments import figures, kit
from dmllab.experiments.artifact import Figure, Run
from dmllab.experiments.compare import diff_at
from dmllab.experiments.params import Params

# The six enhancements in the paper's order (Sec. 3).
ENHANCEMENTS: tuple[str, ...] = ("prob", "scale", "cbs", "norm", "max", "fast")
PAPER_DATASETS: list[str] = ["cub", "cars", "sop", "inshop"]
# Tables 3-6 (and 14/15 rows) per dataset; the offline benchmark faces CUB's table.
SOTA_TABLE: dict[str, str] = {"cub": "Table 3", "cars": "Table 4", "sop": "Table 5", "inshop": "Table 6"}
SOTA_TABLE["synthetic"] = SOTA_TABLE["cub"]
REF_DATASET: dict[str, str] = {"synthetic": "cub", **{d: d for d in PAPER_DATASETS}}
ROW_NAME: dict[str, str] = {"cub": "CUB", "cars": "CARS", "sop": "SOP", "inshop": "InShop"}
# Side of the final feature map the global pooling reduces: SmallCNN on 56-pixel quick crops and 32-pixel smoke
# images (stride 8), ResNet-50 on 256 crops.
MAP_SIDE: dict[str, int] = {"smoke": 4, "quick": 7, "paper": 8}


def cell(label: str, row: str, column: str = "R@1", dataset: str = "cub") -> tuple[str, str, str, str]:
    """A printed cell of ``results/reference/pnpp.csv`` (CUB unless said: the offline benchmark faces CUB)."""
    return (label, row, column, dataset)


def pooling_line(profile: str) -> str:
    """GMP vs GAP over the profile's feature map, against the paper's."""
    side = MAP_SIDE[profile]
    return f"GAP vs GMP over the SmallCNN's {side} x {side} map (paper: ResNet-50's 8 x 8)"


def pnpp(dataset: str, profile: str, **options: Any) -> Any:
    """The ProxyNCA++ preset (every enhancement on unless an option switches it off)."""
    return kit.config("proxynca++", dataset, profile, **options)


def subset_options(enabled: Sequence[str]) -> dict[str, bool]:
    """ProxyNCA++ options with exactly the enhancements in ``enabled`` switched on."""
    unknown = set(enabled) - set(ENHANCEMENTS)
    if unknown:
        raise ValueError(f"unknown enhancements {sorted(unknown)}; valid: {ENHANCEMENTS}")
    return {e: e in enabled for e in ENHANCEMENTS}


def subset_name(enabled: Sequence[str]) -> str:
    """``prob+scale+cbs`` style (the reference table's ``config=`` note); ``baseline`` for none."""
    return "+".join(e for e in ENHANCEMENTS if e in enabled) or "baseline"


def dataset_parameters(paper: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """An artifact's ``parameters`` when the datasets are its only one: the offline benchmark on smoke and quick,
    ``paper`` on the paper profile."""
    return {
        "smoke": {"datasets": ["synthetic"]},
        "quick": {"datasets": ["synthetic"]},
        "paper": {"datasets": list(paper)},
    }


#: The flags a sweep tags its runs with (``param_<flag>``, True on the tagged runs; :func:`sweep_runs`), in words.
SWEEP_TAGS = {
    "preset": "the preset's value: the runs every table shares, where the claims compare",
    "below": "the preset's value one step of the paper's grid lower (the claim that going lower hurts)",
}


def sweep_runs(
    params: Params,
    build: Any,
    param: str,
    values: Sequence[float],
    preset: Any = None,
    descending: bool = False,
    below: float | None = None,
) -> list[Run]:
    """One run per (dataset, value, seed): ``build(dataset, profile, value)`` -> config, tagged ``param``.

    With ``preset`` the grid is ``values`` plus the preset's own value ``preset(dataset, profile)`` (the paper's
    on the paper profile, on quick the value ``dmllab tune`` chose on validation), and every run is also tagged
    ``preset`` (True on the preset's runs, the ones every other table shares): the sweep's claims compare at it
    (:func:`tagged_value`). With ``below`` the grid also holds the preset's value divided by ``below`` (tagged
    ``below``: one step of the paper's grid below the optimum). ``descending``: the grid from the largest value."""
    out = []
    for dataset in params["datasets"]:
        own = None if preset is None else float(preset(dataset, params.profile))
        step = None if own is None or below is None else own / below
        grid = {float(v) for v in values} | ({own} if own is not None else set())
        if step is not None and not any(math.isclose(step, v, rel_tol=1e-6) for v in grid):
            grid.add(step)
        for v in sorted(grid, reverse=descending):
            tags: dict[str, Any] = {param: v}
            if own is not None:
                tags["preset"] = v == own
            if step is not None:
                tags["below"] = math.isclose(v, step, rel_tol=1e-6)
            out += kit.seeds_runs(build(dataset, params.profile, v), params, f"{param} {v:.4g}", **tags)
    return out


def tagged_value(df: Any, param: str, tag: str = "preset") -> float:
    """The value of ``param`` on a sweep's rows tagged ``tag`` (:func:`sweep_runs`: the preset's, or the step
    below it). Raises ValueError when no row or several values are tagged (rows written before the tag existed)."""
    import pandas as pd

    flags = df.get(f"param_{tag}")
    sel = df[flags.astype(str).isin(["True", "true", "1", "1.0"])] if flags is not None else df.iloc[0:0]
    values = pd.to_numeric(sel.get(f"param_{param}"), errors="coerce").dropna().unique()
    if len(values) != 1:
        raise ValueError(
            f"the sweep's rows tag {len(values)} {tag} values of {param!r} (expected one): re-run its notebook"
        )
    return float(values[0])


def preset_vs(df: Any, metric: str, param: str, which: str | float) -> Any:
    """Per seed: ``metric`` at the preset's value of ``param`` minus at the ``"min"`` or ``"max"`` value swept,
    at the ``"below"`` step (:func:`sweep_runs`), or at a number given as ``which``
    (:func:`~dmllab.experiments.compare.diff_at`)."""
    import pandas as pd

    swept = pd.to_numeric(df.get(f"param_{param}"), errors="coerce")
    other = {"min": swept.min(), "max": swept.max()}.get(which, which) if which != "below" else None
    if which == "below":
        other = tagged_value(df, param, "below")
    return diff_at(df, metric, param, tagged_value(df, param), float(other))


def sweep_figure(param: str, xlabel: str, title: str, what: str, preset: bool = True) -> Figure:
    """R@1 against ``param`` (:func:`dmllab.experiments.figures.sweep_figure`), the preset's value dotted."""

    def draw(tables: Any) -> Any:
        mark = tagged_value(tables["rows"], param) if preset else None
        return figures.sweep_figure(tables, param, xlabel=xlabel, mark=mark, title=title)

    return Figure(draw, caption=f"R@1 against {what}, mean +- one std over seeds (shaded).")
