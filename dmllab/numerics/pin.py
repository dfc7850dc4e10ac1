"""The pin itself: which variables ``import dmllab`` sets, and the CPU facts it reads (:mod:`dmllab.numerics`).

Every variable is read by its library once, when it initialises: numpy's two at ``import numpy`` (its dispatched
loops, and its OpenBLAS, which is loaded with it), ATen's and oneDNN's at torch's first CPU kernel of that kind,
MKL's at its first call (the first matrix product), not at ``import torch``. So the pin has to run before numpy is
imported; ``import torch`` imports numpy, so ``import dmllab`` has to come before ``import torch`` too
(:func:`dmllab.numerics.late_pin_message` says when it did not).
"""

from __future__ import annotations

import os
import platform
from collections.abc import MutableMapping
from importlib import metadata

CPU_ISA_VAR = "DMLLAB_CPU_ISA"
CPU_ISA_MODES = ("avx2", "native")
#: torch's kernels (ATen's vectorised ones, oneDNN's convolutions) capped at AVX2, and MKL's matrix products on its
#: COMPATIBLE branch (SSE2 without the approximate rcpps/rsqrtps), the one branch that Intel documents to give the
#: same results on Intel and non-Intel CPUs (the module docstring of :mod:`dmllab.numerics`).
PINNED_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_CBWR": "COMPATIBLE",
}
MKL_VAR = "MKL_CBWR"
NUMPY_VAR = "NPY_DISABLE_CPU_FEATURES"
# numpy's dispatch targets above AVX2, by the names of numpy >= 2.4 (x86-64 microarchitecture levels) and before.
_NUMPY_ABOVE_AVX2 = {
    "2.4": "X86_V4 AVX512_ICL AVX512_SPR",
    "old": "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR",
}
#: numpy's and scipy's OpenBLAS (built with DYNAMIC_ARCH) run the kernels of the core type named here instead of
#: the one they detect; forcing a core is not checked against the CPU, so it is set only where the CPU runs it.
OPENBLAS_VAR = "OPENBLAS_CORETYPE"
OPENBLAS_CORE = "Haswell"
_OPENBLAS_NEEDS = frozenset({"avx2", "fma"})
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


def is_x86(machine: str | None = None) -> bool:
    """Whether ``machine`` (default this one's, ``platform.machine()``) is x86-64."""
    return (machine or platform.machine()).lower() in _X86


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


def pinned_env(numpy_version: str | None = None, flags: frozenset[str] | None = None) -> dict[str, str]:
    """What the pin sets: :data:`PINNED_ENV`, numpy's dispatch targets above AVX2 named as the installed numpy
    (``numpy_version``, default read from its metadata without importing it) names them, and OpenBLAS's core type
    where the CPU's ``flags`` (default :func:`cpu_flags`) include AVX2 and FMA (unreadable flags: not set)."""
    if numpy_version is None:
        try:
            numpy_version = metadata.version("numpy")
        except metadata.PackageNotFoundError:
            numpy_version = "0"
    major, minor = (int(p) if p.isdigit() else 0 for p in (numpy_version.split(".") + ["0"])[:2])
    names = _NUMPY_ABOVE_AVX2["2.4" if (major, minor) >= (2, 4) else "old"]
    flags = cpu_flags() if flags is None else flags
    blas = {OPENBLAS_VAR: OPENBLAS_CORE} if flags is not None and _OPENBLAS_NEEDS <= flags else {}
    return {**PINNED_ENV, NUMPY_VAR: names, **blas}


def pin_cpu_isa(
    environ: MutableMapping[str, str] = os.environ,
    machine: str | None = None,
    flags: frozenset[str] | None = None,
) -> dict[str, str]:
    """Set :func:`pinned_env` (``flags`` passed on) in ``environ`` where unset (mode "avx2" on x86-64); returns
    what it set. In mode "native", drop what a pinned parent process set (:data:`PINNED_MARKER`), so the machine
    picks again.

    ``import dmllab`` calls it: an invalid ``DMLLAB_CPU_ISA`` does not stop the import; a one-line warning says
    that the kernels are pinned as for "avx2" (the command line refuses the value before any command,
    :func:`dmllab.validation.check_environment`; a library call that needs the mode raises the ValueError)."""
    pinned = pinned_env(flags=flags)
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
    if not is_x86(machine):
        return {}
    added = {k: v for k, v in pinned.items() if k not in environ}
    environ.update(added)
    if added:
        environ[PINNED_MARKER] = ",".join(filter(None, [*environ.get(PINNED_MARKER, "").split(","), *added]))
    return added
