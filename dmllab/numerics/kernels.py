"""Which CPU kernels this process runs, for the provenance, and why they are not the pinned ones when the pin came
too late (:mod:`dmllab.numerics`)."""

from __future__ import annotations

import os
from pathlib import Path

from dmllab.numerics.pin import (
    CPU_ISA_VAR,
    MKL_VAR,
    NUMPY_VAR,
    OPENBLAS_CORE,
    OPENBLAS_VAR,
    PINNED_ENV,
    cpu_isa_mode,
    pinned_env,
)

# MKL's CNR branch codes (oneMKL's named constants MKL_CBWR_*): "OFF" is no CNR mode, the CPU's own dispatch.
_MKL_BRANCHES = {
    1: "OFF",
    2: "AUTO",
    3: "COMPATIBLE",
    4: "SSE2",
    8: "SSE4_2",
    9: "AVX",
    10: "AVX2",
    12: "AVX512",
    14: "AVX512_E1",
}
_TORCH_CPU_LIBS = ("libtorch_cpu.so", "torch_cpu.dll", "libtorch_cpu.dylib")


def numpy_simd() -> str:
    """numpy's dispatch targets enabled in this process and found on the CPU (e.g. "X86_V3"), space-separated."""
    import numpy

    found = getattr(numpy.__config__, "CONFIG", {}).get("SIMD Extensions", {}).get("found", [])
    return " ".join(found)


def mkl_branch() -> str | None:
    """The CNR branch of the MKL inside torch in this process ("COMPATIBLE" pinned, "OFF": MKL dispatches by CPU),
    or None where torch has no MKL or its library does not export MKL's query (``mkl_serv_cbwr_get``, which
    torch's x86-64 wheels export). MKL fixes its branch at its first call, from ``MKL_CBWR``; this call counts."""
    import ctypes

    import torch

    if not torch.backends.mkl.is_available():
        return None
    lib_dir = Path(torch.__file__).parent / "lib"
    path = next((lib_dir / n for n in _TORCH_CPU_LIBS if (lib_dir / n).is_file()), None)
    try:
        query = ctypes.CDLL(str(path)).mkl_serv_cbwr_get if path else None
    except (OSError, AttributeError):
        return None
    if query is None:
        return None
    query.restype, query.argtypes = ctypes.c_int, [ctypes.c_int]
    code = query(1)  # MKL_CBWR_BRANCH: which branch
    return _MKL_BRANCHES.get(code, str(code))


def openblas_cores() -> str | None:
    """The core types (e.g. "Haswell") whose kernels the OpenBLAS libraries loaded in this process run (numpy's,
    and scipy's once imported), space-separated, or None where threadpoolctl cannot tell."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    cores = {i.get("architecture") for i in threadpool_info() if i.get("internal_api") == "openblas"}
    return " ".join(sorted(c for c in cores if c)) or None


def cpu_kernels() -> dict[str, str | None]:
    """This process's CPU kernels, for the provenance: ``cpu_isa`` (the mode), ``cpu_capability`` (ATen's),
    ``numpy_simd`` (:func:`numpy_simd`), ``mkl_cbwr`` (:func:`mkl_branch`) and ``openblas_core``
    (:func:`openblas_cores`)."""
    import torch

    return {
        "cpu_isa": cpu_isa_mode(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "numpy_simd": numpy_simd(),
        "mkl_cbwr": mkl_branch(),
        "openblas_core": openblas_cores(),
    }


def late_pin_message() -> str | None:
    """Why this process's CPU numbers will differ from the pinned ones, or None: the pin asked for a kernel that
    torch, MKL, numpy or its OpenBLAS do not run, because they had started before ``import dmllab`` (torch ran a
    CPU kernel or a matrix product; numpy was imported, which ``import torch`` does). oneDNN cannot be asked."""
    import torch

    late = []
    env = os.environ
    if env.get("ATEN_CPU_CAPABILITY") == PINNED_ENV["ATEN_CPU_CAPABILITY"]:
        cap = torch.backends.cpu.get_cpu_capability()
        if cap.startswith("AVX512"):
            late.append(f"torch's CPU kernels run {cap} (torch ran a CPU kernel before `import dmllab`)")
    if env.get(MKL_VAR) == PINNED_ENV[MKL_VAR]:
        branch = mkl_branch()
        if branch not in (None, PINNED_ENV[MKL_VAR]):
            late.append(f"MKL runs its {branch} branch (torch ran a matrix product before `import dmllab`)")
    if env.get(NUMPY_VAR) == pinned_env()[NUMPY_VAR]:
        wide = [t for t in numpy_simd().split() if t in env[NUMPY_VAR].split()]
        if wide:
            late.append(f"numpy runs {' '.join(wide)} loops (numpy was imported before `import dmllab`)")
    if env.get(OPENBLAS_VAR) == OPENBLAS_CORE:
        other = [c for c in (openblas_cores() or "").split() if c != OPENBLAS_CORE]
        if other:
            late.append(
                f"numpy's OpenBLAS runs {' '.join(other)} kernels (numpy was imported before `import dmllab`, or "
                "by `import torch`)"
            )
    if not late:
        return None
    return (
        f"{'; '.join(late)}, not what dmllab pins (dmllab.numerics). This run's numbers will not match the "
        f"committed ones bit for bit; import dmllab first, or set {CPU_ISA_VAR}=native to say that you mean it."
    )
