"""Heated-up Softmax Embedding, Fig. 1 (gradient magnitude vs alpha) and Fig. 2 (2-D bottleneck embeddings).

Notation of the paper (section 3.1-3.2): logits z_m = <f_hat, w_hat_m> (+ b_m) on the L2-normalised feature
f_hat and weights w_hat_m, p(m|x, alpha) = softmax(alpha z)_m (Eq. 1), and the gradient w.r.t. the normalised
feature (Eq. 3 with f_hat, w_hat):

    d l / d f_hat = alpha * sum_m (p(m|x, alpha) - q(m|x)) w_hat_m.

Samples are "incorrect" when some m != y has z_m >= z_y, "correct" otherwise; among the correct ones the
"boundary" samples lie close to the decision boundary and the "centroid" samples close to the class centre.
dmllab measures closeness by the cosine margin z_y - max_{m != y} z_m: the lowest ``group_quantile`` of the
correct samples' margins are "boundary", the highest are "centroid" (the paper gives no numeric rule).

Properties (section 3.2): (1) as alpha -> 0 every gradient vanishes; (2) as alpha -> infinity the gradient of a
correct sample vanishes while that of an incorrect one grows without bound; (3) the same for the weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dmllab.losses import HeatedSoftmaxLoss, SoftmaxLoss
from dmllab.losses.functional import heated_softmax_logits
from dmllab.results import tidy
from dmllab.toys.fit import accuracy, fit_full_batch, mlp

GROUPS = ("centroid", "boundary", "incorrect")


# ------------------------------------------------------------------------------------------------ data


def digits_tensors(split: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The bundled digits of ``split`` (:class:`dmllab.data.Digits`, its stratified split with ``seed``) as
    (X (N, 64) float32 pixel values in [0, 1], y (N,) long)."""
    from dmllab.data.digits import Digits

    ds = Digits(None, split, seed=seed)
    return torch.from_numpy(ds.data), torch.as_tensor(ds.labels, dtype=torch.long)


# ------------------------------------------------------------------------------------- Fig. 1: gradients


