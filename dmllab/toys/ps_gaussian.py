"""Proxy Synthesis Fig. 2: decision confidence of Norm-softmax vs PS + Norm-softmax on a 2-D Gaussian toy.

Paper (section "Obtaining a Smooth Decision Boundary", Fig. 2): a 2-D isotropic Gaussian dataset with red, blue
and gray classes; a simple feed-forward network with a two-dimensional embedding is trained on red and blue
while gray stays unseen; Norm-softmax gives a strict decision boundary, PS + Norm-softmax a smooth one that
"transitions linearly from the red to the blue class", i.e. lower confidence for inputs between the classes.

The paper gives no centres, spreads, network sizes or optimiser; dmllab's choices (documented parameters):
class centres on an equilateral triangle (red and blue at (-d/2, 0) and (d/2, 0), gray at (0, d*sqrt(3)/2)),
isotropic std, an MLP 2 -> hidden -> ReLU -> hidden -> ReLU -> 2, NormSoftmaxLoss with the PS paper's
Norm-softmax scale 23 (T = 1/23), ProxySynthesis alpha = 0.4, mu = 1 (the released defaults), full-batch Adam.
Confidence = max softmax probability of the classifier over the two trained classes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from dmllab.losses import NormSoftmaxLoss, ProxySynthesis
from dmllab.results import tidy
from dmllab.toys.fit import accuracy, fit_full_batch, mlp

DATASET = "gaussian2d"
METHODS = ("normsoftmax", "ps+normsoftmax")


def gaussian_centres(separation: float) -> np.ndarray:
    """Centres of red, blue, gray: an equilateral triangle of side ``separation``, shape (3, 2)."""
    h = separation * math.sqrt(3.0) / 2.0
    return np.array([[-separation / 2.0, 0.0], [separation / 2.0, 0.0], [0.0, h]], dtype=np.float32)


def make_gaussian_toy(
    n_per_class: int, *, separation: float = 3.0, std: float = 0.6, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Samples of the three isotropic Gaussians: X (3n, 2) float32 and labels 0 (red), 1 (blue), 2 (gray)."""
    rng = np.random.default_rng(seed)
    centres = gaussian_centres(separation)
    x = np.concatenate([c + std * rng.standard_normal((n_per_class, 2)) for c in centres]).astype(np.float32)
    y = np.repeat(np.arange(3), n_per_class).astype(np.int64)
    return x, y


def build_loss(method: str, *, scale: float, alpha: float, mu: float, seed: int) -> nn.Module:
    """Norm-softmax over the 2 trained classes (T = 1/scale), optionally wrapped in Proxy Synthesis (Eq. 4-5)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHODS)}")
    torch.manual_seed(seed)
    base = NormSoftmaxLoss(2, 2, temperature=1.0 / scale)
    if method == "normsoftmax":
        return base
    return ProxySynthesis(base, alpha=alpha, mu=mu, generator=torch.Generator().manual_seed(seed))


def confidence(loss: nn.Module, embeddings: torch.Tensor) -> torch.Tensor:
    """Softmax probabilities over the trained classes of the loss's classifier, (N, 2)."""
    with torch.no_grad():
        return torch.softmax(loss.logits(embeddings), dim=1)


def transition_fraction(max_prob: np.ndarray, threshold: float = 0.9) -> float:
    """Fraction of points whose confidence (max probability) is below ``threshold`` (width of the transition)."""
    return float((np.asarray(max_prob) < threshold).mean())


def _grid(lo: np.ndarray, hi: np.ndarray, resolution: int) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    gx, gy = np.linspace(lo[0], hi[0], resolution), np.linspace(lo[1], hi[1], resolution)
    xx, yy = np.meshgrid(gx, gy)
    pts = torch.from_numpy(np.stack([xx.ravel(), yy.ravel()], axis=1).astype(np.float32))
    return gx, gy, pts


