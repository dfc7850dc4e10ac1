"""The five dataset-free artifacts of issue 5: parameters per profile, notebook cells and the paper's claims.

Importing this module registers the artifacts in :data:`dmllab.pipeline.artifacts.ARTIFACTS`; each notebook
(``notebooks/<name>.ipynb``) is generated from its artifact by :func:`dmllab.pipeline.notebook.write_notebook`.
Claims are direction checks on the tidy rows of one profile (``None`` when the rows cannot decide).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dmllab.pipeline.artifacts import Artifact, Claim, register

if TYPE_CHECKING:
    import pandas as pd


def run_seeds(
    fn: Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]], seeds: Sequence[int], **kwargs: Any
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Call ``fn(seed=s, **kwargs)`` for every seed; return all rows and the first seed's plot data."""
    rows: list[dict[str, Any]] = []
    plot: dict[str, Any] | None = None
    for seed in seeds:
        r, d = fn(seed=seed, **kwargs)
        rows += r
        plot = d if plot is None else plot
    return rows, plot or {}


# ----------------------------------------------------------------------------------------- claim helpers


def _series(df: pd.DataFrame, metric: str, by: str, variant: str | None = None) -> pd.Series:
    """Mean value of ``metric`` per ``by`` (over seeds), sorted by ``by``; restricted to ``variant`` if given."""
    sel = df[df["metric"] == metric]
    if variant is not None:
        sel = sel[sel["variant"] == variant]
    return sel.groupby(by)["value"].mean().sort_index()


def _variant_mean(df: pd.DataFrame, metric: str, variant: str) -> float | None:
    sel = df[(df["metric"] == metric) & (df["variant"] == variant)]["value"]
    return float(sel.mean()) if len(sel) else None


def _compare(a: float | None, b: float | None) -> bool | None:
    """``a < b``, or None when either is missing."""
    return None if a is None or b is None else bool(a < b)


# ----------------------------------------------------------------------------- 1. ProxyNCA++ Fig. 3


def _lowest_t_exceeds(metric: str) -> Callable[[pd.DataFrame], bool | None]:
    def check(df: pd.DataFrame) -> bool | None:
        s = _series(df, metric, "param_temperature")
        return None if len(s) < 2 else bool(s.iloc[0] > s.iloc[-1])  # index sorted: lowest T first

    return check


TWO_MOONS = register(
    Artifact(
        name="pnpp_fig3_two_moons",
        paper="pnpp",
        artifact="Fig. 3",
        title="Temperature scaling refines the decision boundary (two moons)",
        description=(
            "ProxyNCA++ Fig. 3 / appendix B: a softmax classifier 2 -> 100 -> ReLU -> 2 on "
            "`make_moons(600, noise=0.3, random_state=0)`, trained with the logits divided by a temperature T. "
            "The paper does not print the temperatures of its panels nor the optimiser: dmllab sweeps "
            "T = 1, 1/2, 1/4, ... with the same initialisation for every T and full-batch Adam for a fixed "
            "number of steps. Per T: train accuracy, the training loss, and the boundary's complexity (length "
            "of the P = 0.5 contour, and the number of grid sign changes)."
        ),
        parameters={
            "smoke": {
                "seeds": [0],
                "temperatures": [1.0, 0.0625],
                "steps": 100,
                "lr": 0.01,
                "grid_resolution": 40,
            },
            "quick": {
                "seeds": [0],
                "temperatures": [1.0, 0.5, 0.25, 0.125, 0.0625],
                "steps": 2000,
                "lr": 0.01,
                "grid_resolution": 200,
            },
            "paper": {
                "seeds": [0],
                "temperatures": [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125],
                "steps": 5000,
                "lr": 0.01,
                "grid_resolution": 300,
            },
        },
        parameter_help={
            "temperatures": "the swept T (logits / T)",
            "steps": "full-batch Adam steps per T",
            "lr": "Adam learning rate",
            "grid_resolution": "grid points per axis for the boundary",
        },
        claims=(
            Claim(
                "lower temperature refines the boundary (longer P=0.5 contour at the lowest T than at the highest)",
                _lowest_t_exceeds("boundary_length"),
            ),
            Claim(
                "lower temperature classifies the training samples better (train accuracy at the lowest T > at "
                "the highest)",
                _lowest_t_exceeds("train_accuracy"),
            ),
        ),
        cells=(
            ("markdown", "## Compute\nOne classifier per temperature (same data, same initialisation)."),
            (
                "code",
                "from dmllab.plots import toys as toy_plots\n"
                "from dmllab.toys import two_moons\n"
                "from dmllab.toys.artifacts import run_seeds\n\n"
                "rows, plot_data = run_seeds(\n"
                "    two_moons.run_two_moons, P.seeds, temperatures=P['temperatures'], steps=P['steps'], lr=P['lr'],\n"
                "    grid_resolution=P['grid_resolution'],\n"
                ")",
            ),
            ("markdown", "## Write results\nTidy rows to `results/pnpp_fig3_two_moons.csv`."),
            (
                "code",
                "P.write_results(rows)\nresults = P.read_results()\n"
                "results.pivot_table(index='param_temperature', columns='metric', values='value')",
            ),
            ("markdown", "## Figures\nDecision boundaries per T (first seed), and the metrics against 1/T."),
            ("code", "fig = toy_plots.plot_two_moons(plot_data, results)\nP.save_figure(fig)"),
            ("code", "fig = toy_plots.plot_two_moons_metrics(results)\nP.save_figure(fig, '_metrics')"),
        ),
    )
)


