"""The manifest of a dataset cache (``dmllab data cache``): its name and how it is read. Below both the cache
writer (:mod:`dmllab.data.cache`) and the dataset fingerprint (:func:`dmllab.data.real.fingerprint`), which checks a
cache root against it."""

from __future__ import annotations

import json
from pathlib import Path

from dmllab.fileio import naming

MANIFEST = "dmllab_cache.json"


class DatasetCacheError(ValueError):
    """A dataset cache folder holds something else than a complete copy of the source asked for; the message
    names the folder and what to do."""


def read_manifest(root: str | Path) -> dict | None:
    """The cache manifest of ``root``, None when it has none.

    Raises DatasetCacheError: the manifest is not valid JSON (naming it)."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    try:
        with naming(path, "reading"):
            data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError) as err:
        raise DatasetCacheError(
            f"dataset cache manifest {path} is damaged ({err}); rebuild the cache with dmllab data cache"
        ) from None
    return data
