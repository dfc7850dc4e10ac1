"""Figures of the dataset-free artifacts (:mod:`dmllab.toys`).

Each function takes the artifact's tidy rows (a DataFrame read back from ``results/<name>.csv``) and, where
the figure shows a field over a grid, the small ``plot_data`` dictionary returned by the compute function,
and returns a matplotlib Figure (the notebook saves it with ``P.save_figure``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

_RED_BLUE = "RdBu"  # 0 -> red, 1 -> blue: P(blue) / P(class 1) background
_POINT_COLOURS = ("#d62728", "#1f77b4", "#7f7f7f")  # red, blue, gray
_GRAD_FLOOR = 1e-8  # lowest gradient shown on the log axis of the Heated-up Fig. 1 panels


def _metric_by(rows: pd.DataFrame, metric: str, by: str) -> pd.Series:
    """Mean ``value`` of ``metric`` per value of column ``by`` (over seeds), sorted by ``by``."""
    sel = rows[rows["metric"] == metric]
    return sel.groupby(by)["value"].mean().sort_index()


def _seeds_note(rows: pd.DataFrame | None) -> str:
    """The suffix ' (mean of N seeds)' when the rows hold several seeds (panels show the first seed)."""
    n = 0 if rows is None or "seed" not in rows else rows["seed"].nunique()
    return f" (mean of {n} seeds)" if n > 1 else ""


def _fmt_t(t: float) -> str:
    inv = 1.0 / t
    return "1" if abs(t - 1) < 1e-12 else (f"1/{inv:.0f}" if abs(inv - round(inv)) < 1e-9 else f"{t:g}")


# ------------------------------------------------------------------------------- ProxyNCA++ Fig. 3


def plot_two_moons(plot_data: Mapping[str, Any], rows: pd.DataFrame) -> Figure:
    """One panel per temperature: P(class 1) of the tempered softmax on a grid, the P = 0.5 contour, the data."""
    import matplotlib.pyplot as plt

    probs = plot_data["prob"]
    temps = sorted(probs, reverse=True)
    acc = _metric_by(rows, "train_accuracy", "param_temperature")
    length = _metric_by(rows, "boundary_length", "param_temperature")
    fig, axes = plt.subplots(1, len(temps), figsize=(3.2 * len(temps), 3.4), squeeze=False)
    x, y = plot_data["x"], plot_data["y"]
    for ax, t in zip(axes[0], temps):
        ax.contourf(
            plot_data["gx"],
            plot_data["gy"],
            probs[t],
            levels=np.linspace(0, 1, 11),
            cmap=_RED_BLUE,
            alpha=0.75,
        )
        ax.contour(plot_data["gx"], plot_data["gy"], probs[t], levels=[0.5], colors="k", linewidths=1.2)
        ax.scatter(
            x[:, 0], x[:, 1], c=[_POINT_COLOURS[int(k)] for k in y], s=7, edgecolors="white", linewidths=0.3
        )
        title = f"T = {_fmt_t(t)}"
        if t in acc.index:
            title += f"\nacc {acc[t]:.1f}%, contour {length[t]:.1f}"
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(
        "Two moons: softmax classifier (2-100-ReLU-2) trained with temperature T; panels: the first seed, "
        f"accuracy and P = 0.5 contour length{_seeds_note(rows) or ' of that seed'}",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def plot_two_moons_metrics(rows: pd.DataFrame) -> Figure:
    """Train accuracy and the P = 0.5 contour length against 1/T (log2 axis), mean over seeds."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, metric, label in zip(
        axes, ("train_accuracy", "boundary_length"), ("train accuracy (%)", "length of the P=0.5 contour")
    ):
        s = _metric_by(rows, metric, "param_temperature")
        ax.plot(1.0 / s.index.to_numpy(), s.to_numpy(), marker="o")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("1 / T")
        ax.set_ylabel(label)
    fig.suptitle("Lower temperature: a more refined decision boundary", fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------- Proxy Synthesis Fig. 2


def plot_ps_confidence(plot_data: Mapping[str, Any], rows: pd.DataFrame | None = None) -> Figure:
    """Panels (a)-(d) of PS Fig. 2: P(blue) in input space and in the 2-D embedding space, Norm-softmax vs PS."""
    import matplotlib.pyplot as plt

    methods = list(plot_data["methods"])
    labels = {"normsoftmax": "Norm-softmax", "ps+normsoftmax": "PS + Norm-softmax"}
    conf = _metric_by(rows, "mean_conf_unseen", "variant") if rows is not None else {}
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.8))
    x, y = plot_data["x"], plot_data["y"]
    colours = [_POINT_COLOURS[int(k)] for k in y]
    levels = np.linspace(0, 1, 21)
    for i, method in enumerate(methods):
        d = plot_data["methods"][method]
        ax = axes[i]
        ax.contourf(plot_data["gx"], plot_data["gy"], d["input_p_blue"], levels=levels, cmap=_RED_BLUE)
        ax.scatter(x[:, 0], x[:, 1], c=colours, s=6, edgecolors="white", linewidths=0.3)
        extra = f"\nconfidence on gray: {conf[method]:.3f}{_seeds_note(rows)}" if method in conf else ""
        ax.set_title(f"({'ab'[i]}) {labels.get(method, method)}, input space{extra}", fontsize=9)
        ax = axes[2 + i]
        ax.contourf(d["egx"], d["egy"], d["emb_p_blue"], levels=levels, cmap=_RED_BLUE)
        ax.scatter(d["emb"][:, 0], d["emb"][:, 1], c=colours, s=6, edgecolors="white", linewidths=0.3)
        ax.scatter(
            d["proxies"][:, 0], d["proxies"][:, 1], marker="D", s=60, c=_POINT_COLOURS[:2], edgecolors="k"
        )
        ax.set_aspect("equal")
        ax.set_title(f"({'cd'[i]}) {labels.get(method, method)}, embedding space", fontsize=9)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(
        "2-D isotropic Gaussians: red and blue trained, gray unseen; background = P(blue)", fontsize=10
    )
    fig.tight_layout()
    return fig