# --------------------------------------------------------------------------- 2. Proxy Synthesis Fig. 2


def _ps_lower(metric: str) -> Callable[[pd.DataFrame], bool | None]:
    def check(df: pd.DataFrame) -> bool | None:
        return _compare(_variant_mean(df, metric, "ps+normsoftmax"), _variant_mean(df, metric, "normsoftmax"))

    return check


def _ps_higher(metric: str) -> Callable[[pd.DataFrame], bool | None]:
    def check(df: pd.DataFrame) -> bool | None:
        return _compare(_variant_mean(df, metric, "normsoftmax"), _variant_mean(df, metric, "ps+normsoftmax"))

    return check


_PS_COMMON = {
    "separation": 3.0,
    "std": 0.6,
    "hidden": 64,
    "lr": 0.01,
    "scale": 23.0,
    "ps_alpha": 0.4,
    "ps_mu": 1.0,
}

PS_GAUSSIAN = register(
    Artifact(
        name="ps_fig2_gaussian",
        paper="proxy_synthesis",
        artifact="Fig. 2",
        title="Proxy Synthesis smooths the decision boundary (2-D Gaussians, unseen gray class)",
        description=(
            "Proxy Synthesis Fig. 2: three isotropic 2-D Gaussians (red, blue, gray); a feed-forward network "
            "2 -> 64 -> 64 -> 2 with a 2-D embedding is trained on red and blue only, with Norm-softmax "
            "(scale 23, the PS paper's value) or PS + Norm-softmax (alpha 0.4, mu 1). Background: P(blue) of "
            "the classifier over the input plane (a, b) and over the embedding plane (c, d). The paper gives "
            "no sizes, centres or optimiser; dmllab's choices are the parameters below (gray sits at the apex "
            "of an equilateral triangle over red and blue). Numbers: mean confidence (max probability) on the "
            "unseen gray samples, train accuracy, and the share of the input grid / of the embedding "
            "directions with confidence < 0.9 (width of the transition region)."
        ),
        parameters={
            "smoke": {"seeds": [0], "n_per_class": 50, "steps": 30, "grid_resolution": 40, **_PS_COMMON},
            "quick": {
                "seeds": [0, 1, 2],
                "n_per_class": 200,
                "steps": 500,
                "grid_resolution": 150,
                **_PS_COMMON,
            },
            "paper": {
                "seeds": [0, 1, 2, 3, 4],
                "n_per_class": 200,
                "steps": 2000,
                "grid_resolution": 200,
                **_PS_COMMON,
            },
        },
        parameter_help={
            "n_per_class": "samples per Gaussian",
            "steps": "full-batch Adam steps",
            "grid_resolution": "grid points per axis",
            "separation": "distance between the class centres",
            "std": "isotropic standard deviation",
            "hidden": "MLP width",
            "lr": "Adam learning rate",
            "scale": "Norm-softmax scale 1/T",
            "ps_alpha": "Beta(alpha, alpha) of Proxy Synthesis",
            "ps_mu": "synthetics per sample",
        },
        claims=(
            Claim(
                "PS + Norm-softmax is less confident on the unseen gray class", _ps_lower("mean_conf_unseen")
            ),
            Claim(
                "PS + Norm-softmax has a smoother decision boundary in input space (wider low-confidence region)",
                _ps_higher("input_transition_fraction"),
            ),
            Claim(
                "PS + Norm-softmax has a smoother decision boundary in embedding space",
                _ps_higher("embedding_transition_fraction"),
            ),
        ),
        cells=(
            (
                "markdown",
                "## Compute\nNorm-softmax and PS + Norm-softmax on the same data and initialisation.",
            ),
            (
                "code",
                "from dmllab.plots import toys as toy_plots\n"
                "from dmllab.toys import ps_gaussian\n"
                "from dmllab.toys.artifacts import run_seeds\n\n"
                "keys = ('n_per_class', 'separation', 'std', 'hidden', 'steps', 'lr', 'scale', 'ps_alpha', "
                "'ps_mu',\n        'grid_resolution')\n"
                "rows, plot_data = run_seeds(ps_gaussian.run_ps_gaussian, P.seeds, **{k: P[k] for k in keys})",
            ),
            ("markdown", "## Write results\nTidy rows to `results/ps_fig2_gaussian.csv`."),
            (
                "code",
                "P.write_results(rows)\nresults = P.read_results()\n"
                "results.pivot_table(index='variant', columns='metric', values='value')",
            ),
            ("markdown", "## Figure\nPanels (a)-(d) as in the paper (first seed)."),
            ("code", "fig = toy_plots.plot_ps_confidence(plot_data, results)\nP.save_figure(fig)"),
        ),
    )
)


