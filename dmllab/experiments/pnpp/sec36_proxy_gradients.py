"""ProxyNCA++ Sec. 3.6: the proxies' gradient is orders of magnitude smaller than the embedding layer's."""

from __future__ import annotations

import math
from typing import Any

from dmllab.experiments import analogue
from dmllab.experiments.artifact import Artifact, Claim, Figure, Run
from dmllab.experiments.lookup import Lookup
from dmllab.experiments.params import Params


def rows(params: Params, lookup: Lookup) -> list[dict[str, Any]]:
    """Two short trainings (+fast, -fast) per seed with the gradient-norm hook (not stored: the hook must see
    every step), each seed placed as the study places its runs (``lookup.place`` on the draw the profile's
    default ``data_seed`` gives it: on smoke and quick seed k on draw k of the benchmark with that draw's
    pre-trained trunk; the artifact declares no stored runs, so it has no ``data_seed`` parameter of its own),
    each row with its run's id."""
    from dmllab.experiments.params import DEFAULT_DATA_SEED
    from dmllab.toys import proxy_gradients

    per_seed = DEFAULT_DATA_SEED[params.profile] == "per_seed" and params["dataset"] == "synthetic"

    def place(cfg: Any, seed: int) -> tuple[Any, str]:
        placed = lookup.place(Run(cfg, seed, draw=seed if per_seed else 0))
        return placed.config, placed.key

    out: list[dict[str, Any]] = []
    for seed in params.seeds:
        out += proxy_gradients.run_proxy_gradients(
            params.profile,
            seed=seed,
            every=params["every"],
            dataset=params["dataset"],
            device=params.device,
            epochs=params["epochs"],
            data_root=params.data_root,
            place=place,
        )
    return out


def _ratio_decades(df: Any) -> Any:
    """Per seed: log10(1e-2) - log10(median proxies/embedding gradient ratio without fast proxies)."""
    sel = df[(df["metric"] == "ratio_proxies_embedding") & (df["variant"] == "-fast")]
    return sel.groupby("seed")["value"].median().map(lambda r: math.log10(1e-2) - math.log10(r))


def _figure(tables: Any) -> Any:
    from dmllab.plots import toys as toy_plots

    return toy_plots.plot_proxy_gradient_ratio(tables["rows"])


ARTIFACT = Artifact(
    id="pnpp_sec36_proxy_gradients",
    paper="pnpp",
    label="Sec. 3.6",
    title="The proxies' gradient is orders of magnitude smaller than the embedding layer's",
    description=(
        'ProxyNCA++ section 3.6: "the gradient of proxies is smaller than the gradient of the embedding '
        "layer and backbone model by three orders of magnitude, and this is caused by the L2-Normalization "
        'of proxies", hence fast proxies (+fast, a larger proxy learning rate). dmllab trains the '
        "ProxyNCA++ preset of the profile with +fast and -fast and records, with a trainer hook after "
        "each backward pass (before clipping and the optimiser step), the gradient norms of the proxies, "
        "of the embedding layer (the head's Linear) and of the backbone, and the ratio per entry as well (each "
        "norm over the square root of the entries it sums over: the proxies are a C x D matrix). Seed k runs "
        "where the study runs its seed k (on quick: draw k of the benchmark with its own pre-trained trunk), "
        "each row with its run's id. The quick profile uses the offline "
        "synthetic benchmark (SmallCNN, 128-d) for a shortened run; the paper profile uses CUB with the "
        "paper's ResNet-50, 2048-d setting (needs `data_root`)."
    ),
    parameters={
        "smoke": {"dataset": "synthetic", "every": 1, "epochs": None},
        "quick": {"dataset": "synthetic", "every": 5, "epochs": 1},
        "paper": {"seeds": [0, 1, 2], "dataset": "cub", "every": 20, "epochs": 5},
    },
    parameter_help={
        "dataset": "preset dataset",
        "every": "record every N steps",
        "epochs": "training epochs (None: the preset's)",
    },
    rows=rows,
    claims=(
        Claim(
            "without fast proxies the proxies' gradient norm is orders of magnitude below the embedding "
            "layer's (median ratio < 1e-2; paper: about 1e-3)",
            _ratio_decades,
            unit="decades below 1e-2",
            differs=analogue.differs(
                lambda p: (
                    f"gradient norms over {ARTIFACT.parameters[p]['epochs'] or 'the preset'} epoch(s) of the "
                    "profile's ProxyNCA++ without fast proxies (with its LayerNorm head and embedding size)"
                ),
                "proxynca++",
            ),
            primary=True,
            key="grad_ratio",
        ),
    ),
    figures=(Figure(_figure, caption="The gradient-norm ratio and the proxies' norm over training."),),
)