# -------------------------------------------------------------------------- Heated-up Softmax Fig. 1


def plot_heated_gradients(rows: pd.DataFrame, train_alpha: float | None = None) -> Figure:
    """Panels (a)-(c) of Heated-up Fig. 1: mean ||dl/df_hat|| vs alpha per group (autograd; Eq. 3 dashed).

    Log-log axes; values below 1e-8 (down to exact underflow to 0 at large alpha) are drawn at 1e-8.
    """
    import matplotlib.pyplot as plt

    groups = ("centroid", "boundary", "incorrect")
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, g, tag in zip(axes, groups, "abc"):
        sel = rows[rows["variant"] == g]
        for metric, style, label in (("grad_norm", "-o", "autograd"), ("grad_norm_analytic", "--", "Eq. 3")):
            s = _metric_by(sel, metric, "param_alpha")
            # Gradients that underflow to 0 are drawn at the floor of the log axis.
            ax.plot(s.index.to_numpy(), np.maximum(s.to_numpy(), _GRAD_FLOOR), style, ms=3, label=label)
        if train_alpha is not None:
            ax.axvline(train_alpha, color="red", ls=":", lw=1, label=f"trained at alpha={train_alpha:g}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(bottom=_GRAD_FLOOR / 3)
        ax.set_xlabel("alpha")
        ax.set_ylabel("mean ||dl / d f_hat||")
        size = rows[(rows["variant"] == g) & (rows["metric"] == "group_size")]["value"]
        n = f" (n={size.mean():.0f})" if len(size) else ""
        ax.set_title(f"({tag}) {'correct-' if g != 'incorrect' else ''}{g}{n}", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(
        "Gradient magnitude w.r.t. the normalised embedding vs alpha (digits, LN model)", fontsize=10
    )
    fig.tight_layout()
    return fig


# -------------------------------------------------------------------------- Heated-up Softmax Fig. 2


def plot_heated_embeddings(plot_data: Mapping[str, Any], rows: pd.DataFrame | None = None) -> Figure:
    """Heated-up Fig. 2 analogue: (a) SM embedding, (b) SM embedding L2-normalised, (c) LN alpha=4 (normalised).

    Diamonds: the classifier weights (scaled towards the origin, as in the paper, for visibility).
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    colours = sns.color_palette("tab10", 10)
    panels = [("SM", False, "(a) SM (unnormalised, alpha=1)"), ("SM", True, "(b) SM, L2-normalised")]
    other = [v for v in plot_data if v != "SM"]
    panels += [(v, True, f"(c) {v} (normalised features and weights)") for v in other]
    ratio = _metric_by(rows, "intra_inter_ratio", "variant") if rows is not None else {}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2))
    for ax, (variant, normalise, title) in zip(axes, panels):
        d = plot_data[variant]
        emb, lab, w = d["emb"], d["labels"], d["weights"]
        if normalise:
            emb = emb / np.linalg.norm(emb, axis=1, keepdims=True)
            # Points jittered radially so that the density along the circle stays visible.
            emb = emb * (1 + 0.04 * np.random.default_rng(0).standard_normal((len(emb), 1)))
        ax.scatter(emb[:, 0], emb[:, 1], c=[colours[int(k) % 10] for k in lab], s=5, alpha=0.7)
        reach = np.abs(emb).max()
        wd = w / np.linalg.norm(w, axis=1, keepdims=True) * reach * 0.8
        ax.scatter(
            wd[:, 0], wd[:, 1], c=[colours[k % 10] for k in range(len(w))], marker="D", s=60, edgecolors="k"
        )
        if variant in ratio:
            title += f"\nintra/inter angle ratio {ratio[variant]:.3f}{_seeds_note(rows)}"
        ax.set_title(title, fontsize=9)
        ax.set_aspect("equal")
    fig.suptitle(
        "2-D bottleneck embeddings of the test digits (8x8 sklearn digits stand in for MNIST)", fontsize=10
    )
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------- ProxyNCA++ section 3.6


def plot_proxy_gradient_ratio(rows: pd.DataFrame) -> Figure:
    """||grad proxies|| / ||grad embedding layer|| against the training step (log scale), +fast and -fast."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    panels = (
        ("ratio_proxies_embedding", "||grad proxies|| / ||grad embedding layer||"),
        ("mean_proxy_norm", "mean proxy norm ||p||"),
    )
    for ax, (metric, ylabel) in zip(axes, panels):
        for variant, part in rows[rows["metric"] == metric].groupby("variant"):
            s = part.groupby("param_global_step")["value"].mean().sort_index()
            ax.plot(s.index.to_numpy(), s.to_numpy(), label=variant)
        if metric == "ratio_proxies_embedding":
            ax.axhline(1e-3, color="gray", ls=":", lw=1, label="paper: ~1e-3")
        ax.set_yscale("log")
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    fig.suptitle("ProxyNCA++ Sec. 3.6: the proxies' gradient vs the embedding layer's", fontsize=10)
    fig.tight_layout()
    return fig