# ------------------------------------------------------------------------ 3. Heated-up Softmax Fig. 1


def _at_extreme(df: pd.DataFrame, group: str, low: bool) -> tuple[float, float] | None:
    """(gradient at the smallest/largest alpha, maximum over the grid) of ``group``."""
    s = _series(df, "grad_norm", "param_alpha", group)
    if len(s) < 3:
        return None
    return float(s.iloc[0] if low else s.iloc[-1]), float(s.max())


def _property1(df: pd.DataFrame) -> bool | None:
    vals = [_at_extreme(df, g, low=True) for g in ("centroid", "boundary", "incorrect")]
    vals = [v for v in vals if v is not None]
    return None if not vals else all(v < 0.05 * m for v, m in vals)


def _property2_correct(df: pd.DataFrame) -> bool | None:
    vals = [_at_extreme(df, g, low=False) for g in ("centroid", "boundary")]
    vals = [v for v in vals if v is not None]
    return None if not vals else all(v < 0.01 * m for v, m in vals)


def _property2_incorrect(df: pd.DataFrame) -> bool | None:
    s = _series(df, "grad_norm", "param_alpha", "incorrect")
    if len(s) < 3:
        return None
    return bool(s.iloc[-1] == s.max() and s.iloc[-1] > s.iloc[-2])


def _boundary_peaks_later(df: pd.DataFrame) -> bool | None:
    c, b = (_series(df, "grad_norm", "param_alpha", g) for g in ("centroid", "boundary"))
    if len(c) < 3 or len(b) < 3:
        return None
    return bool(c.idxmax() < b.idxmax())


def alpha_grid(alpha_min: float, alpha_max: float, num_alphas: int) -> list[float]:
    """``num_alphas`` log-spaced alphas from ``alpha_min`` to ``alpha_max``."""
    import numpy as np

    return [float(a) for a in np.logspace(np.log10(alpha_min), np.log10(alpha_max), num_alphas)]


