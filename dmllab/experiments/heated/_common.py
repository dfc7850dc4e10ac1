"""The Heated-up Softmax paper's facts shared by its artifacts: its preset per variant (identical configs are one
run), the trained classifier of a run, and the reference cell names (``results/reference/heated_softmax.csv``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dmllab.experiments import analogue, kit
from dmllab.experiments.artifact import Run
from dmllab.experiments.lookup import Lookup

SM, LN, BN = "heated_softmax:SM", "heated_softmax:LN", "heated_softmax:BN"  # method labels (claims' arms)
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
    """``presets.get("heated_softmax", ..., variant=variant[, alpha=alpha])`` on the paper dataset ``dataset`` (the
    offline benchmark on smoke/quick) with the embedding size, extra loss keyword arguments (added to the
    preset's) and other overrides."""
    opts = (
        {"variant": variant}
        if alpha is None or variant == "SM"
        else {"variant": variant, "alpha": float(alpha)}
    )
    cfg = kit.config(
        "heated_softmax",
        kit.benchmark_for(profile, dataset),
        profile,
        overrides={"model.embedding_dim": dim, **(overrides or {})},
        **opts,
    )
    if loss_kwargs:
        cfg = dataclasses.replace(cfg, loss=cfg.loss.with_kw(**loss_kwargs))
    return cfg


def alpha_of(profile: str, variant: str, dataset: str = "cars") -> float:
    """The alpha the ``variant`` preset of ``profile`` trains with (on quick the value ``dmllab tune`` chose on
    validation, the paper's 16 on the paper profile)."""
    return float(hs_config(profile, dataset, variant).loss.get("alpha"))


def cell(row: str, column: str, dataset: str = "cars", label: str = "Table 1") -> tuple[str, str, str, str]:
    """A printed cell of ``results/reference/heated_softmax.csv``."""
    return (label, row, column, dataset)


def heating(profile: str) -> str:
    """How the profile heats (the HLN/HBN arm), from the HBN preset: a fine-tune of the converged LN/BN run on
    smoke/quick, as the paper text describes, or the release's heating inside one run (the paper profile)."""
    cfg = hs_config(profile, "cars", "HBN")
    ft, s, heat = cfg.finetune, cfg.schedule, cfg.callback("heating")
    if ft.epochs:
        return (
            f"heating fine-tunes the converged {s.epochs}-epoch LN/BN run for {ft.epochs} epoch"
            f"{'s' if ft.epochs > 1 else ''} at alpha "
            f"x{ft.alpha_factor:g}, lr x{ft.lr_factor:g} (the paper text's procedure; a quarter of the parent's epochs, "
            "rounded up, as the release's --nb_hu_epoch 20 of 80)"
        )
    return (
        f"heating inside the run from epoch {heat.get('epoch')} of {s.epochs}, as the release does (the paper text: a "
        "fine-tune of the converged model)"
    )


def differs(specific: Any, dataset: str = "cars", variant: str = "BN", *, heated: bool = False) -> Any:
    """A Heated-up claim's ``differs``: ``specific`` and the profile's analogue of the ``variant`` preset
    (:func:`dmllab.experiments.analogue.differs`); with ``heated`` (an arm heats) how the profile heats, on the paper
    profile too."""
    if not heated:
        return analogue.differs(specific, f"heated_softmax:{variant}", dataset)

    def line(profile: str) -> str:
        own = specific(profile) if callable(specific) else specific
        return "; ".join(x for x in (own, heating(profile)) if x)

    return analogue.differs(line, f"heated_softmax:{variant}", dataset, paper=heating)


def table1_cell(rec: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    """Table 1 (Cars, CUB, SOP: NMI and R@K) or Table 2 (In-Shop: R@K) cell of a variant's row."""
    metric = str(rec["metric"])
    if not (metric.startswith("R@") or metric == "NMI"):
        return None
    ds = kit.stand_in(str(rec["dataset"]))
    if metric.startswith("R@") and int(metric[2:]) not in PRINTED_K[ds]:
        return None
    if ds == "inshop":
        return None if metric == "NMI" else ("Table 2", metric, str(rec["variant"]), ds)
    return "Table 1", f"{TABLE1_PREFIX[ds]}{metric}", str(rec["variant"]), ds


def classifier(lookup: Lookup, run: Run) -> tuple[Any, str]:
    """``(loss, kind)``: the run's trained softmax classifier (the loss with its trained weights,
    ``kind="softmax"``) when its ``final.pt`` holds the loss state; otherwise ``(None, "nearest class mean")``
    (accuracy then comes from the class means of the training embeddings)."""
    from dmllab.losses import build_loss

    state = lookup.loss_state(run)
    if state is None:
        return None, "nearest class mean"
    cfg = run.config
    loss = build_loss(
        cfg.loss, num_classes=int(state["proxies"].shape[0]), embedding_dim=cfg.model.embedding_dim
    )
    loss.load_state_dict(state)
    return loss.eval(), "softmax"


def split_accuracy(lookup: Lookup, run: Run, split: str, reference_split: str) -> tuple[float, str]:
    """Classification accuracy (fraction) on ``split`` with the run's classifier, or with the nearest class
    mean of ``reference_split``'s embeddings where the classifier was not saved."""
    import torch

    from dmllab.metrics.classification import accuracy, nearest_mean_logits

    loss, kind = classifier(lookup, run)
    emb, labels, ds = lookup.embed(run, split)
    if loss is not None:
        with torch.no_grad():
            return accuracy(loss.logits(emb), labels), kind
    ref, ref_labels, _ = lookup.embed(run, reference_split) if reference_split != split else (emb, labels, ds)
    return accuracy(nearest_mean_logits(ref, ref_labels, emb, ds.num_classes), labels), kind
