"""What the Heated-up Softmax artifacts share: one config builder (identical configs are one run), trained
model + classifier loading, and the reference cell names (``results/reference/heated_softmax.csv``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmllab.experiments.base import Params, Run
from dmllab.experiments.proxy_anchor._common import config, dataset_for, embed_run, load_trained, stand_in

__all__ = ["classifier", "dataset_for", "embed_run", "hs_config", "seeds_runs", "stand_in", "table1_cell"]

PRINTED_K = {"cars": (1, 2, 4), "cub": (1, 2, 4), "sop": (1, 10, 100), "inshop": (1, 10, 20, 30)}
TABLE1_PREFIX = {"cars": "CAR196 DATASET ", "cub": "CUB200 DATASET ", "sop": "STANFORD PRODUCT DATASET "}


def hs_config(
    profile: str,
    dataset: str,
    variant: str,
    *,
    alpha: float | None = None,
    dim: int | None = None,
    loss_kwargs: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Any:
    """``presets.get("heated_softmax", ..., variant=variant[, alpha=alpha])`` with the embedding size, extra
    loss keyword arguments (added to the preset's) and other overrides."""
    from dmllab.training.config import pairs

    opts = (
        {"variant": variant}
        if alpha is None or variant == "SM"
        else {"variant": variant, "alpha": float(alpha)}
    )
    cfg = config(
        "heated_softmax",
        profile,
        dataset,
        overrides={"model.embedding_dim": dim, **(overrides or {})},
        **opts,
    )
    if loss_kwargs:
        cfg = cfg.replace("loss.kwargs", pairs(**{**dict(cfg.loss.kwargs), **dict(loss_kwargs)}))
    return cfg


def seeds_runs(cfg: Any, params: Params, variant: str, **tags: Any) -> list[Run]:
    return [Run(cfg, s, variant=variant, tags=tuple(tags.items())) for s in params.seeds]


def table1_cell(rec: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    """Table 1 (Cars, CUB, SOP: NMI and R@K) or Table 2 (In-Shop: R@K) cell of a variant's row."""
    metric = str(rec["metric"])
    if not (metric.startswith("R@") or metric == "NMI"):
        return None
    ds = stand_in(str(rec["dataset"]))
    if metric.startswith("R@") and int(metric[2:]) not in PRINTED_K[ds]:
        return None
    if ds == "inshop":
        return None if metric == "NMI" else ("Table 2", metric, str(rec["variant"]), ds)
    return "Table 1", f"{TABLE1_PREFIX[ds]}{metric}", str(rec["variant"]), ds


def classifier(run: Run) -> tuple[Any, Any, str]:
    """``(model, loss, kind)``: the trained model and its softmax classifier (the loss with its trained
    weights, ``kind="softmax"``) when the run's ``final.pt`` holds the loss state; otherwise ``loss`` is None
    and ``kind="nearest class mean"`` (accuracy then comes from the class means of the training embeddings)."""
    from dmllab.losses import build_loss

    model, state = load_trained(run)
    if not isinstance(state, dict) or "loss" not in state:
        return model, None, "nearest class mean"
    loss_state = state["loss"]
    num_classes = int(loss_state["proxies"].shape[0])
    cfg = run.config
    loss = build_loss(
        cfg.loss.name, num_classes=num_classes, embedding_dim=cfg.model.embedding_dim, **dict(cfg.loss.kwargs)
    )
    loss.load_state_dict(loss_state)
    return model, loss.eval(), "softmax"


def split_accuracy(run: Run, split: str, reference_split: str) -> tuple[float, str]:
    """Classification accuracy (fraction) on ``split`` with the run's classifier, or with the nearest class
    mean of ``reference_split``'s embeddings where the classifier was not saved."""
    import torch

    from dmllab.metrics.classification import accuracy, nearest_mean_logits
    from dmllab.training import export

    model, loss, kind = classifier(run)
    cfg = run.config.replace("run.device", "cpu")
    emb, labels, ds = export.embed_split(model, cfg, split)
    if loss is not None:
        with torch.no_grad():
            return accuracy(loss.logits(emb), labels), kind
    ref, ref_labels, _ = (
        export.embed_split(model, cfg, reference_split) if reference_split != split else (emb, labels, ds)
    )
    return accuracy(nearest_mean_logits(ref, ref_labels, emb, ds.num_classes), labels), kind