_H1_COMMON = {"alpha_min": 0.01, "alpha_max": 1000.0, "train_alpha": 16.0, "embedding_dim": 16, "hidden": [128, 128],
              "lr": 0.001, "group_quantile": 0.1, "split": "test"}  # fmt: skip

HEATED_FIG1 = register(
    Artifact(
        name="heated_fig1_gradients",
        paper="heated_softmax",
        artifact="Fig. 1",
        title="Gradient magnitude w.r.t. the normalised embedding as a function of alpha",
        description=(
            "Heated-up Softmax Fig. 1 (a-c), measured on a trained model: an MLP 64 -> 128 -> 128 -> 16 with "
            "L2-normalised features and a classifier with normalised weights (HeatedSoftmaxLoss, no bias) is "
            "trained on the bundled digits at alpha = 16 (the paper: Cars196). Then, for every alpha of a log "
            "grid, the per-sample gradient ||dl/df_hat|| is computed by autograd and by Eq. 3 with normalised "
            "features and weights, alpha * ||sum_m (p(m|x, alpha) - q(m|x)) w_hat_m||, and averaged per group: "
            "*incorrect* samples (some z_m >= z_y), and among the correct ones the *boundary* samples (lowest "
            "10% cosine margin z_y - max_{m != y} z_m) and the *centroid* samples (highest 10%), on the test "
            "split (the fitted training set has no incorrect samples).\n\n"
            "The paper's properties (section 3.2): **Property 1**: as alpha -> 0 the gradients w.r.t. the "
            "feature and the weights of every sample vanish (Eq. 6). **Property 2**: as alpha -> infinity the "
            "gradient w.r.t. the feature of a correct sample vanishes (Eq. 7) and that of an incorrect sample "
            "grows without bound (Eq. 8). **Property 3**: as alpha -> infinity the gradient w.r.t. the weights "
            "vanishes for correct samples and, for incorrect ones, grows without bound for the arg-max and the "
            "true class's weights and vanishes for the others (Eq. 9-10). This figure measures properties 1-2 "
            "(the feature gradient), as Fig. 1 does."
        ),
        parameters={
            "smoke": {"seeds": [0], "num_alphas": 9, "steps": 30, **_H1_COMMON},
            "quick": {"seeds": [0], "num_alphas": 41, "steps": 300, **_H1_COMMON},
            "paper": {"seeds": [0, 1, 2], "num_alphas": 61, "steps": 1000, **_H1_COMMON},
        },
        parameter_help={
            "num_alphas": "points of the log alpha grid",
            "steps": "full-batch Adam steps of training",
            "alpha_min": "smallest alpha",
            "alpha_max": "largest alpha",
            "train_alpha": "alpha used in training",
            "embedding_dim": "embedding size",
            "hidden": "MLP widths",
            "lr": "Adam learning rate",
            "group_quantile": "share of the correct samples called boundary / centroid",
            "split": "train | test samples to measure",
        },
        claims=(
            Claim(
                "Property 1: as alpha -> 0 the gradient of every group vanishes (< 5% of its peak)",
                _property1,
            ),
            Claim(
                "Property 2: at large alpha the gradient of correct (centroid and boundary) samples vanishes "
                "(< 1% of its peak)",
                _property2_correct,
            ),
            Claim(
                "Property 2: at large alpha the gradient of incorrect samples keeps growing",
                _property2_incorrect,
            ),
            Claim(
                "Fig. 1: centroid samples' gradient peaks at a smaller alpha than boundary samples'",
                _boundary_peaks_later,
            ),
        ),
        cells=(
            ("markdown", "## Compute\nTrain the normalised classifier, then sweep alpha on its features."),
            (
                "code",
                "from dmllab.plots import toys as toy_plots\n"
                "from dmllab.toys import heated\n"
                "from dmllab.toys.artifacts import alpha_grid, run_seeds\n\n"
                "alphas = alpha_grid(P['alpha_min'], P['alpha_max'], P['num_alphas'])\n"
                "keys = ('train_alpha', 'embedding_dim', 'hidden', 'steps', 'lr', 'group_quantile', 'split')\n"
                "rows, _ = run_seeds(heated.run_heated_gradients, P.seeds, alphas=alphas, **{k: P[k] for k in keys})",
            ),
            ("markdown", "## Write results\nTidy rows to `results/heated_fig1_gradients.csv`."),
            (
                "code",
                "P.write_results(rows)\nresults = P.read_results()\n"
                "results[results['metric'] != 'grad_norm_analytic'].pivot_table(\n"
                "    index='param_alpha', columns=['metric', 'variant'], values='value'\n).round(4)",
            ),
            ("markdown", "## Figure\nPanels (a)-(c): centroid, boundary and incorrect samples."),
            ("code", "fig = toy_plots.plot_heated_gradients(results, P['train_alpha'])\nP.save_figure(fig)"),
        ),
    )
)


