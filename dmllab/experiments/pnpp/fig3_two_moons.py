"""ProxyNCA++ Fig. 3: temperature scaling refines the decision boundary (two moons)."""

from __future__ import annotations

from typing import Any

from dmllab.experiments import analogue
from dmllab.experiments.arrays import arrays_to_frame, frame_to_arrays
from dmllab.experiments.artifact import Artifact, Claim, Figure
from dmllab.experiments.compare import extremes
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params

_SHARED = {"lr": 0.01}
_TOY = analogue.differs(
    "the panels' temperatures and the optimiser are not printed: the swept T, the steps and the lr are dmllab "
    "choices (the parameters)"
)


def rows(params: Params, lookup: Lookup) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One softmax classifier per temperature and seed; the first seed's boundary grids as the figure table."""
    from dmllab.toys import two_moons

    out: list[dict[str, Any]] = []
    plot = None
    for seed in params.seeds:
        r, d = two_moons.run_two_moons(
            seed=seed,
            temperatures=params["temperatures"],
            steps=params["steps"],
            lr=params["lr"],
            grid_resolution=params["grid_resolution"],
        )
        out += r
        if plot is None:
            plot = {
                **{k: d[k] for k in ("x", "y", "gx", "gy")},
                "prob": {f"{t!r}": p for t, p in d["prob"].items()},
            }
    return out, {"boundary": arrays_to_frame(plot or {})}


def _boundaries(tables: Any) -> Any:
    from dmllab.plots import toys as toy_plots

    data = frame_to_arrays(tables["boundary"])
    data["prob"] = {float(t): p for t, p in data["prob"].items()}
    return toy_plots.plot_two_moons(data, tables["rows"])


def _metrics(tables: Any) -> Any:
    from dmllab.plots import toys as toy_plots

    return toy_plots.plot_two_moons_metrics(tables["rows"])


ARTIFACT = Artifact(
    id="pnpp_fig3_two_moons",
    paper="pnpp",
    label="Fig. 3",
    title="Temperature scaling refines the decision boundary (two moons)",
    description=(
        "ProxyNCA++ Fig. 3 / appendix B: a softmax classifier 2 -> 100 -> ReLU -> 2 on "
        "`make_moons(600, noise=0.3, random_state=0)`, trained with the logits divided by a temperature T. "
        "The paper does not print the temperatures of its panels nor the optimiser: dmllab sweeps "
        "T = 1, 1/2, 1/4, ... with the same initialisation for every T (per seed) and full-batch Adam for a fixed "
        "number of steps. Per T: train accuracy, the training loss, and the boundary's complexity (length "
        "of the P = 0.5 contour, and the number of grid sign changes). The seed draws the initialisation."
    ),
    parameters={
        "smoke": {"temperatures": [1.0, 0.0625], "steps": 100, "grid_resolution": 40, **_SHARED},
        "quick": {
            "temperatures": [1.0, 0.5, 0.25, 0.125, 0.0625],
            "steps": 2000,
            "grid_resolution": 100,
            **_SHARED,
        },
        "paper": {
            "temperatures": [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125],
            "steps": 5000,
            "grid_resolution": 150,
            **_SHARED,
        },
    },
    parameter_help={
        "temperatures": "the swept T (logits / T)",
        "steps": "full-batch Adam steps per T",
        "lr": "Adam learning rate",
        "grid_resolution": "grid points per axis for the boundary",
    },
    rows=rows,
    tables=("boundary",),
    claims=(
        Claim(
            "lower temperature refines the boundary: a longer P=0.5 contour at the lowest T than at the highest",
            lambda df: extremes(df, "boundary_length", "temperature", low_minus_high=True),
            unit="contour length",
            differs=_TOY,
            primary=True,
            key="boundary",
        ),
        Claim(
            "lower temperature fits the training samples better: train accuracy at the lowest T above the highest's",
            lambda df: extremes(df, "train_accuracy", "temperature", low_minus_high=True),
            unit="% points",
            differs=_TOY,
            key="train_fit",
        ),
    ),
    figures=(
        Figure(_boundaries, caption="Decision boundaries per T (first seed)."),
        Figure(_metrics, suffix="_metrics", caption="Train accuracy and boundary complexity against 1/T."),
    ),
)
