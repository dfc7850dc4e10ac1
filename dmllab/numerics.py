"""The same float32 bits on every x86-64 CPU: torch's and numpy's CPU kernels pinned to AVX2 (dmllab choice).

torch and numpy pick the instruction set of their CPU kernels at run time, from the machine: ATen's vectorised
kernels (element-wise ops, reductions: ``ATEN_CPU_CAPABILITY``), oneDNN's convolutions (``ONEDNN_MAX_CPU_ISA``) and
numpy's dispatched loops (``NPY_DISABLE_CPU_FEATURES``). An AVX-512 CPU sums in another order (and rounds some
functions otherwise) than an AVX2 one, so the same seed gives other last bits, and training turns them into other
metrics (docs/reproducibility.md, "Same numbers on other CPUs", has a measured example).

:func:`pin_cpu_isa` pins all three to AVX2, which every x86-64 CPU of the last decade runs, so the quick study on a
fresh machine reproduces the committed result CSVs bit for bit (with the same thread count: see
:func:`dmllab.training.store.provenance`). It has to run before torch's first CPU kernel and before numpy is
imported: ``import dmllab`` calls it, which the CLI, the study's workers and the notebooks do first.
``DMLLAB_CPU_ISA=native`` leaves the choice to the machine (faster on AVX-512 CPUs; its numbers are not comparable
bit for bit with the committed ones). A variable the user set wins. No effect off x86-64 or on a GPU.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import MutableMapping
from importlib import metadata
from pathlib import Path

CPU_ISA_VAR = "DMLLAB_CPU_ISA"
CPU_ISA_MODES = ("avx2", "native")
#: What ``DMLLAB_CPU_ISA=avx2`` (the default) sets for torch, where the user has not set it.
PINNED_ENV: dict[str, str] = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
NUMPY_VAR = "NPY_DISABLE_CPU_FEATURES"
# numpy's dispatch targets above AVX2, by the names of numpy >= 2.4 (x86-64 microarchitecture levels) and before.
_NUMPY_ABOVE_AVX2 = {
    "2.4": "X86_V4 AVX512_ICL AVX512_SPR",
    "old": "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR",
}
#: The variables of :func:`pinned_env` that dmllab set (not the user), comma-separated: a child process started
#: with ``DMLLAB_CPU_ISA=native`` by a pinned one drops them again.
PINNED_MARKER = "DMLLAB_PINNED_ENV"
_X86 = ("x86_64", "amd64", "x64")


def cpu_isa_mode(environ: MutableMapping[str, str] = os.environ) -> str:
    """``$DMLLAB_CPU_ISA`` (default "avx2"), checked.

    Raises:
        ValueError: another value, naming the valid ones.
    """
    mode = environ.get(CPU_ISA_VAR, "avx2").strip().lower()
    if mode not in CPU_ISA_MODES:
        raise ValueError(
            f"{CPU_ISA_VAR}={environ[CPU_ISA_VAR]!r}: valid values are {', '.join(CPU_ISA_MODES)}"
        )
    return mode


def pinned_env(numpy_version: str | None = None) -> dict[str, str]:
    """What the pin sets: :data:`PINNED_ENV` and numpy's dispatch targets above AVX2, named as the installed numpy
    (``numpy_version``, default read from its metadata without importing it) names them."""
    if numpy_version is None:
        try:
            numpy_version = metadata.version("numpy")
        except metadata.PackageNotFoundError:
            numpy_version = "0"
    major, minor = (int(p) if p.isdigit() else 0 for p in (numpy_version.split(".") + ["0"])[:2])
    names = _NUMPY_ABOVE_AVX2["2.4" if (major, minor) >= (2, 4) else "old"]
    return {**PINNED_ENV, NUMPY_VAR: names}


def pin_cpu_isa(environ: MutableMapping[str, str] = os.environ, machine: str | None = None) -> dict[str, str]:
    """Set :func:`pinned_env` in ``environ`` where unset (mode "avx2" on x86-64); returns what it set. In mode
    "native", drop what a pinned parent process set (:data:`PINNED_MARKER`), so the machine picks again.

    ``import dmllab`` calls it: an invalid ``DMLLAB_CPU_ISA`` does not stop the import; a one-line warning says
    that the kernels are pinned as for "avx2" (the command line refuses the value before any command,
    :func:`dmllab.validation.check_environment`; a library call that needs the mode raises the ValueError)."""
    pinned = pinned_env()
    try:
        mode = cpu_isa_mode(environ)
    except ValueError as err:
        import sys

        print(f"dmllab: warning: {err}; pinning the CPU kernels as for avx2", file=sys.stderr)
        mode = "avx2"
    if mode == "native":
        for key in filter(None, environ.pop(PINNED_MARKER, "").split(",")):
            if environ.get(key) == pinned.get(key):
                del environ[key]
        return {}
    if (machine or platform.machine()).lower() not in _X86:
        return {}
    added = {k: v for k, v in pinned.items() if k not in environ}
    environ.update(added)
    if added:
        environ[PINNED_MARKER] = ",".join(filter(None, [*environ.get(PINNED_MARKER, "").split(","), *added]))
    return added


def numpy_simd() -> str:
    """numpy's dispatch targets enabled in this process and found on the CPU (e.g. "X86_V3"), space-separated."""
    import numpy

    found = getattr(numpy.__config__, "CONFIG", {}).get("SIMD Extensions", {}).get("found", [])
    return " ".join(found)