# ------------------------------------------------------------------------ 4. Heated-up Softmax Fig. 2


def _ln_lower(metric: str) -> Callable[[pd.DataFrame], bool | None]:
    def check(df: pd.DataFrame) -> bool | None:
        return _compare(_variant_mean(df, metric, "LN alpha=4"), _variant_mean(df, metric, "SM"))

    return check


def _ln_higher(metric: str) -> Callable[[pd.DataFrame], bool | None]:
    def check(df: pd.DataFrame) -> bool | None:
        return _compare(_variant_mean(df, metric, "SM"), _variant_mean(df, metric, "LN alpha=4"))

    return check


_H2_COMMON = {"alpha": 4.0, "hidden": [256, 128], "lr": 0.001}

HEATED_FIG2 = register(
    Artifact(
        name="heated_fig2_digits",
        paper="heated_softmax",
        artifact="Fig. 2",
        title="2-D bottleneck embeddings: off-the-shelf softmax vs normalised features with alpha = 4",
        description=(
            "Heated-up Softmax Fig. 2 analogue: the paper trains LeNet on MNIST with a 2-D bottleneck; here the "
            "bundled 8x8 digits stand in for MNIST, with an MLP 64 -> 256 -> 128 -> 2. (a) SM: unnormalised "
            "features and weights, alpha = 1 (SoftmaxLoss); (b) the same embedding L2-normalised; (c) L2-"
            "normalised features and weights with alpha = 4 (HeatedSoftmaxLoss). Diamonds: classifier weights. "
            "Numbers on the test digits: classifier accuracy, R@1 on the L2-normalised embeddings (as the paper "
            "evaluates), the intra-class angle (to the class mean direction), the mean angle between class "
            "mean directions, their ratio, and the coefficient of variation of the raw feature norms."
        ),
        parameters={
            "smoke": {"seeds": [0], "steps": 20, **_H2_COMMON},
            "quick": {"seeds": [0, 1, 2], "steps": 500, **_H2_COMMON},
            "paper": {"seeds": [0, 1, 2], "steps": 2000, **_H2_COMMON},
        },
        parameter_help={
            "steps": "full-batch Adam steps",
            "alpha": "alpha of the normalised model",
            "hidden": "MLP widths",
            "lr": "Adam learning rate",
        },
        claims=(
            Claim(
                "Fig. 2: normalised training with alpha = 4 gives more compact classes than SM, even with SM's "
                "features L2-normalised (lower intra/inter class angle ratio)",
                _ln_lower("intra_inter_ratio"),
            ),
            Claim("Tables 1-2: the normalised model retrieves better than SM (R@1)", _ln_higher("R@1")),
            Claim(
                "Sec. 3.3: trained with normalisation, the features' norms before normalisation are similar "
                "(lower norm coefficient of variation than SM)",
                _ln_lower("norm_cv"),
            ),
        ),
        cells=(
            ("markdown", "## Compute\nSM and LN (alpha = 4) with a 2-D bottleneck on the digits."),
            (
                "code",
                "from dmllab.plots import toys as toy_plots\n"
                "from dmllab.toys import heated\n"
                "from dmllab.toys.artifacts import run_seeds\n\n"
                "rows, plot_data = run_seeds(\n"
                "    heated.run_heated_embeddings, P.seeds, alpha=P['alpha'], hidden=P['hidden'], steps=P['steps'],\n"
                "    lr=P['lr'],\n"
                ")",
            ),
            ("markdown", "## Write results\nTidy rows to `results/heated_fig2_digits.csv`."),
            (
                "code",
                "P.write_results(rows)\nresults = P.read_results()\n"
                "results.pivot_table(index='variant', columns='metric', values='value')",
            ),
            ("markdown", "## Figure\n(a) SM, (b) SM normalised, (c) LN alpha = 4 (first seed)."),
            ("code", "fig = toy_plots.plot_heated_embeddings(plot_data, results)\nP.save_figure(fig)"),
        ),
    )
)


