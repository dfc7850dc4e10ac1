"""The cache stamp: which pin built a cache folder, and the warning for one that another pin (or none) built
(:mod:`dmllab.numerics`)."""

from __future__ import annotations

import json
from pathlib import Path

from dmllab.fileio import write_text_atomic
from dmllab.numerics.pin import NUMPY_VAR, cpu_isa_mode, is_x86, pinned_env

#: Written into the (pinned) cache folder by a dmllab that pins: :func:`stale_cache_message`.
CACHE_STAMP = "numerics.json"
# What the cache holds that its numerics decide: the generated images, the pre-trained weights, the feature caches.
_CACHE_BUILT = ("synthetic", "weights", "features")


def _read_stamp(root: Path) -> dict | None:
    """The stamp's pinned variables; None without a stamp; {} for one that cannot be read."""
    try:
        stamp = json.loads((root / CACHE_STAMP).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    pinned = stamp.get("pinned") if isinstance(stamp, dict) and stamp.get("cpu_isa") == "avx2" else None
    return pinned if isinstance(pinned, dict) else {}


def _pin_differences(stamped: dict) -> list[str]:
    """How the pin of a stamp differs from this dmllab's, e.g. ``["MKL_CBWR unset"]`` (numpy's variable by name
    only: its value names numpy's targets as the installed numpy names them)."""
    now = pinned_env()
    out = [f"{k} unset" for k in now if k not in stamped]
    out += [f"{k}={v}" for k, v in stamped.items() if k not in now or (k != NUMPY_VAR and v != now[k])]
    return out


def stale_cache_message(root: Path, runs: Path, *, machine: str | None = None) -> str | None:
    """Why the cache ``root`` may hold other numbers than this pinned dmllab builds, or None (stamping it).

    A cache folder that a pinning dmllab makes carries :data:`CACHE_STAMP`, which names the pinned variables
    (:func:`dmllab.paths.cache_dir`). A cache with built content (images, pre-trained SmallCNN, feature caches) on
    an x86-64 CPU whose stamp is missing (a dmllab older than the pin built it) or names another pin (an older pin,
    e.g. without MKL's) gets the message, naming the run store ``runs`` too: its contents, and every run trained on
    them, may differ in the last bits. It keeps its stamp until deleted, so the warning repeats. A cache without
    built content, or off x86-64 (where nothing is pinned), is stamped anew; mode "native" has a cache of its own.
    """
    if cpu_isa_mode() == "native":
        return None
    stamped = _read_stamp(root)
    differences = None if stamped is None else _pin_differences(stamped)
    if differences == []:
        return None
    built = [name for name in _CACHE_BUILT if (root / name).exists()]
    if not built or not is_x86(machine):
        stamp_cache(root)
        return None
    why = (
        f"no {CACHE_STAMP}: an older dmllab built it, which did not pin the CPU kernels"
        if differences is None
        else f"a {CACHE_STAMP} of another CPU pin ({', '.join(differences)}): an older dmllab built it"
    )
    return (
        f"the cache {root} holds {', '.join(built)} but {why}, so its contents (and the runs trained on them) may "
        "differ from the committed numbers in the last bits (docs/reproducibility.md, 'The cache stamp'). Delete "
        f"{root} and the run store {runs} once; dmllab builds both again"
    )


def claim_cache(root: Path) -> None:
    """Stamp ``root`` (:func:`stamp_cache`, made if missing) while it holds no stamp and nothing built: a folder
    that is new, or that its user made empty (``mkdir -p $DMLLAB_CACHE``), is this pin's from its first file on."""
    if not (root / CACHE_STAMP).exists() and not any((root / name).exists() for name in _CACHE_BUILT):
        stamp_cache(root)


def stamp_cache(root: Path) -> None:
    """Write :data:`CACHE_STAMP` into ``root`` (made if missing): this dmllab's pin built this cache.
    :func:`dmllab.paths.cache_dir` stamps every cache folder it makes."""
    mode = cpu_isa_mode()
    root.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"cpu_isa": mode, "pinned": pinned_env() if mode == "avx2" else {}}, indent=1) + "\n"
    write_text_atomic(root / CACHE_STAMP, text)