def cpu_kernels() -> dict[str, str]:
    """This process's CPU kernels, for the provenance: ``cpu_isa`` (the mode), ``cpu_capability`` (ATen's) and
    ``numpy_simd`` (:func:`numpy_simd`)."""
    import torch

    return {
        "cpu_isa": cpu_isa_mode(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "numpy_simd": numpy_simd(),
    }


def late_pin_message() -> str | None:
    """Why this process's CPU numbers will differ from the pinned ones, or None: the pin asked for AVX2 but torch
    or numpy run wider kernels, because torch ran a CPU kernel or numpy was imported before ``import dmllab``."""
    import torch

    late = []
    if os.environ.get("ATEN_CPU_CAPABILITY") == PINNED_ENV["ATEN_CPU_CAPABILITY"]:
        cap = torch.backends.cpu.get_cpu_capability()
        if cap.startswith("AVX512"):
            late.append(f"torch's CPU kernels run {cap} (torch ran a CPU kernel before `import dmllab`)")
    if os.environ.get(NUMPY_VAR) == pinned_env()[NUMPY_VAR]:
        wide = [t for t in numpy_simd().split() if t in os.environ[NUMPY_VAR].split()]
        if wide:
            late.append(f"numpy runs {' '.join(wide)} loops (numpy was imported before `import dmllab`)")
    if not late:
        return None
    return (
        f"{'; '.join(late)}, not the AVX2 that dmllab pins (dmllab.numerics). This run's numbers will not match the "
        f"committed ones bit for bit; import dmllab first, or set {CPU_ISA_VAR}=native to say that you mean it."
    )


#: Written into the (pinned) cache folder by a dmllab that pins: :func:`stale_cache_message`.
CACHE_STAMP = "numerics.json"
# What the cache holds that its numerics decide: the generated images, the pre-trained weights, the feature caches.
_CACHE_BUILT = ("synthetic", "weights", "features")


def cpuinfo() -> dict[str, str] | None:
    """The first CPU's entries of ``/proc/cpuinfo`` ("model name", "cpu family", "flags", ...), or None where it
    cannot be read."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return None
    return info


def cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags (e.g. "avx2", "avx512f"; :func:`cpuinfo`), or None where they cannot be read."""
    info = cpuinfo()
    return frozenset(info["flags"].split()) if info and "flags" in info else None


def stale_cache_message(
    root: Path, runs: Path, *, flags: frozenset[str] | None = None, machine: str | None = None
) -> str | None:
    """Why the cache ``root`` may hold other numbers than a pinned dmllab builds, or None (stamping it).

    A dmllab older than the pin built its cache with the machine's own kernels. On an AVX2 CPU (or off x86-64)
    those are the pinned ones, but on an AVX-512 CPU its images, pre-trained SmallCNN and feature caches differ in
    the last bits, and so does every run trained on them. A cache folder that a dmllab with the pin makes carries
    :data:`CACHE_STAMP` (:func:`dmllab.paths.cache_dir`). One with built content but no stamp, on an x86-64 CPU
    whose ``flags`` (default :func:`cpu_flags`) include avx512f, gets the message, naming the run store ``runs``
    too, and stays unstamped until deleted; anywhere else it is stamped (its numbers are the pinned ones). A CPU
    whose flags cannot be read counts as AVX2. Mode "native" has a cache of its own: None.
    """
    if cpu_isa_mode() == "native":
        return None
    stamp = root / CACHE_STAMP
    if stamp.exists():
        return None
    flags = cpu_flags() if flags is None else flags
    x86 = (machine or platform.machine()).lower() in _X86
    built = [name for name in _CACHE_BUILT if (root / name).exists()]
    if built and x86 and flags is not None and "avx512f" in flags:
        return (
            f"the cache {root} holds {', '.join(built)} but no {CACHE_STAMP}: an older dmllab built it, which did "
            "not pin the CPU kernels, and this CPU has AVX-512, so its contents (and the runs trained on them) may "
            "differ from the committed numbers in the last bits (docs/reproducibility.md, 'The cache "
            f"stamp'). Delete {root} and the run store {runs} once; dmllab builds both again"
        )
    stamp_cache(root)
    return None


def stamp_cache(root: Path) -> None:
    """Write :data:`CACHE_STAMP` into ``root`` (made if missing): a dmllab that pins builds this cache.
    :func:`dmllab.paths.cache_dir` stamps every cache folder it makes."""
    mode = cpu_isa_mode()
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{CACHE_STAMP}.{os.getpid()}"
    tmp.write_text(
        json.dumps({"cpu_isa": mode, "pinned": pinned_env() if mode == "avx2" else {}}, indent=1) + "\n"
    )
    tmp.replace(root / CACHE_STAMP)
