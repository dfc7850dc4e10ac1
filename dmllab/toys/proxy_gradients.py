"""ProxyNCA++ section 3.6: the proxies' gradient is orders of magnitude smaller than the embedding layer's.

Section 3.6: "the gradient of proxies is smaller than the gradient of the embedding layer and backbone model
by three orders of magnitude, and this is caused by the L2-Normalization of proxies" (d p_hat / d p =
(I - p_hat p_hat^T) / ||p||, ProxyNCA++'s proxies start at randn/8), hence +fast: a higher proxy learning rate.

dmllab trains the ProxyNCA++ preset through :mod:`dmllab.training` with +fast on and off and records, with a
trainer hook at ``on_step_end`` (after ``backward()``, before clipping and the optimiser step), the L2 norms of
the gradients of the proxies, of the embedding layer (``model.head.linear``, weight and bias) and of the
backbone, every ``every`` steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch import nn

from dmllab.results import tidy

VARIANTS = {"+fast": True, "-fast": False}
METHOD = "proxynca++"


def grad_norm(parameters: Iterable[nn.Parameter]) -> float:
    """sqrt(sum of squared gradient entries) over ``parameters`` (those without a gradient count as 0)."""
    total = 0.0
    for p in parameters:
        if p.grad is not None:
            total += float(p.grad.detach().float().pow(2).sum())
    return total**0.5


def entries(parameters: Iterable[nn.Parameter]) -> int:
    """The number of entries of ``parameters`` (the size a norm sums over)."""
    return sum(p.numel() for p in parameters)


class GradientNormHook:
    """Trainer hook: every ``every`` steps (and the first step of each epoch) record gradient norms.

    Records dicts ``{epoch, step, global_step, proxies, embedding, backbone, proxy_norm, proxies_entries,
    embedding_entries}``; ``global_step`` counts all steps seen by the hook (across epochs); the entries are the
    sizes the two norms sum over (a C x D proxy matrix against the embedding layer's weight and bias).
    """

    def __init__(self, every: int = 1) -> None:
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every = every
        self.records: list[dict[str, float]] = []
        self._global_step = 0

    def on_step_end(self, trainer: Any, info: dict[str, Any]) -> None:
        self._global_step += 1
        if info["step"] != 1 and info["step"] % self.every != 0:
            return
        self.records.append(
            {
                "epoch": info["epoch"],
                "step": info["step"],
                "global_step": self._global_step,
                "proxies": grad_norm([trainer.loss.proxies]),
                "embedding": grad_norm(trainer.model.head.linear.parameters()),
                "backbone": grad_norm(trainer.model.backbone.parameters()),
                "proxy_norm": float(trainer.loss.proxies.detach().norm(dim=1).mean()),
                "proxies_entries": trainer.loss.proxies.numel(),
                "embedding_entries": entries(trainer.model.head.linear.parameters()),
            }
        )


def records_to_rows(
    records: Sequence[dict[str, float]], *, variant: str, seed: int, dataset: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    """Tidy rows per record: metrics ``grad_proxies``, ``grad_embedding``, ``grad_backbone``,
    ``mean_proxy_norm``, ``ratio_proxies_embedding`` (= grad_proxies / grad_embedding; NaN where the embedding
    gradient is 0) and, where the record has the entries each norm sums over, ``rms_ratio_proxies_embedding``
    (the same ratio per entry: each norm over the square root of its entries, so that tensors of different sizes
    compare)."""
    rows = []
    for r in records:
        ratio = r["proxies"] / r["embedding"] if r["embedding"] > 0 else float("nan")
        values = {
            "grad_proxies": r["proxies"],
            "grad_embedding": r["embedding"],
            "grad_backbone": r["backbone"],
            "mean_proxy_norm": r["proxy_norm"],
            "ratio_proxies_embedding": ratio,
        }
        if r.get("proxies_entries") and r.get("embedding_entries"):
            values["rms_ratio_proxies_embedding"] = (
                ratio * (r["embedding_entries"] / r["proxies_entries"]) ** 0.5
            )
        steps = {"param_epoch": r["epoch"], "param_step": r["step"], "param_global_step": r["global_step"]}
        rows += tidy(values, percent=False, variant=variant, dataset=dataset, seed=seed, **steps, **params)
    return rows


def run_proxy_gradients(
    training_profile: str,
    *,
    seed: int = 0,
    every: int = 5,
    dataset: str = "synthetic",
    device: str = "cpu",
    epochs: int | None = None,
    data_root: str | None = None,
    place: Callable[[Any, int], tuple[Any, str]] | None = None,
) -> list[dict[str, Any]]:
    """Train the ProxyNCA++ preset with +fast and -fast (single stage) and return the gradient-norm rows.

    Args:
        training_profile: preset profile of :mod:`dmllab.training` ("smoke", "quick", "paper").
        every: record every ``every`` steps (and the first step of every epoch).
        dataset: preset dataset (the offline "synthetic" benchmark by default).
        epochs: override ``schedule.epochs`` (None: the preset's).
        data_root: the dataset root for real benchmarks (None keeps the preset's).
        place: ``(config, seed) -> (placed config, run id)``: where the caller's study runs the seed (its draw of
            the benchmark and that draw's pre-trained trunk, :meth:`dmllab.experiments.lookup.Lookup.place`); every
            row carries the run id. None: the preset as it is (draw 0), rows without a run id.

    The runs are not taken from the run store: a stored run would skip the hook (it sees trained steps only).
    """
    from dmllab.training import presets, run_single_stage

    rows: list[dict[str, Any]] = []
    for variant, fast in VARIANTS.items():
        cfg = presets.get(METHOD, dataset, training_profile, fast=fast).replace("run.device", device)
        if epochs is not None:
            cfg = cfg.replace("schedule.epochs", epochs)
        if data_root is not None:
            cfg = cfg.replace("data.root", data_root)
        cfg, run_id = place(cfg, seed) if place is not None else (cfg, None)
        hook = GradientNormHook(every)
        result = run_single_stage(cfg, seed=seed, hooks=(hook,), progress=False)
        params = {
            "param_training_profile": training_profile,
            "param_lr": cfg.optim.lr,
            "param_lr_proxies": cfg.optim.lr if cfg.optim.lr_proxies is None else cfg.optim.lr_proxies,
            "param_embedding_dim": cfg.model.embedding_dim,
            "param_every": every,
        }
        mine = records_to_rows(hook.records, variant=variant, seed=seed, dataset=dataset, params=params)
        if "R@1" in result.metrics:  # in percent
            identity = dict(variant=variant, dataset=dataset, seed=seed, config_hash=result.config_hash)
            mine += tidy({"R@1": result.metrics["R@1"]}, **identity, **params)
        rows += [{**r, "run_id": run_id} for r in mine] if run_id is not None else mine
    return rows
