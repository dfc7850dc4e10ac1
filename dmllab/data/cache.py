"""``dmllab data cache``: a pre-resized copy of a real dataset (shorter side 288, JPEG quality 95).

Decoding a 500x375 JPEG and resizing it dominates the test-time input pipeline; a copy whose shorter side is
already 288 (the ProxyNCA++ test resize) decodes faster and leaves ``Resize(288)`` a no-op. The copy keeps the
dataset's layout and index files, so a dataset class accepts the cache folder as its ``root``. Images whose
shorter side is already <= the target are copied byte for byte (never upscaled). CUB's ``bounding_boxes.txt``
is rescaled per image; other index files are copied unchanged (the boxes inside Cars' ``cars_annos.mat`` keep
the original coordinates; dmllab does not read them).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from PIL import Image

from dmllab.data.base import DATASETS
from dmllab.paths import cache_dir

MANIFEST = "dmllab_cache.json"


def default_cache_root(name: str, shorter_side: int = 288) -> Path:
    """``<cache_dir>/datasets/<name>-<shorter_side>``."""
    return cache_dir() / "datasets" / f"{name}-{shorter_side}"


def resized_size(width: int, height: int, shorter_side: int) -> tuple[tuple[int, int], float]:
    """Target size keeping the aspect ratio with the shorter side ``shorter_side`` (never upscaling) and the scale."""
    short = min(width, height)
    if short <= shorter_side:
        return (width, height), 1.0
    scale = shorter_side / short
    return (max(1, round(width * scale)), max(1, round(height * scale))), scale


def cache_image(src: Path, dst: Path, shorter_side: int = 288, quality: int = 95) -> float:
    """Write the resized copy of ``src`` to ``dst`` (atomic; skipped if it exists) and return the scale factor."""
    with Image.open(src) as img:
        size, scale = resized_size(img.width, img.height, shorter_side)
        if dst.exists():
            return scale
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".tmp")
        if scale == 1.0:
            shutil.copyfile(src, tmp)
        else:
            img.convert("RGB").resize(size, Image.BILINEAR).save(tmp, format="JPEG", quality=quality)
    os.replace(tmp, dst)
    return scale


def _cache_job(job: tuple[str, str, str, int, int]) -> tuple[str, float]:
    rel, src_root, dst_root, side, quality = job
    return rel, cache_image(Path(src_root) / rel, Path(dst_root) / rel, side, quality)


def build_cache(
    name: str,
    root: str | Path,
    out: str | Path | None = None,
    *,
    shorter_side: int = 288,
    quality: int = 95,
    workers: int = 1,
    progress: bool = True,
) -> Path:
    """Write the pre-resized copy of dataset ``name`` (at ``root``) and return the new root.

    Args:
        out: destination folder; default :func:`default_cache_root`.
        workers: processes used for resizing (1: in this process).
    """
    from tqdm.auto import tqdm

    cls = DATASETS.get(name)
    src_root = Path(root).expanduser()
    dst_root = Path(out).expanduser() if out is not None else default_cache_root(name, shorter_side)
    if dst_root.resolve() == src_root.resolve():
        raise ValueError(f"the cache folder {dst_root} must differ from the dataset root")
    datasets = [cls(src_root, s, check_counts=False) for s in cls.check_splits]
    files = sorted({f for d in datasets for f in d.files})
    jobs = [(f, str(src_root), str(dst_root), shorter_side, quality) for f in files]

    dst_root.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=len(jobs), desc=f"caching {name}", unit="img", disable=not progress, file=sys.stderr)
    scales: dict[str, float] = {}
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for rel, scale in pool.map(_cache_job, jobs, chunksize=32):
                scales[rel] = scale
                bar.update()
    else:
        for job in jobs:
            rel, scale = _cache_job(job)
            scales[rel] = scale
            bar.update()
    bar.close()

    for rel in cls.index_files:
        (dst_root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src_root / rel, dst_root / rel)
    datasets[0].cache_scale_hook(dst_root, scales)
    manifest = {
        "dataset": name,
        "source": str(src_root),
        "shorter_side": shorter_side,
        "quality": quality,
        "images": len(files),
    }
    (dst_root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return dst_root
