"""dmllab.numerics: which variables the pin sets, and that a fresh process's torch runs the pinned kernels."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest
import torch

from dmllab import numerics, paths
from dmllab.numerics import (
    CACHE_STAMP,
    CPU_ISA_VAR,
    MKL_VAR,
    NUMPY_VAR,
    OPENBLAS_VAR,
    PINNED_ENV,
    PINNED_MARKER,
    cpu_isa_mode,
    cpu_kernels,
    late_pin_message,
    pin,
    pin_cpu_isa,
    pinned_env,
    stale_cache_message,
)

AVX2_FMA = frozenset({"avx2", "fma"})


def test_pin_sets_the_unset_variables_on_x86() -> None:
    env: dict[str, str] = {}
    assert pin_cpu_isa(env, machine="x86_64", flags=AVX2_FMA) == pinned_env(flags=AVX2_FMA)
    marker = "ATEN_CPU_CAPABILITY,ONEDNN_MAX_CPU_ISA,MKL_CBWR,NPY_DISABLE_CPU_FEATURES,OPENBLAS_CORETYPE"
    assert env == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_CBWR": "COMPATIBLE",
        NUMPY_VAR: pinned_env()[NUMPY_VAR],
        OPENBLAS_VAR: "Haswell",
        PINNED_MARKER: marker,
    }
    assert pin_cpu_isa(env, machine="x86_64", flags=AVX2_FMA) == {}  # idempotent


def test_openblas_is_pinned_only_where_the_cpu_runs_its_haswell_kernels(monkeypatch) -> None:
    assert pinned_env(flags=AVX2_FMA | {"avx512f"})[OPENBLAS_VAR] == "Haswell"
    for flags in (frozenset({"avx2"}), frozenset({"avx", "fma"}), frozenset()):
        assert OPENBLAS_VAR not in pinned_env(flags=flags)  # OpenBLAS would run Haswell code there and crash
    monkeypatch.setattr(pin, "cpu_flags", lambda: None)  # flags unreadable: not forced either
    assert OPENBLAS_VAR not in pinned_env()


def test_native_drops_what_a_pinned_parent_set_but_not_what_the_user_set() -> None:
    env = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
    pin_cpu_isa(env, machine="x86_64")  # the parent: sets all but oneDNN's
    child = {**env, CPU_ISA_VAR: "native"}
    assert pin_cpu_isa(child, machine="x86_64") == {}
    assert child == {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", CPU_ISA_VAR: "native"}


def test_a_variable_the_user_set_wins() -> None:
    env = {"ATEN_CPU_CAPABILITY": "avx512", NUMPY_VAR: "", MKL_VAR: "AVX2", OPENBLAS_VAR: "SkylakeX"}
    assert pin_cpu_isa(env, machine="AMD64", flags=AVX2_FMA) == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert env["ATEN_CPU_CAPABILITY"] == "avx512" and env[PINNED_MARKER] == "ONEDNN_MAX_CPU_ISA"
    assert (env[MKL_VAR], env[OPENBLAS_VAR]) == ("AVX2", "SkylakeX")


def test_numpy_names_its_targets_by_version() -> None:
    assert pinned_env("2.4.6")[NUMPY_VAR] == pinned_env("3.1")[NUMPY_VAR] == "X86_V4 AVX512_ICL AVX512_SPR"
    assert pinned_env("1.26.4")[NUMPY_VAR].split()[:2] == ["AVX512F", "AVX512CD"]
    assert {k: v for k, v in pinned_env("2.0", flags=frozenset()).items() if k != NUMPY_VAR} == PINNED_ENV


@pytest.mark.parametrize(
    ("env", "machine"), [({CPU_ISA_VAR: "native"}, "x86_64"), ({}, "aarch64"), ({}, "arm64")]
)
def test_native_mode_and_other_architectures_set_nothing(env: dict[str, str], machine: str) -> None:
    before = dict(env)
    assert pin_cpu_isa(env, machine=machine) == {}
    assert env == before


def test_an_unknown_mode_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="avx2, native"):
        cpu_isa_mode({CPU_ISA_VAR: "avx512"})
    assert cpu_isa_mode({CPU_ISA_VAR: " Native "}) == "native"
    assert cpu_isa_mode({}) == "avx2"


def test_native_mode_keeps_its_caches_and_runs_apart(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "r"))
    monkeypatch.delenv(CPU_ISA_VAR, raising=False)
    assert (paths.cache_dir(), paths.runs_dir()) == (tmp_path / "c", tmp_path / "r" / "runs")
    monkeypatch.setenv(CPU_ISA_VAR, "native")
    assert (paths.cache_dir(), paths.runs_dir()) == (
        tmp_path / "c" / "native",
        tmp_path / "r" / "runs-native",
    )


def _capability(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in (*pinned_env(), CPU_ISA_VAR, PINNED_MARKER)}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


CAPABILITY = "import torch; print(torch.backends.cpu.get_cpu_capability())"
NUMPY = "from dmllab.numerics import numpy_simd; print(numpy_simd())"


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="the pin applies to x86-64 only"
)
def test_import_dmllab_pins_a_fresh_process_and_native_leaves_it_to_the_machine() -> None:
    machine = _capability(CAPABILITY)
    if machine in ("DEFAULT", "AVX"):
        pytest.skip(f"this CPU runs no AVX2 kernels ({machine})")
    assert _capability("import dmllab; " + CAPABILITY) == "AVX2"
    assert _capability("import dmllab; " + CAPABILITY, **{CPU_ISA_VAR: "native"}) == machine
    wide = set(pinned_env()[NUMPY_VAR].split())
    assert not wide & set(_capability("import dmllab; " + NUMPY).split())
    numpy_machine = _capability("import numpy; import dmllab; " + NUMPY)  # numpy first: the machine's loops
    assert _capability("import dmllab; " + NUMPY, **{CPU_ISA_VAR: "native"}) == numpy_machine
    # a child started with DMLLAB_CPU_ISA=native by a pinned process picks the machine's kernels again
    spawn = (
        "import os, subprocess, sys; import dmllab; "
        f"os.environ['{CPU_ISA_VAR}'] = 'native'; "
        f"subprocess.run([sys.executable, '-c', 'import dmllab; {CAPABILITY}'], check=True)"
    )
    assert _capability(spawn) == machine


def test_the_provenance_names_the_kernels_and_a_late_pin_is_explained() -> None:
    k = cpu_kernels()
    assert (
        k["cpu_isa"] in ("avx2", "native") and k["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    )
    msg = late_pin_message()
    if os.environ.get("ATEN_CPU_CAPABILITY") == "avx2":
        assert msg is None and k["mkl_cbwr"] in ("COMPATIBLE", None)  # pinned in time (tests/conftest.py)
    code = "import torch; torch.ones(3).sum(); import dmllab.numerics as n; import dmllab; print(n.late_pin_message())"
    late = _capability(code)  # numpy came with torch, before dmllab: late too where the CPU has AVX-512
    if _capability(CAPABILITY).startswith("AVX512"):
        assert "torch's CPU kernels run AVX512" in late and "numpy runs" in late
    else:
        assert "torch's" not in late and "numpy runs" not in late
    assert "MKL" not in late  # MKL fixes its branch at its first call: no matrix product yet
    core = _capability("import numpy; import dmllab.numerics as n; print(n.openblas_cores())")  # unpinned
    if OPENBLAS_VAR in pinned_env() and core not in ("None", "Haswell"):
        assert f"numpy's OpenBLAS runs {core} kernels" in late
    product = "import torch; torch.ones(2, 3) @ torch.ones(3, 2); import dmllab.numerics as n; import dmllab"
    late = _capability(product + "; print(n.late_pin_message())")
    if _capability("import dmllab.numerics as n; print(n.mkl_branch())") != "None":  # torch with MKL
        assert "MKL runs its OFF branch (torch ran a matrix product before `import dmllab`)" in late


def test_a_cache_folder_that_dmllab_makes_is_stamped(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path / "c"))
    monkeypatch.delenv(CPU_ISA_VAR, raising=False)
    assert not (tmp_path / "c").exists()
    stamp = json.loads((paths.cache_dir() / CACHE_STAMP).read_text())
    assert stamp == {"cpu_isa": "avx2", "pinned": pinned_env()}
    monkeypatch.setenv(CPU_ISA_VAR, "native")
    assert json.loads((paths.cache_dir() / CACHE_STAMP).read_text()) == {"cpu_isa": "native", "pinned": {}}
    made = tmp_path / "made"  # a folder its user made empty: stamped too, so what is built there is not stale
    made.mkdir()
    monkeypatch.setenv("DMLLAB_CACHE", str(made))
    monkeypatch.delenv(CPU_ISA_VAR)
    (paths.cache_dir() / "weights").mkdir()
    assert stale_cache_message(made, tmp_path / "runs", machine="x86_64") is None


def test_a_cache_built_without_this_pin_is_stale_on_x86_only(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(CPU_ISA_VAR, raising=False)
    old, runs = tmp_path / "old", tmp_path / "runs"
    (old / "weights").mkdir(parents=True)  # what a dmllab older than the pin left: content, no stamp
    for _ in range(2):  # not stamped by the warning: it repeats until the cache is deleted
        msg = stale_cache_message(old, runs, machine="x86_64")
        assert msg is not None and str(old) in msg and str(runs) in msg and "weights" in msg
        assert "no numerics.json: an older dmllab built it" in msg
    assert not (old / CACHE_STAMP).exists()
    earlier = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", NUMPY_VAR: "AVX512F"}
    (old / CACHE_STAMP).write_text(json.dumps({"cpu_isa": "avx2", "pinned": earlier}))  # an earlier pin's
    msg = stale_cache_message(old, runs, machine="x86_64")
    assert msg is not None and "another CPU pin (MKL_CBWR unset" in msg and NUMPY_VAR not in msg
    assert json.loads((old / CACHE_STAMP).read_text())["pinned"] == earlier  # kept: the warning repeats
    monkeypatch.setenv(CPU_ISA_VAR, "native")  # native runs have a cache of their own
    assert stale_cache_message(old, runs, machine="x86_64") is None
    monkeypatch.delenv(CPU_ISA_VAR)
    assert stale_cache_message(old, runs, machine="aarch64") is None  # nothing pinned there: stamped anew
    assert json.loads((old / CACHE_STAMP).read_text())["pinned"] == pinned_env()
    assert stale_cache_message(old, runs, machine="x86_64") is None  # this pin's stamp
    empty = tmp_path / "empty"
    (empty / CACHE_STAMP).parent.mkdir()
    (empty / CACHE_STAMP).write_text(json.dumps({"cpu_isa": "avx2", "pinned": earlier}))
    assert stale_cache_message(empty, runs, machine="x86_64") is None  # nothing built yet: stamped anew
    assert json.loads((empty / CACHE_STAMP).read_text())["pinned"] == pinned_env()


def test_cpu_flags_reads_the_machine() -> None:
    flags = numerics.cpu_flags()
    if platform.system() == "Linux" and platform.machine().lower() in ("x86_64", "amd64"):
        assert flags is not None and "sse2" in flags
