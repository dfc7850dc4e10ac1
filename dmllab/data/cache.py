"""``dmllab data cache``: a pre-resized copy of a real dataset (shorter side 288, JPEG quality 95).

Decoding a 500x375 JPEG and resizing it dominates the test-time input pipeline; a copy whose shorter side is
already 288 (the ProxyNCA++ test resize) decodes faster and leaves ``Resize(288)`` a no-op. The copy keeps the
dataset's layout and index files, so a dataset class accepts the cache folder as its ``root``. Images whose
shorter side is already <= the target are copied byte for byte (never upscaled). CUB's ``bounding_boxes.txt``
is rescaled per image; other index files are copied unchanged (the boxes inside Cars' ``cars_annos.mat`` keep
the original coordinates; dmllab does not read them).

The manifest ``dmllab_cache.json`` records the settings, the fingerprint of the source
(:func:`dmllab.data.real.fingerprint`: its index files and the size of every image) and, once the copy is
complete, the fingerprint of the copy itself. A build into a folder that already holds a copy resumes it only when
source and settings are the same (images already there came from that source); a folder holding a copy of another
source, other settings, an older dmllab's copy or anything else is refused, so a cache never mixes images of two
sources. :func:`check_cache` (``dmllab data check`` on a cache) compares the copy with its manifest and with the
source, and opening a dataset at a cache root refuses a copy that changed since it was built.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from PIL import Image

from dmllab.data.base import DATASETS
from dmllab.data.manifest import MANIFEST, DatasetCacheError, read_manifest
from dmllab.fileio import atomic_open, regular_file, write_text_atomic
from dmllab.paths import cache_dir


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
    """Write the resized copy of ``src`` to ``dst`` (atomic; skipped if it exists, which :func:`build_cache`
    allows only when resuming a copy of the same source) and return the scale factor."""
    with Image.open(regular_file(src, "image file")) as img:  # a FIFO would block the copy forever
        size, scale = resized_size(img.width, img.height, shorter_side)
        if dst.exists():
            return scale
        dst.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(dst) as out:  # a full disk or an interrupt leaves no partial file
            if scale == 1.0:
                with open(src, "rb") as fh:
                    shutil.copyfileobj(fh, out)
            else:
                img.convert("RGB").resize(size, Image.BILINEAR).save(out, format="JPEG", quality=quality)
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

    from dmllab.data.real import fingerprint

    cls = DATASETS.get(name)
    src_root = Path(root).expanduser()
    dst_root = Path(out).expanduser() if out is not None else default_cache_root(name, shorter_side)
    if dst_root.resolve() == src_root.resolve():
        raise ValueError(f"the cache folder {dst_root} must differ from the dataset root")
    datasets = [cls(src_root, s, check_counts=False) for s in cls.check_splits]
    files = sorted({f for d in datasets for f in d.files})
    jobs = [(f, str(src_root), str(dst_root), shorter_side, quality) for f in files]
    manifest = {
        "dataset": name,
        "source": str(src_root),
        "source_fingerprint": fingerprint(name, src_root, check_cache=False),
        "shorter_side": shorter_side,
        "quality": quality,
        "images": len(files),
        "complete": False,
    }
    _check_destination(dst_root, manifest)

    dst_root.mkdir(parents=True, exist_ok=True)
    _write_manifest(dst_root, manifest)  # before any image: an interrupted build is known as one
    bar = tqdm(total=len(jobs), desc=f"caching {name}", unit="img", disable=not progress, file=sys.stderr)
    scales: dict[str, float] = {}
    with ProcessPoolExecutor(max_workers=workers) if workers > 1 else contextlib.nullcontext() as pool:
        for rel, scale in pool.map(_cache_job, jobs, chunksize=32) if pool else map(_cache_job, jobs):
            scales[rel] = scale
            bar.update()
    bar.close()

    for rel in cls.index_files:
        (dst_root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src_root / rel, dst_root / rel)
    datasets[0].cache_scale_hook(dst_root, scales)
    done = fingerprint(name, dst_root, check_cache=False)
    _write_manifest(dst_root, {**manifest, "complete": True, "fingerprint": done})
    return dst_root


_SAME = ("dataset", "source_fingerprint", "shorter_side", "quality")


def _check_destination(dst_root: Path, manifest: dict) -> None:
    """Refuse a destination that holds anything but a copy (complete or not) of the same source with the same
    settings (module docstring)."""
    if not dst_root.exists() or not any(dst_root.iterdir()):
        return
    old = read_manifest(dst_root)
    if old is None:
        raise DatasetCacheError(
            f"the cache folder {dst_root} is not empty and holds no dmllab cache manifest ({MANIFEST}); choose "
            "another folder with --out, or empty it first"
        )
    differ = [k for k in _SAME if old.get(k) != manifest[k]]
    if differ:
        what = (
            "an older dmllab's copy (no source fingerprint)"
            if "source_fingerprint" not in old
            else f"a copy of {old.get('source')} with other {', '.join(differ)}"
        )
        raise DatasetCacheError(
            f"the cache folder {dst_root} holds {what}; caching {manifest['source']} into it would mix the images of "
            "two sources. Delete the folder or choose another with --out"
        )


def _write_manifest(dst_root: Path, manifest: dict) -> None:
    write_text_atomic(dst_root / MANIFEST, json.dumps(manifest, indent=2) + "\n")


def check_cache(name: str, root: str | Path, current: str | None = None) -> list[str]:
    """What is wrong with the dataset cache at ``root`` (empty: nothing, or ``root`` is no cache): an
    interrupted build, a copy that changed since it was built (``current``: its fingerprint, computed when not
    given), or a source that changed since (when the source is still at the recorded place)."""
    from dmllab.data.base import DatasetNotFoundError
    from dmllab.data.real import IndexFileError, fingerprint

    manifest = read_manifest(root)
    if manifest is None:
        return []
    rebuild = f"rebuild it: delete {root} and run dmllab data cache {name} <source> --out {root}"
    if manifest.get("dataset") != name:
        return [f"{root} is a cache of dataset {manifest.get('dataset')!r}, not {name!r}"]
    if not manifest.get("complete", True):
        return [f"{root} is an interrupted dmllab data cache (the manifest says incomplete); run it again"]
    problems = []
    if "fingerprint" not in manifest:
        return [f"{root} was built by an older dmllab and records no fingerprint to check it by; {rebuild}"]
    current = current or fingerprint(name, root, check_cache=False)
    if current != manifest["fingerprint"]:
        problems.append(f"{root} changed since it was built (index files or images differ); {rebuild}")
    source = Path(manifest.get("source", ""))
    if source.is_dir():
        try:
            now = fingerprint(name, source, check_cache=False)
        except (DatasetNotFoundError, IndexFileError, OSError):
            now = None
        if now is not None and now != manifest.get("source_fingerprint"):
            problems.append(
                f"{root} is stale: its source {source} changed since the cache was built; {rebuild}"
            )
    return problems