# ------------------------------------------------------------------------- 5. ProxyNCA++ section 3.6


def _ratio_small(df: pd.DataFrame) -> bool | None:
    sel = df[(df["metric"] == "ratio_proxies_embedding") & (df["variant"] == "-fast")]["value"]
    return None if not len(sel) else bool(sel.median() < 1e-2)


PROXY_GRADIENTS = register(
    Artifact(
        name="pnpp_sec36_proxy_gradients",
        paper="pnpp",
        artifact="Sec. 3.6",
        title="The proxies' gradient is orders of magnitude smaller than the embedding layer's",
        description=(
            'ProxyNCA++ section 3.6: "the gradient of proxies is smaller than the gradient of the embedding '
            "layer and backbone model by three orders of magnitude, and this is caused by the L2-Normalization "
            'of proxies", hence fast proxies (+fast, a larger proxy learning rate). dmllab trains the '
            "ProxyNCA++ preset of `dmllab.training` with +fast and -fast and records, with a trainer hook after "
            "each backward pass (before clipping and the optimiser step), the gradient norms of the proxies, "
            "of the embedding layer (the head's Linear) and of the backbone. The quick profile uses the offline "
            "synthetic benchmark (SmallCNN, 128-d) for a shortened run; the paper profile uses CUB with the "
            "paper's ResNet-50, 2048-d setting (needs `data_root`)."
        ),
        parameters={
            "smoke": {
                "seeds": [0],
                "training_profile": "smoke",
                "dataset": "synthetic",
                "every": 1,
                "epochs": None,
            },
            "quick": {
                "seeds": [0],
                "training_profile": "quick",
                "dataset": "synthetic",
                "every": 5,
                "epochs": 1,
            },
            "paper": {"seeds": [0], "training_profile": "paper", "dataset": "cub", "every": 20, "epochs": 5},
        },
        parameter_help={
            "training_profile": "preset profile of dmllab.training",
            "dataset": "preset dataset",
            "every": "record every N steps",
            "epochs": "training epochs (None: the preset's)",
        },
        claims=(
            Claim(
                "without fast proxies the proxies' gradient norm is orders of magnitude below the embedding "
                "layer's (median ratio < 1e-2; paper: about 1e-3)",
                _ratio_small,
            ),
        ),
        cells=(
            ("markdown", "## Compute\nTwo training runs (+fast, -fast) with the gradient-norm hook."),
            (
                "code",
                "from dmllab.plots import toys as toy_plots\n"
                "from dmllab.toys import proxy_gradients\n\n"
                "rows = []\n"
                "for seed in P.seeds:\n"
                "    rows += proxy_gradients.run_proxy_gradients(\n"
                "        P['training_profile'], seed=seed, every=P['every'], dataset=P['dataset'], device=P.device,\n"
                "        epochs=P['epochs'], data_root=P.data_root,\n"
                "    )",
            ),
            ("markdown", "## Write results\nTidy rows to `results/pnpp_sec36_proxy_gradients.csv`."),
            (
                "code",
                "P.write_results(rows)\nresults = P.read_results()\n"
                "results.groupby(['variant', 'metric'])['value'].describe()[['count', 'min', '50%', 'max']]",
            ),
            ("markdown", "## Figure\nThe gradient-norm ratio and the proxies' norm over training."),
            ("code", "fig = toy_plots.plot_proxy_gradient_ratio(results)\nP.save_figure(fig)"),
        ),
    )
)

ALL = (TWO_MOONS, PS_GAUSSIAN, HEATED_FIG1, HEATED_FIG2, PROXY_GRADIENTS)