def feature_gradient(
    f_hat: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Per-sample d l / d f_hat of the normalised-softmax cross-entropy, by autograd, shape (N, D).

    The summed loss is differentiated, so row i is the gradient of sample i's own loss.
    """
    f = f_hat.detach().clone().requires_grad_(True)
    logits = heated_softmax_logits(f, weight.detach(), None, alpha=alpha)  # (N, C)
    (grad,) = torch.autograd.grad(F.cross_entropy(logits, labels, reduction="sum"), f)
    return grad


def feature_gradient_analytic(
    f_hat: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, alpha: float
) -> torch.Tensor:
    """Eq. 3 with normalised features and weights: alpha * sum_m (p_m - q_m) w_hat_m, shape (N, D)."""
    w_hat = F.normalize(weight, dim=1)  # (C, D)
    p = torch.softmax(alpha * f_hat @ w_hat.t(), dim=1)  # (N, C)
    q = F.one_hot(labels, w_hat.shape[0]).to(p.dtype)
    return alpha * (p - q) @ w_hat


def cosine_margin(f_hat: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """z_y - max_{m != y} z_m with z = <f_hat, w_hat> (positive: correct, <= 0: incorrect), shape (N,)."""
    z = f_hat @ F.normalize(weight, dim=1).t()  # (N, C)
    z_y = z.gather(1, labels[:, None]).squeeze(1)
    others = z.scatter(1, labels[:, None], float("-inf"))
    return z_y - others.max(dim=1).values


def sample_groups(margin: torch.Tensor, group_quantile: float = 0.1) -> dict[str, torch.Tensor]:
    """Boolean masks of the centroid / boundary / incorrect samples from their cosine margins.

    Incorrect: margin <= 0. Among the correct samples, boundary: margin <= the ``group_quantile`` quantile,
    centroid: margin >= the ``1 - group_quantile`` quantile.
    """
    if not 0.0 < group_quantile <= 0.5:
        raise ValueError(f"group_quantile must be in (0, 0.5], got {group_quantile}")
    correct = margin > 0
    groups = {"incorrect": ~correct}
    if correct.any():
        m = margin[correct]
        lo, hi = torch.quantile(m, group_quantile), torch.quantile(m, 1.0 - group_quantile)
        groups["boundary"] = correct & (margin <= lo)
        groups["centroid"] = correct & (margin >= hi)
    else:
        groups["boundary"] = torch.zeros_like(correct)
        groups["centroid"] = torch.zeros_like(correct)
    return {g: groups[g] for g in GROUPS}


def train_normalized_classifier(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    num_classes: int,
    hidden: Sequence[int],
    embedding_dim: int,
    alpha: float,
    steps: int,
    lr: float,
    seed: int,
    bias: bool = False,
) -> tuple[nn.Module, HeatedSoftmaxLoss]:
    """Train MLP -> L2 normalise -> HeatedSoftmaxLoss(alpha) (the LN model of the paper) full-batch with Adam."""
    torch.manual_seed(seed)
    net = mlp(x.shape[1], list(hidden), embedding_dim)
    loss = HeatedSoftmaxLoss(num_classes, embedding_dim, alpha=alpha, bias=bias)

    def objective() -> torch.Tensor:
        return loss(F.normalize(net(x), dim=1), y)

    fit_full_batch(list(net.parameters()) + list(loss.parameters()), objective, steps=steps, lr=lr)
    return net, loss


def gradient_vs_alpha(
    f_hat: torch.Tensor,
    labels: torch.Tensor,
    weight: torch.Tensor,
    alphas: Sequence[float],
    *,
    group_quantile: float = 0.1,
) -> list[dict[str, Any]]:
    """Mean ||d l / d f_hat||_2 per group and alpha, by autograd and by Eq. 3 (rows without experiment columns).

    Groups are fixed once from the cosine margins (they do not depend on alpha without a bias).
    """
    groups = sample_groups(cosine_margin(f_hat, labels, weight), group_quantile)
    rows: list[dict[str, Any]] = []
    for g, mask in groups.items():
        rows += tidy({"group_size": float(mask.sum())}, percent=False, variant=g, param_alpha=float("nan"))
    for a in alphas:
        a = float(a)
        auto = feature_gradient(f_hat, labels, weight, a).norm(dim=1)
        ana = feature_gradient_analytic(f_hat, labels, weight, a).norm(dim=1)
        for g, mask in groups.items():
            if not mask.any():
                continue
            norms = {"grad_norm": float(auto[mask].mean()), "grad_norm_analytic": float(ana[mask].mean())}
            rows += tidy(norms, percent=False, variant=g, param_alpha=a)
    return rows


def run_heated_gradients(
    alphas: Sequence[float],
    *,
    seed: int = 0,
    train_alpha: float = 16.0,
    hidden: Sequence[int] = (128, 128),
    embedding_dim: int = 16,
    steps: int = 300,
    lr: float = 1e-3,
    group_quantile: float = 0.1,
    split: str = "test",
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Fig. 1 analogue: train the LN model on digits at ``train_alpha``, then sweep alpha on its features.

    Args:
        alphas: the alpha grid (log-spaced in the artifact).
        split: measure on the "train" or the "test" samples (the test split has incorrect samples even when the
            training set is fitted perfectly).
        data: (x_train, y_train, x_test, y_test); default :func:`digits_tensors` of "train" and "test".

    Returns:
        ``(rows, plot_data)``: rows per (group, alpha) with metrics ``grad_norm`` (autograd),
        ``grad_norm_analytic`` (Eq. 3), per group ``group_size``, and the model's ``train_accuracy`` and
        ``test_accuracy`` (percent); ``plot_data`` is empty (the figure is drawn from the rows).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    x_tr, y_tr, x_te, y_te = data if data is not None else (*digits_tensors("train"), *digits_tensors("test"))
    num_classes = int(y_tr.max()) + 1
    net, loss = train_normalized_classifier(
        x_tr,
        y_tr,
        num_classes=num_classes,
        hidden=hidden,
        embedding_dim=embedding_dim,
        alpha=train_alpha,
        steps=steps,
        lr=lr,
        seed=seed,
    )
    with torch.no_grad():
        f_tr, f_te = F.normalize(net(x_tr), dim=1), F.normalize(net(x_te), dim=1)
        acc_tr = 100.0 * accuracy(loss.logits(f_tr), y_tr)
        acc_te = 100.0 * accuracy(loss.logits(f_te), y_te)
    f_hat, labels = (f_tr, y_tr) if split == "train" else (f_te, y_te)
    params = {
        "param_train_alpha": train_alpha,
        "param_embedding_dim": embedding_dim,
        "param_steps": steps,
        "param_lr": lr,
        "param_group_quantile": group_quantile,
        "param_split": split,
    }
    rows = [
        {"variant": "model", "metric": "train_accuracy", "value": acc_tr, "param_alpha": train_alpha},
        {"variant": "model", "metric": "test_accuracy", "value": acc_te, "param_alpha": train_alpha},
    ]
    rows += gradient_vs_alpha(f_hat, labels, loss.proxies.detach(), alphas, group_quantile=group_quantile)
    rows = [{"dataset": "digits", "seed": seed, **r, **params} for r in rows]
    return rows, {}


# ----------------------------------------------------------------------------------- Fig. 2: embeddings


FIG2_VARIANTS = ("SM", "LN alpha=4")


def angular_statistics(emb: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """Compactness / spread of the directions of ``emb`` (any norm), in degrees.

    ``intra_angle``: mean angle between an embedding and its class's mean direction; ``inter_angle``: mean
    angle between the class mean directions of every pair of classes; ``intra_inter_ratio`` = intra / inter
    (lower = more compact relative to the spread); ``norm_cv``: std / mean of the raw norms.
    """
    u = F.normalize(emb, dim=1)
    classes = torch.unique(labels)
    centres = F.normalize(torch.stack([u[labels == c].mean(0) for c in classes]), dim=1)  # (C, D)
    index = torch.searchsorted(classes, labels)
    intra = torch.rad2deg(torch.arccos((u * centres[index]).sum(1).clamp(-1, 1))).mean()
    cos = (centres @ centres.t()).clamp(-1, 1)
    iu = torch.triu_indices(len(classes), len(classes), offset=1)
    inter = torch.rad2deg(torch.arccos(cos[iu[0], iu[1]])).mean()
    norms = emb.norm(dim=1)
    return {
        "intra_angle": float(intra),
        "inter_angle": float(inter),
        "intra_inter_ratio": float(intra / inter),
        "norm_cv": float(norms.std() / norms.mean()),
    }


def train_fig2_variant(
    variant: str,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    num_classes: int,
    hidden: Sequence[int],
    alpha: float,
    steps: int,
    lr: float,
    seed: int,
) -> tuple[nn.Module, nn.Module, bool]:
    """Train one Fig. 2 model with a 2-D bottleneck; returns (net, loss, normalizes_features).

    "SM": unnormalised features and weights, alpha = 1 (SoftmaxLoss, with bias). "LN alpha=4": L2-normalised
    features, normalised weights, alpha (HeatedSoftmaxLoss with bias, the paper's z = W^T f + b).
    """
    if variant not in FIG2_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(FIG2_VARIANTS)}")
    torch.manual_seed(seed)
    net = mlp(x.shape[1], list(hidden), 2)
    normalize = variant != "SM"
    loss: nn.Module = (
        HeatedSoftmaxLoss(num_classes, 2, alpha=alpha) if normalize else SoftmaxLoss(num_classes, 2)
    )

    def embed(inp: torch.Tensor) -> torch.Tensor:
        f = net(inp)
        return F.normalize(f, dim=1) if normalize else f

    fit_full_batch(
        list(net.parameters()) + list(loss.parameters()), lambda: loss(embed(x), y), steps=steps, lr=lr
    )
    return net, loss, normalize


def run_heated_embeddings(
    *,
    seed: int = 0,
    alpha: float = 4.0,
    hidden: Sequence[int] = (256, 128),
    steps: int = 500,
    lr: float = 1e-3,
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Fig. 2 analogue on digits: SM vs LN (alpha) with a 2-D bottleneck; statistics of the test embeddings.

    Rows per variant: ``test_accuracy`` (classifier, percent), ``R@1`` (percent, Euclidean on the
    L2-normalised test embeddings, as the paper evaluates), and :func:`angular_statistics` of the raw test
    embeddings (the network output before any normalisation). ``plot_data[variant]``: test embeddings
    ``emb`` (raw), ``labels``, classifier weights ``weights``.
    """
    from dmllab.metrics import recall_at_k

    x_tr, y_tr, x_te, y_te = data if data is not None else (*digits_tensors("train"), *digits_tensors("test"))
    num_classes = int(y_tr.max()) + 1
    rows: list[dict[str, Any]] = []
    plot: dict[str, Any] = {}
    for variant in FIG2_VARIANTS:
        net, loss, normalize = train_fig2_variant(
            variant,
            x_tr,
            y_tr,
            num_classes=num_classes,
            hidden=hidden,
            alpha=alpha,
            steps=steps,
            lr=lr,
            seed=seed,
        )
        with torch.no_grad():
            raw = net(x_te)
            emb = F.normalize(raw, dim=1) if normalize else raw
            acc = 100.0 * accuracy(loss.logits(emb), y_te)
        r1 = 100.0 * recall_at_k(F.normalize(raw, dim=1), y_te, ks=(1,))[1]
        metrics = {"test_accuracy": acc, "R@1": r1, **angular_statistics(raw, y_te)}
        setting = {"alpha": 1.0 if variant == "SM" else alpha, "steps": steps, "lr": lr}
        rows += tidy(metrics, percent=False, variant=variant, dataset="digits", seed=seed, **setting)
        plot[variant] = {"emb": raw.numpy(), "labels": y_te.numpy(), "weights": loss.proxies.detach().numpy()}
    return rows, plot