def run_ps_gaussian(
    *,
    seed: int = 0,
    n_per_class: int = 200,
    separation: float = 3.0,
    std: float = 0.6,
    hidden: int = 64,
    steps: int = 1000,
    lr: float = 1e-2,
    scale: float = 23.0,
    ps_alpha: float = 0.4,
    ps_mu: float = 1.0,
    grid_resolution: int = 150,
    threshold: float = 0.9,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train Norm-softmax and PS + Norm-softmax on red/blue (same data and init) and measure confidence.

    Returns:
        ``(rows, plot_data)``. Rows per method: ``train_accuracy`` (percent), ``mean_conf_train``,
        ``mean_conf_unseen`` (gray samples), ``input_transition_fraction`` (share of the input grid with
        confidence < ``threshold``), ``embedding_transition_fraction`` (share of embedding directions with
        confidence < ``threshold``). ``plot_data``: points ``x``, ``y``, and per method the input-grid and
        embedding-grid P(blue), the embedded points and the normalised proxies.
    """
    x_np, y_np = make_gaussian_toy(n_per_class, separation=separation, std=std, seed=seed)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    seen = y < 2
    x_tr, y_tr = x[seen], y[seen]
    lo, hi = x_np.min(axis=0) - 1.0, x_np.max(axis=0) + 1.0
    gx, gy, pts = _grid(lo, hi, grid_resolution)
    rows: list[dict[str, Any]] = []
    plot: dict[str, Any] = {"x": x_np, "y": y_np, "gx": gx, "gy": gy, "methods": {}}
    params = {
        "param_steps": steps,
        "param_lr": lr,
        "param_scale": scale,
        "param_ps_alpha": ps_alpha,
        "param_ps_mu": ps_mu,
        "param_std": std,
        "param_separation": separation,
        "param_hidden": hidden,
        "param_threshold": threshold,
    }
    for method in METHODS:
        torch.manual_seed(seed)
        net = mlp(2, [hidden, hidden], 2)
        loss = build_loss(method, scale=scale, alpha=ps_alpha, mu=ps_mu, seed=seed)

        def objective(net: nn.Module = net, loss: nn.Module = loss) -> torch.Tensor:
            return loss(net(x_tr), y_tr)

        fit_full_batch(list(net.parameters()) + list(loss.parameters()), objective, steps=steps, lr=lr)
        with torch.no_grad():
            emb = net(x)  # (N, 2)
            grid_emb = net(pts)
        prob = confidence(loss, emb)
        grid_prob = confidence(loss, grid_emb)
        # Embedding space: the classifier's confidence over a grid of embedding positions around the points.
        radius = float(emb.norm(dim=1).max()) * 1.15
        egx, egy, epts = _grid(np.array([-radius, -radius]), np.array([radius, radius]), grid_resolution)
        egrid_prob = confidence(loss, epts)
        angles = torch.linspace(0, 2 * math.pi, 3600 + 1)[:-1]
        circle_prob = confidence(loss, torch.stack([angles.cos(), angles.sin()], dim=1))
        metrics = {
            "train_accuracy": 100.0 * accuracy(prob[seen], y_tr),
            "mean_conf_train": float(prob[seen].max(dim=1).values.mean()),
            "mean_conf_unseen": float(prob[~seen].max(dim=1).values.mean()),
            "input_transition_fraction": transition_fraction(grid_prob.max(dim=1).values.numpy(), threshold),
            "embedding_transition_fraction": transition_fraction(
                circle_prob.max(dim=1).values.numpy(), threshold
            ),
        }
        rows += tidy(metrics, percent=False, variant=method, dataset=DATASET, seed=seed, **params)
        proxies = torch.nn.functional.normalize(loss.proxies.detach(), dim=1).numpy()
        plot["methods"][method] = {
            "input_p_blue": grid_prob[:, 1].numpy().reshape(len(gy), len(gx)),
            "emb": emb.numpy(),
            "egx": egx,
            "egy": egy,
            "emb_p_blue": egrid_prob[:, 1].numpy().reshape(len(egy), len(egx)),
            "proxies": proxies * radius / 1.15,
        }
    return rows, plot
