"""The same float32 bits on every x86-64 CPU, Intel or AMD: every library that picks its CPU kernels by the machine
is pinned to one path (dmllab choice).

What picks kernels by the machine, and what :func:`pin_cpu_isa` (run by ``import dmllab``) sets where the user has
not set it (:func:`pinned_env`):

* torch's ATen vectorised kernels (element-wise ops, reductions): ``ATEN_CPU_CAPABILITY=avx2``;
* oneDNN, torch's convolutions: ``ONEDNN_MAX_CPU_ISA=AVX2`` (an upper bound on the ISA it generates code for);
* MKL, torch's matrix products (``Linear``, ``@``): ``MKL_CBWR=COMPATIBLE``. MKL picks its code by vendor as well
  as by ISA: on AMD CPUs it runs its own branch whatever ``MKL_ENABLE_INSTRUCTIONS`` or ``MKL_CBWR=AVX2`` say, and
  Intel documents every branch other than AUTO and COMPATIBLE as available on Intel processors only, a requested
  AVX2 branch falling back to AUTO on other CPUs ("may cause results to differ"). COMPATIBLE, SSE2 without the
  approximate rcpps/rsqrtps instructions whose results differ between vendors, is the branch for identical results
  on Intel and Intel-compatible CPUs (oneMKL Developer Guide for Linux, "Getting Started with Conditional Numerical
  Reproducibility" and "Specifying Code Branches":
  https://www.intel.com/content/www/us/en/docs/onemkl/developer-guide-linux/2025-1/get-started-with-conditional-num-reproducibility.html,
  https://www.intel.com/content/www/us/en/docs/onemkl/developer-guide-linux/2024-2/specifying-code-branches.html;
  docs/reproducibility.md has the measurements);
* numpy's dispatched loops: ``NPY_DISABLE_CPU_FEATURES`` (its targets above AVX2);
* numpy's and scipy's OpenBLAS (``DYNAMIC_ARCH``: matrix products, scikit-learn's k-means and t-SNE):
  ``OPENBLAS_CORETYPE=Haswell``, its AVX2 kernels with fixed blocking, where the CPU has AVX2 and FMA.

So the quick study on a fresh machine reproduces the committed result CSVs bit for bit (with the same thread
count: :func:`dmllab.training.store.provenance`). Each library reads its variable once, when it initialises
(:mod:`dmllab.numerics.pin`): numpy's at ``import numpy``, which ``import torch`` does, so ``import dmllab`` comes
first; the CLI, the study's workers and the notebooks do that. A run warns when it came too late
(:func:`late_pin_message`). ``DMLLAB_CPU_ISA=native`` leaves the choice to the machine (faster; its numbers are
not comparable bit for bit with the committed ones). A variable the user set wins. No effect off x86-64 or on a
GPU. :mod:`dmllab.training.numerics_fingerprint` hashes a fixed set of computations, the check that a machine gives
the committed bits (it runs the SmallCNN, so it stands above the components, not here).
"""

from __future__ import annotations

from dmllab.numerics.cache import CACHE_STAMP, claim_cache, stale_cache_message, stamp_cache
from dmllab.numerics.kernels import cpu_kernels, late_pin_message, mkl_branch, numpy_simd, openblas_cores
from dmllab.numerics.pin import (
    CPU_ISA_MODES,
    CPU_ISA_VAR,
    MKL_VAR,
    NUMPY_VAR,
    OPENBLAS_CORE,
    OPENBLAS_VAR,
    PINNED_ENV,
    PINNED_MARKER,
    cpu_flags,
    cpu_isa_mode,
    cpuinfo,
    is_x86,
    pin_cpu_isa,
    pinned_env,
)

__all__ = [
    "CACHE_STAMP",
    "CPU_ISA_MODES",
    "CPU_ISA_VAR",
    "MKL_VAR",
    "NUMPY_VAR",
    "OPENBLAS_CORE",
    "OPENBLAS_VAR",
    "PINNED_ENV",
    "PINNED_MARKER",
    "claim_cache",
    "cpu_flags",
    "cpu_isa_mode",
    "cpu_kernels",
    "cpuinfo",
    "is_x86",
    "late_pin_message",
    "mkl_branch",
    "numpy_simd",
    "openblas_cores",
    "pin_cpu_isa",
    "pinned_env",
    "stale_cache_message",
    "stamp_cache",
]
