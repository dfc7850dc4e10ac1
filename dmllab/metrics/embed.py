"""Embedding a whole dataset for evaluation."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn


def embed_dataset(
    model: nn.Module,
    loader: Iterable,
    device: torch.device | str,
    *,
    amp: bool = False,
) -> tuple[Tensor, Tensor]:
    """Run ``model`` over ``loader`` (batches of (images, labels)) in eval mode without gradients.

    Args:
        model: maps (B, 3, H, W) to (B, D).
        loader: yields (inputs, labels) pairs; extra items in a batch are ignored.
        device: where the model runs.
        amp: autocast (bfloat16 on CPU, float16 on CUDA) for the forward pass.

    Returns:
        embeddings (N, D) float32 on the CPU and labels (N,) long. The model's previous train/eval mode is
        restored afterwards (also when an error is raised).
    """
    device = torch.device(device)
    was_training = model.training
    embs: list[Tensor] = []
    labs: list[Tensor] = []
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    model.eval()
    try:
        with torch.no_grad():
            for batch in loader:
                if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                    raise ValueError("loader must yield (inputs, labels) batches")
                x, y = batch[0], batch[1]
                with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=amp):
                    out = model(x.to(device, non_blocking=True))
                embs.append(out.float().cpu())
                labs.append(torch.as_tensor(y).long().cpu())
    finally:
        model.train(was_training)
    if not embs:
        raise ValueError("loader yielded no batches")
    return torch.cat(embs), torch.cat(labs)
