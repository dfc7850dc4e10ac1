"""ProxyNCA++ Fig. 3 / appendix B: temperature scaling and the decision boundary on two moons.

Appendix B: scikit-learn ``make_moons(600, noise=0.3, random_state=0)``; a "two-layers linear model"
2 -> 100, ReLU, 100 -> 2; softmax cross-entropy with temperature T (Eq. 6's scaling, q_i = exp(y_i/T) /
sum_j exp(y_j/T), section 3.4). The paper gives neither the temperatures of the panels nor the optimiser;
dmllab uses T in {1, 1/2, 1/4, ...}, the same initialisation (seed) for every T and full-batch Adam for a fixed
number of steps, so that the only difference between panels is T.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dmllab.results import tidy
from dmllab.toys.fit import accuracy, fit_full_batch, mlp

DATASET = "two_moons"


def make_two_moons(
    n_samples: int = 600, noise: float = 0.3, random_state: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The appendix-B data: ``sklearn.datasets.make_moons`` -> (X (N, 2) float32, y (N,) int64)."""
    from sklearn.datasets import make_moons

    x, y = make_moons(n_samples=n_samples, noise=noise, random_state=random_state)
    return x.astype(np.float32), y.astype(np.int64)


def two_moons_net(seed: int, hidden: int = 100) -> nn.Sequential:
    """Appendix B's classifier 2 -> ``hidden`` -> ReLU -> 2, initialised from ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return mlp(2, [hidden], 2)


def tempered_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Temperature scaling (ProxyNCA++ section 3.4): y / T."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return logits / temperature


def tempered_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax cross-entropy of the tempered logits, -log(exp(y_label/T) / sum_j exp(y_j/T)), batch mean."""
    return F.cross_entropy(tempered_logits(logits, temperature), labels)


def grid_axes(x: np.ndarray, resolution: int, margin: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Evenly spaced grid axes covering the data's bounding box plus ``margin``."""
    lo, hi = x.min(axis=0) - margin, x.max(axis=0) + margin
    return np.linspace(lo[0], hi[0], resolution), np.linspace(lo[1], hi[1], resolution)


def class1_probability(model: nn.Module, gx: np.ndarray, gy: np.ndarray, temperature: float) -> np.ndarray:
    """P(class 1 | grid point) of the tempered softmax, shape (len(gy), len(gx))."""
    xx, yy = np.meshgrid(gx, gy)
    pts = torch.from_numpy(np.stack([xx.ravel(), yy.ravel()], axis=1).astype(np.float32))
    with torch.no_grad():
        prob = torch.softmax(tempered_logits(model(pts), temperature), dim=1)[:, 1]
    return prob.numpy().reshape(xx.shape)


def contour_length(gx: np.ndarray, gy: np.ndarray, z: np.ndarray, level: float = 0.5) -> float:
    """Total length of the ``level`` iso-line of ``z`` (shape (len(gy), len(gx))) in data units (contourpy)."""
    import contourpy

    lines = contourpy.contour_generator(gx, gy, z).lines(level)
    return float(sum(np.linalg.norm(np.diff(line, axis=0), axis=1).sum() for line in lines))


def sign_changes(z: np.ndarray, level: float = 0.5) -> int:
    """Number of neighbouring grid cells (horizontal and vertical) whose ``z`` lies on opposite sides of ``level``."""
    above = z > level
    return int((above[:, 1:] != above[:, :-1]).sum() + (above[1:, :] != above[:-1, :]).sum())


def run_two_moons(
    temperatures: Sequence[float],
    *,
    seed: int = 0,
    steps: int = 2000,
    lr: float = 1e-2,
    optimizer: str = "adam",
    hidden: int = 100,
    grid_resolution: int = 200,
    n_samples: int = 600,
    noise: float = 0.3,
    data_seed: int = 0,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train the appendix-B classifier once per temperature (same data, same init) and measure the boundary.

    Returns:
        ``(rows, plot_data)``: tidy rows (variant ``T=<t>``, metrics ``train_accuracy`` in percent,
        ``train_loss`` (the tempered objective), ``train_nll_t1`` (cross-entropy of the untempered logits... at
        T = 1, for comparison across T), ``boundary_length`` (length of the P = 0.5 contour) and
        ``boundary_sign_changes``), and ``plot_data`` with the points ``x``, ``y``, the grid axes ``gx``,
        ``gy`` and ``prob`` {T: P(class 1) on the grid}.
    """
    if not temperatures:
        raise ValueError("give at least one temperature")
    x_np, y_np = make_two_moons(n_samples, noise, data_seed)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    gx, gy = grid_axes(x_np, grid_resolution)
    rows: list[dict[str, Any]] = []
    probs: dict[float, np.ndarray] = {}
    for t in temperatures:
        t = float(t)
        model = two_moons_net(seed, hidden)

        def objective(model: nn.Module = model, t: float = t) -> torch.Tensor:
            return tempered_cross_entropy(model(x), y, t)

        fit_full_batch(model.parameters(), objective, steps=steps, lr=lr, optimizer=optimizer)
        with torch.no_grad():
            logits = model(x)
            loss = float(tempered_cross_entropy(logits, y, t))
            nll_t1 = float(F.cross_entropy(logits, y))
        prob = class1_probability(model, gx, gy, t)
        probs[t] = prob
        metrics = {
            "train_accuracy": 100.0 * accuracy(logits, y),
            "train_loss": loss,
            "train_nll_t1": nll_t1,
            "boundary_length": contour_length(gx, gy, prob),
            "boundary_sign_changes": float(sign_changes(prob)),
        }
        params = {
            "param_temperature": t,
            "param_steps": steps,
            "param_lr": lr,
            "param_optimizer": optimizer,
            "param_hidden": hidden,
        }
        rows += tidy(metrics, percent=False, variant=f"T={t:g}", dataset=DATASET, seed=seed, **params)
    plot_data = {"x": x_np, "y": y_np, "gx": gx, "gy": gy, "prob": probs}
    return rows, plot_data
