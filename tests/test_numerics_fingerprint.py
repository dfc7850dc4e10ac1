"""The pin gives the committed bits (tests/numerics_fingerprints.json), and each pinned variable bites: unset, the
library it pins computes other bits on a CPU where it has a wider path (dmllab.training.numerics_fingerprint).

Regenerate the record after a torch, numpy or OpenBLAS upgrade, on a machine whose numbers are the reference:
``python -m dmllab.training.numerics_fingerprint --write tests/numerics_fingerprints.json``.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from dmllab.numerics import (
    MKL_VAR,
    NUMPY_VAR,
    OPENBLAS_CORE,
    OPENBLAS_VAR,
    cpu_flags,
    cpuinfo,
    is_x86,
    pinned_env,
)
from dmllab.training.numerics_fingerprint import compare, controlled_env, run_fingerprints

RECORD = Path(__file__).with_name("numerics_fingerprints.json")
REGENERATE = f"python -m dmllab.training.numerics_fingerprint --write {RECORD.relative_to(RECORD.parents[1])}"
# Which computations each pinned variable's library does (the prefix of their names in the record).
LIBRARY = {
    "ATEN_CPU_CAPABILITY": "aten_",
    "ONEDNN_MAX_CPU_ISA": "onednn_",
    MKL_VAR: "mkl_",
    NUMPY_VAR: "numpy_",
    OPENBLAS_VAR: "openblas_",
}
AVX512_CORE = {"avx512f", "avx512bw", "avx512vl", "avx512dq"}  # oneDNN's avx512_core

pytestmark = pytest.mark.skipif(not is_x86(), reason="the pin applies to x86-64 only")


@pytest.fixture(scope="module")
def pinned() -> dict[str, Any]:
    return run_fingerprints(controlled_env())  # a fresh process: `import dmllab` pins


#: The composite computation: the SmallCNN's six training steps. Its bits hold on the recorded CPU model only
#: (docs/reproducibility.md): on an Intel Xeon (family 6 model 167) every pinned kernel gives the recorded bits and
#: these steps do not, and each other kernel setting tried changes them on the recorded CPU too.
COMPOSITE = "smallcnn_"


def _checked_record(pinned: dict[str, Any]) -> dict[str, Any]:
    record = json.loads(RECORD.read_text())
    if pinned["versions"] != record["versions"]:
        pytest.skip(
            f"recorded with {record['versions']}, this environment has {pinned['versions']}: {REGENERATE}"
        )
    kernels = pinned["kernels"]
    assert kernels["cpu_capability"] in ("AVX2", "DEFAULT") and kernels["mkl_cbwr"] in ("COMPATIBLE", None)
    if OPENBLAS_VAR in pinned_env():
        assert kernels["openblas_core"] == OPENBLAS_CORE
    return record


def _differ(record: dict[str, Any], pinned: dict[str, Any], composite: bool) -> list[str]:
    want = {k: v for k, v in record["hashes"].items() if k.startswith(COMPOSITE) == composite}
    got = {k: v for k, v in pinned["hashes"].items() if k.startswith(COMPOSITE) == composite}
    return compare(want, got)


def test_the_pinned_kernels_give_the_committed_bits_on_every_x86_cpu(pinned: dict[str, Any]) -> None:
    record = _checked_record(pinned)
    differ = _differ(record, pinned, composite=False)
    assert not differ, (
        f"{differ} differ from the record (recorded on {record['cpu']} with kernels {record['kernels']}; "
        f"here {pinned['cpu']}, kernels {pinned['kernels']})"
    )


def test_the_smallcnn_steps_give_the_committed_bits_on_the_recorded_cpu(pinned: dict[str, Any]) -> None:
    record = _checked_record(pinned)
    if pinned["cpu"] != record["cpu"]:
        pytest.skip(
            f"the SmallCNN's training bits are recorded on {record['cpu']} and hold on that CPU model only; "
            f"here {pinned['cpu']} (docs/reproducibility.md); the operations that differ here: "
            "python benchmarks/numerics_ops.py --check results/benchmarks/numerics_ops.csv"
        )
    differ = _differ(record, pinned, composite=True)
    assert not differ, f"{differ} differ from the record made on this CPU model ({record['cpu']})"


def _wider_path(var: str, unpinned: dict[str, str], flags: frozenset[str]) -> str | None:
    """Why the library of ``var`` takes no wider path on this CPU without it (a skip reason), or None."""
    if var == "ATEN_CPU_CAPABILITY" and not unpinned["cpu_capability"].startswith("AVX512"):
        return f"ATen runs {unpinned['cpu_capability']} kernels here unpinned: this CPU has no wider ones"
    if var == "ONEDNN_MAX_CPU_ISA" and not AVX512_CORE <= flags:
        return f"this CPU lacks {' '.join(sorted(AVX512_CORE - flags))}: oneDNN has no path above AVX2 here"
    if var == MKL_VAR and unpinned["mkl_cbwr"] is None:
        return "this torch has no MKL (or does not export MKL's branch query)"
    if var == MKL_VAR and "avx" not in flags:
        return "this CPU lacks AVX: MKL has no path above SSE here"
    if var == NUMPY_VAR and not set(unpinned["numpy_simd"].split()) & set(pinned_env()[NUMPY_VAR].split()):
        return f"numpy runs {unpinned['numpy_simd']} loops here unpinned: none above AVX2"
    if var == OPENBLAS_VAR and unpinned["openblas_core"] in (None, OPENBLAS_CORE):
        return f"numpy's OpenBLAS picks {unpinned['openblas_core']} kernels on this CPU by itself"
    return None


@pytest.mark.parametrize("var", sorted(LIBRARY))
def test_each_pinned_variable_changes_its_librarys_bits_when_unset(var: str, pinned: dict[str, Any]) -> None:
    flags = cpu_flags()
    env = pinned_env()
    if var not in env:
        pytest.skip(f"{var} is not pinned on this CPU (it lacks AVX2 or FMA, or its flags cannot be read)")
    unset = run_fingerprints(controlled_env(set_vars={k: v for k, v in env.items() if k != var}))
    reason = _wider_path(var, unset["kernels"], flags or frozenset())
    if reason:
        pytest.skip(reason)
    changed = compare(pinned["hashes"], unset["hashes"])
    assert [k for k in changed if k.startswith(LIBRARY[var])], (
        f"without {var} ({unset['kernels']}) the {LIBRARY[var]}* computations give the pinned bits; changed: {changed}"
    )


# MKL's vendor check, which torch's x86-64 library exports; returning 1 makes MKL take its Intel code paths.
FAKE_INTEL = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"


def test_mkl_on_an_intel_cpu_emulated_gives_the_committed_bits(pinned: dict[str, Any], tmp_path) -> None:
    """MKL picks its code by vendor: on a non-Intel CPU it runs its own branch whatever MKL_ENABLE_INSTRUCTIONS or
    MKL_CBWR=AVX2 say, so such a CPU cannot show MKL's Intel paths directly. Interposing MKL's vendor check makes
    it take them here: pinned (COMPATIBLE) they give this CPU's bits; unset (MKL's AVX-512 path) or with MKL's AVX2
    branch, which Intel offers for reproducibility among Intel CPUs, other ones."""
    if (cpuinfo() or {}).get("vendor_id") == "GenuineIntel":
        pytest.skip("an Intel CPU: the other tests see MKL's Intel paths themselves")
    lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        ctypes.CDLL(str(lib)).mkl_serv_intel_cpu_true  # noqa: B018
    except (OSError, AttributeError):
        pytest.skip(f"{lib.name} does not export MKL's vendor check mkl_serv_intel_cpu_true")
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the interposed vendor check")
    (tmp_path / "fake.c").write_text(FAKE_INTEL)
    shim = tmp_path / "libfakeintel.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(tmp_path / "fake.c")], check=True)
    others = {k: v for k, v in pinned_env().items() if k != MKL_VAR}

    def intel(set_vars: dict[str, str] | None) -> dict[str, Any]:
        return run_fingerprints({**controlled_env(set_vars=set_vars), "LD_PRELOAD": str(shim)})

    avx2 = intel({**others, MKL_VAR: "AVX2"})
    if avx2["kernels"]["mkl_cbwr"] != "AVX2":  # a non-Intel CPU gets AUTO: the interposition did not take
        pytest.skip(f"the interposed vendor check did not take (MKL's branch: {avx2['kernels']['mkl_cbwr']})")
    assert compare(pinned["hashes"], intel(None)["hashes"]) == []  # `import dmllab` pins: MKL COMPATIBLE
    for name, other in (("MKL's AVX2 branch", avx2), ("MKL unpinned", intel(others))):
        changed = compare(pinned["hashes"], other["hashes"])
        assert [k for k in changed if k.startswith("mkl_")], f"{name} on the emulated Intel CPU: {changed}"
