"""Embedding a whole dataset for evaluation."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn


def default_amp_dtype(device: torch.device) -> torch.dtype:
    """Autocast dtype when none is given: bfloat16 (CPU, and CUDA where supported), else float16."""
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


def embed_dataset(
    model: nn.Module,
    loader: Iterable,
    device: torch.device | str,
    *,
    amp: bool = False,
    amp_dtype: torch.dtype | None = None,
    channels_last: bool = False,
    keep_on_device: bool = False,
) -> tuple[Tensor, Tensor]:
    """Run ``model`` over ``loader`` (batches of (images, labels)) in eval mode without gradients.

    Args:
        model: maps (B, 3, H, W) to (B, D).
        loader: yields (inputs, labels) pairs; extra items in a batch are ignored.
        device: where the model runs.
        amp: autocast the forward pass, in ``amp_dtype``: pass the training's precision (the trainer passes
            its resolved ``run.amp``); None = :func:`default_amp_dtype` (bfloat16 unless the GPU lacks it).
        channels_last: feed 4-D inputs in channels-last memory format (as the trainer does on CUDA).
        keep_on_device: return the embeddings on ``device`` (so that the metrics run there, without a
            copy to the host per batch); default: on the CPU.

    Returns:
        embeddings (N, D) float32 and labels (N,) long, on the CPU or (``keep_on_device``) on ``device``.
        The model's previous train/eval mode is restored afterwards (also when an error is raised).
    """
    device = torch.device(device)
    out_device = device if keep_on_device else torch.device("cpu")
    was_training = model.training
    embs: list[Tensor] = []
    labs: list[Tensor] = []
    dtype = amp_dtype if amp_dtype is not None else default_amp_dtype(device)
    model.eval()
    try:
        with torch.no_grad():
            for batch in loader:
                if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                    raise ValueError("loader must yield (inputs, labels) batches")
                x, y = batch[0], batch[1]
                x = x.to(device, non_blocking=True)
                if channels_last and x.ndim == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
                with torch.autocast(device_type=device.type, dtype=dtype, enabled=amp):
                    out = model(x)
                # no .cpu() per batch when the embeddings stay on the device: no host sync in the loop
                embs.append(out.float().to(out_device))
                labs.append(torch.as_tensor(y).long().to(out_device))
    finally:
        model.train(was_training)
    if not embs:
        raise ValueError("loader yielded no batches")
    return torch.cat(embs), torch.cat(labs)
