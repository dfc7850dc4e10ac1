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
    NUMPY_VAR,
    PINNED_ENV,
    PINNED_MARKER,
    cpu_isa_mode,
    cpu_kernels,
    late_pin_message,
    pin_cpu_isa,
    pinned_env,
    stale_cache_message,
)


def test_pin_sets_the_unset_variables_on_x86() -> None:
    env: dict[str, str] = {}
    assert pin_cpu_isa(env, machine="x86_64") == pinned_env()
    marker = "ATEN_CPU_CAPABILITY,ONEDNN_MAX_CPU_ISA,NPY_DISABLE_CPU_FEATURES"
    assert env == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        NUMPY_VAR: pinned_env()[NUMPY_VAR],
        PINNED_MARKER: marker,
    }
    assert pin_cpu_isa(env, machine="x86_64") == {}  # idempotent


def test_native_drops_what_a_pinned_parent_set_but_not_what_the_user_set() -> None:
    env = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
    pin_cpu_isa(env, machine="x86_64")  # the parent: sets ATen's and numpy's only
    child = {**env, CPU_ISA_VAR: "native"}
    assert pin_cpu_isa(child, machine="x86_64") == {}
    assert child == {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", CPU_ISA_VAR: "native"}


def test_a_variable_the_user_set_wins() -> None:
    env = {"ATEN_CPU_CAPABILITY": "avx512", NUMPY_VAR: ""}
    assert pin_cpu_isa(env, machine="AMD64") == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert env["ATEN_CPU_CAPABILITY"] == "avx512" and env[PINNED_MARKER] == "ONEDNN_MAX_CPU_ISA"


def test_numpy_names_its_targets_by_version() -> None:
    assert pinned_env("2.4.6")[NUMPY_VAR] == pinned_env("3.1")[NUMPY_VAR] == "X86_V4 AVX512_ICL AVX512_SPR"
    assert pinned_env("1.26.4")[NUMPY_VAR].split()[:2] == ["AVX512F", "AVX512CD"]
    assert {k: v for k, v in pinned_env("2.0").items() if k != NUMPY_VAR} == PINNED_ENV


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
        assert msg is None  # this test process was pinned in time (tests/conftest.py)
    code = "import torch; torch.ones(3).sum(); import dmllab.numerics as n; import dmllab; print(n.late_pin_message())"
    late = _capability(code)  # numpy came with torch, before dmllab: late too where the CPU has AVX-512
    if _capability(CAPABILITY).startswith("AVX512"):
        assert "torch's CPU kernels run AVX512" in late and "numpy runs" in late
    else:
        assert late == "None"


def test_a_cache_folder_that_dmllab_makes_is_stamped(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("DMLLAB_CACHE", str(tmp_path / "c"))
    monkeypatch.delenv(CPU_ISA_VAR, raising=False)
    assert not (tmp_path / "c").exists()
    stamp = json.loads((paths.cache_dir() / CACHE_STAMP).read_text())
    assert stamp == {"cpu_isa": "avx2", "pinned": pinned_env()}
    monkeypatch.setenv(CPU_ISA_VAR, "native")
    assert json.loads((paths.cache_dir() / CACHE_STAMP).read_text()) == {"cpu_isa": "native", "pinned": {}}


AVX512 = frozenset({"avx2", "avx512f"})


def test_an_unstamped_cache_with_content_is_stale_on_an_avx512_cpu_only(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(CPU_ISA_VAR, raising=False)
    old, runs = tmp_path / "old", tmp_path / "runs"
    (old / "weights").mkdir(parents=True)  # what an older dmllab left: content, no stamp
    for _ in range(2):  # not stamped by the warning: it repeats until the cache is deleted
        msg = stale_cache_message(old, runs, flags=AVX512, machine="x86_64")
        assert (
            msg is not None and str(old) in msg and str(runs) in msg and "AVX-512" in msg and "weights" in msg
        )
    assert not (old / CACHE_STAMP).exists()
    monkeypatch.setenv(CPU_ISA_VAR, "native")  # native runs have a cache of their own
    assert stale_cache_message(old, runs, flags=AVX512, machine="x86_64") is None
    monkeypatch.delenv(CPU_ISA_VAR)
    # elsewhere (AVX2, off x86-64, flags unreadable) its numbers are the pinned ones: stamped, then quiet
    monkeypatch.setattr(numerics, "cpu_flags", lambda: None)  # /proc/cpuinfo unreadable: counts as AVX2
    for flags, machine in ((frozenset({"avx2"}), "x86_64"), (AVX512, "aarch64"), (None, "x86_64")):
        (old / CACHE_STAMP).unlink(missing_ok=True)
        assert stale_cache_message(old, runs, flags=flags, machine=machine) is None
        assert (old / CACHE_STAMP).exists()
    assert stale_cache_message(old, runs, flags=AVX512, machine="x86_64") is None
    empty = tmp_path / "empty"
    empty.mkdir()  # nothing built yet: stamped
    assert stale_cache_message(empty, runs, flags=AVX512, machine="x86_64") is None
    assert (empty / CACHE_STAMP).exists()


def test_cpu_flags_reads_the_machine() -> None:
    flags = numerics.cpu_flags()
    if platform.system() == "Linux" and platform.machine().lower() in ("x86_64", "amd64"):
        assert flags is not None and "sse2" in flags
