"""From runs to files: tidy result rows (``dmllab.results`` schema) and embedding exports (npz).

Retrieval metrics go to the tidy CSVs in percent, as the papers print them (CONTRACT.md).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dmllab.fileio import atomic_open
from dmllab.training.config import ExperimentConfig
from dmllab.training.protocol import RunResult


def result_rows(
    result: RunResult,
    *,
    experiment: str,
    paper: str,
    artifact: str,
    variant: str = "",
    cfg: ExperimentConfig | None = None,
    params: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One tidy row per test metric of ``result`` (values in percent), with provenance columns.

    Args:
        experiment, paper, artifact, variant: the row's identity (e.g. "table2", "proxynca++", "Table 2", "+max").
        cfg: the run's config (fills ``dataset``/``profile`` and ``param_method``); optional.
        params: extra ``param_*`` columns (the prefix is added when missing).
    """
    from dmllab.results import provenance, tidy

    prov = dict(provenance(result.device))
    prov["config_hash"] = result.config_hash
    prov["run_id"] = f"{result.config_hash}/seed{result.seed}"
    extra = {(k if k.startswith("param_") else f"param_{k}"): v for k, v in (params or {}).items()}
    if cfg is not None:
        extra.setdefault("param_method", cfg.method)
    row = dict(experiment=experiment, paper=paper, artifact=artifact, variant=variant, seed=result.seed)
    row |= {"dataset": cfg.dataset if cfg else "", "profile": cfg.profile if cfg else ""}
    return tidy(result.metrics, **row, **extra, **prov)


def load_model(cfg: ExperimentConfig, weights: str | os.PathLike) -> torch.nn.Module:
    """Build ``cfg``'s model (random init, no pre-training needed) and load a saved state dict into it."""
    from dmllab.training.build import build_model
    from dmllab.training.checkpoint import load_checkpoint

    model = build_model(cfg.model, weights=False)

    state = load_checkpoint(weights, "model file")  # a named error for a corrupt file or a folder
    if "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    elif "trainer" in state:
        state = state["trainer"]["model"]
    model.load_state_dict(state)
    return model.eval()


#: Frozen-prefix outputs memoised per process by :func:`embed_split` (few entries: one split is ~60 MB).
_PREFIX_MEMO: OrderedDict[tuple, tuple[list[torch.Tensor], list[torch.Tensor]]] = OrderedDict()
_PREFIX_MEMO_SIZE = 4


def _prefix_batches(
    model: torch.nn.Module, loader: Any, blocks: int, key: tuple, device: torch.device
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The output of the first ``blocks`` trunk blocks (eval mode, float32) for every batch of ``loader``, and the
    labels, memoised under ``key`` (prefix weights, dataset, transform, batch size, device)."""
    if key in _PREFIX_MEMO:
        _PREFIX_MEMO.move_to_end(key)
        return _PREFIX_MEMO[key]
    backbone = model.backbone
    was_training = model.training
    model.eval()
    feats, labels = [], []
    try:
        with torch.no_grad():
            for x, y, *_ in loader:
                feats.append(backbone.forward_blocks(x.to(device), 0, blocks))
                labels.append(torch.as_tensor(y))
    finally:
        model.train(was_training)
    _PREFIX_MEMO[key] = (feats, labels)
    while len(_PREFIX_MEMO) > _PREFIX_MEMO_SIZE:
        _PREFIX_MEMO.popitem(last=False)
    return feats, labels


def embed_split(
    model: torch.nn.Module, cfg: ExperimentConfig, split: str, *, device: str | torch.device = "cpu"
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """Embeddings (N, D), labels (N,) and the dataset of ``split`` with the config's test transform: the model's
    full-precision forward on the test view (the quick profile's training evaluation reads float16 cached
    features instead, so a run's stored metrics may differ in the last digits).

    With a frozen trunk prefix (``model.frozen_blocks`` on an in-memory dataset: the quick profile) the prefix's
    output is memoised per process, keyed by the prefix weights: every stored model sharing the pre-trained prefix
    (all runs of a notebook) then runs only its trained blocks and head. The result is bit-identical to the full
    forward (same batches, same operations).
    """
    from torch.utils.data import DataLoader

    from dmllab.data.loaders import loader_context, open_split, resolve_num_workers
    from dmllab.metrics import embed_dataset

    d = cfg.data
    ds = open_split(d, split, train=False)
    workers = resolve_num_workers(d.num_workers)  # the paper presets' "auto"
    loader = DataLoader(
        ds, batch_size=d.eval_batch_size, num_workers=workers, multiprocessing_context=loader_context(workers)
    )
    device = torch.device(device)
    model = model.to(device)
    blocks = cfg.model.frozen_blocks
    if not (d.in_memory and blocks > 0 and hasattr(model.backbone, "forward_blocks")):
        emb, labels = embed_dataset(model, loader, device)
        return emb, labels, ds
    from dmllab.data.tensor import dataset_fingerprint, tensor_digest
    from dmllab.models import EmbeddingTail

    prefix = [t for b in model.backbone.blocks()[:blocks] for t in b.state_dict().values()]
    key = (tensor_digest(prefix), dataset_fingerprint(ds), d.transform, d.eval_batch_size, str(device))
    feats, labels = _prefix_batches(model, loader, blocks, key, device)
    tail = EmbeddingTail(model, blocks).train(model.training)  # embed_dataset restores the wrapper's mode
    emb, labels = embed_dataset(tail, zip(feats, labels), device)
    return emb, labels, ds


def export_embeddings(
    model: torch.nn.Module, cfg: ExperimentConfig, split: str, path: str | os.PathLike, *, device: str = "cpu"
) -> Path:
    """Save ``embeddings`` (N, D) float32, ``labels`` (N,) int64 and ``class_ids`` (the dataset's original
    class ids, indexed by label) of ``split`` to an ``.npz`` (for t-SNE and retrieval examples)."""
    emb, labels, ds = embed_split(model, cfg, split, device=device)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    class_ids = np.asarray([str(c) for c in getattr(ds, "class_ids", range(ds.num_classes))])
    with atomic_open(path) as fh:  # a file object: np.savez adds no suffix
        np.savez(
            fh,
            embeddings=emb.numpy().astype(np.float32),
            labels=labels.numpy().astype(np.int64),
            class_ids=class_ids,
        )
    return path
