"""Which computation of the SmallCNN's training steps gives other bits on another CPU model, and which kernel
settings give the recorded steps (``smallcnn_*`` of ``tests/numerics_fingerprints.json``): the steps taken apart
into the operations they run, each hashed on its own, under a few settings, each in a fresh process.

The operations (one thread, batch 32, the quick SmallCNN of width 16 on 56-pixel crops, inputs from numpy's PCG64
as in :mod:`dmllab.training.numerics_fingerprint`): each of its six convolutions forward, backward to the input
(not for the first, whose input needs no gradient) and to the weights, with the oneDNN implementation that ran it
(oneDNN's verbose output); BatchNorm forward and backward at the first and last stage's shapes; the head's
``Linear`` forward and backward (MKL); the normalised-proxy logits and cross-entropy forward and backward; an SGD
(momentum) and an Adam update. ``smallcnn_steps`` is the fingerprint's composite itself: ``match`` if its three
hashes equal the record's.

Settings: ``pin`` (what ``import dmllab`` sets); ``pin_no_onednn`` (the same with
``torch.backends.mkldnn.enabled = False``: torch's own convolutions, im2col and MKL); one pinned variable changed
(``onednn_avx``: ``ONEDNN_MAX_CPU_ISA=AVX``, which leaves oneDNN no brgemm kernels; ``aten_default``:
``ATEN_CPU_CAPABILITY=default``; ``mkl_auto``: ``MKL_CBWR=AUTO``); ``mkl_intel``: the pin with MKL's Intel code
paths, reached by interposing MKL's vendor check as tests/test_numerics_fingerprint.py does (needs ``cc``;
skipped on an Intel CPU, which takes them anyway); ``native``: nothing pinned.

    .venv/bin/python benchmarks/numerics_ops.py                      # every setting: results/benchmarks/numerics_ops.csv
    .venv/bin/python benchmarks/numerics_ops.py --check results/benchmarks/numerics_ops.csv   # this CPU vs the CSV

``--check`` computes the ``pin`` setting here and names the operations whose hashes (or oneDNN implementations)
differ from the CSV's ``pin`` rows; exit 1 if any does.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import benchutil

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "numerics_fingerprints.json"
OUT = ROOT / "results" / "benchmarks" / "numerics_ops.csv"
FIELDS = ["setting", "op", "onednn", "sha256", "cpu", "caches", "kernels", "torch_version"]
# MKL's vendor check, exported by torch's x86-64 library; returning 1 makes MKL take its Intel code paths.
FAKE_INTEL = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
# (in channels, out channels, stride, input size) of the quick SmallCNN's convolutions (width 16, 56-pixel crops).
CONVS = [(3, 16, 2, 56), (16, 32, 2, 28), (32, 32, 1, 14), (32, 64, 2, 14), (64, 64, 1, 7), (64, 128, 1, 7)]
BATCH = 32


def _settings(pinned: dict[str, str]) -> dict[str, tuple[dict[str, str] | None, bool, bool]]:
    """name -> (the library variables, None for what ``import dmllab`` pins; oneDNN off; MKL's Intel paths)."""

    def changed(var: str, value: str) -> dict[str, str]:
        return {**pinned, var: value}

    return {
        "pin": (None, False, False),
        "pin_no_onednn": (None, True, False),
        "onednn_avx": (changed("ONEDNN_MAX_CPU_ISA", "AVX"), False, False),
        "aten_default": (changed("ATEN_CPU_CAPABILITY", "default"), False, False),
        "mkl_auto": (changed("MKL_CBWR", "AUTO"), False, False),
        "mkl_intel": (None, False, True),
        "native": ({}, False, False),
    }


def caches() -> str:
    """The first CPU's data and unified caches as Linux lists them (e.g. ``L1 48K, L2 1024K, L3 32768K (CPUs
    0-1)``): oneDNN sizes some of its blocks by them; empty where sysfs cannot be read."""
    out = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            kind, level, size = ((index / f).read_text().strip() for f in ("type", "level", "size"))
            shared = (index / "shared_cpu_list").read_text().strip()
        except OSError:
            continue
        if kind != "Instruction":
            out.append(f"L{level} {size}" + (f" (CPUs {shared})" if shared != "0" else ""))
    return ", ".join(out)


def _sha(t: Any) -> str:
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def _onednn_impls(fn: Callable[[], Any]) -> tuple[Any, str]:
    """``fn()`` and the oneDNN convolution implementations it ran ("impl:prop", distinct, in order), read from
    oneDNN's verbose output with this process's stdout sent to a file meanwhile."""
    import ctypes

    import torch

    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+") as log:
        os.dup2(log.fileno(), 1)
        try:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                out = fn()
            libc.fflush(None)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        lines = log.read().splitlines()
    impls = []
    for line in lines:
        f = line.split(",")
        if len(f) > 8 and f[2] == "primitive" and f[3] == "exec" and f[5] == "convolution":
            impls.append(f"{f[6]}:{f[7]}")
    return out, " ".join(dict.fromkeys(impls))


def _of(impls: str, prop: str) -> str:
    """The implementations of ``impls`` (:func:`_onednn_impls`) that ran ``prop``, e.g. "backward_data"."""
    return " ".join(i for i in impls.split() if i.endswith(f":{prop}"))


def operations() -> list[dict[str, str]]:
    """The hashed operations (module docstring) of this process, one thread: rows of op, onednn, sha256."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))

    rows: list[dict[str, str]] = []

    def add(op: str, t: Any, onednn: str = "") -> None:
        rows.append({"op": op, "onednn": onednn, "sha256": _sha(t)})

    for i, (cin, cout, stride, size) in enumerate(CONVS):
        x = randn(BATCH, cin, size, size).requires_grad_(i > 0)
        w = (randn(cout, cin, 3, 3) * (2.0 / (9 * cout)) ** 0.5).requires_grad_()
        y, fwd = _onednn_impls(lambda x=x, w=w, stride=stride: F.conv2d(x, w, stride=stride, padding=1))
        grad = randn(*y.shape)
        _, bwd = _onednn_impls(lambda y=y, grad=grad: y.backward(grad))
        name = f"conv{i}_{cin}to{cout}_s{stride}_{size}px"
        add(f"{name}_forward", y, fwd)
        if i > 0:
            add(f"{name}_input_grad", x.grad, _of(bwd, "backward_data"))
        add(f"{name}_weight_grad", w.grad, _of(bwd, "backward_weights"))
    for channels, size in ((16, 28), (128, 7)):
        x = randn(BATCH, channels, size, size).requires_grad_()
        weight, bias = torch.ones(channels, requires_grad=True), torch.zeros(channels, requires_grad=True)
        mean, var = torch.zeros(channels), torch.ones(channels)
        y = F.batch_norm(x, mean, var, weight, bias, training=True, momentum=0.1)
        y.backward(randn(*y.shape))
        name = f"batchnorm_{channels}c_{size}px"
        add(f"{name}_forward", y)
        add(f"{name}_running_var", var)
        add(f"{name}_input_grad", x.grad)
        add(f"{name}_weight_grad", weight.grad)
    feat = randn(BATCH, 128, 7, 7).requires_grad_()
    head = torch.nn.Linear(128, 64)
    with torch.no_grad():
        head.weight.copy_(randn(64, 128) * 0.1)
        head.bias.copy_(randn(64) * 0.1)
    proxies = randn(8, 64).requires_grad_()
    emb = head(feat.mean(dim=(2, 3)))  # (B, 128) -> (B, 64)
    logits = 16.0 * F.normalize(emb, dim=1) @ F.normalize(proxies, dim=1).T  # (B, 8)
    loss = F.cross_entropy(logits, torch.arange(8).repeat_interleave(4))
    loss.backward()
    add("head_linear_forward", emb)
    add("proxy_logits", logits)
    add("cross_entropy", loss)
    add("head_linear_weight_grad", head.weight.grad)
    add("proxy_grad", proxies.grad)
    add("pooled_input_grad", feat.grad)
    for name, opt_cls, kwargs in (
        ("sgd", torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
        ("adam", torch.optim.Adam, {"lr": 1e-3}),
    ):
        p = torch.nn.Parameter(randn(4096))
        opt = opt_cls([p], **kwargs)
        for _ in range(3):
            p.grad = randn(4096)
            opt.step()
        add(f"{name}_update", p)
    return rows


def child(no_onednn: bool) -> None:
    """This process's :func:`operations` and the fingerprint's SmallCNN steps, as a RESULT line."""
    import dmllab  # noqa: F401, I001  (the pin, before torch)
    import torch

    if no_onednn:
        torch.backends.mkldnn.enabled = False
    from dmllab.numerics import cpu_kernels
    from dmllab.training.numerics_fingerprint import fingerprints

    rows = operations()
    steps = {k: v for k, v in fingerprints().items() if k.startswith("smallcnn_")}
    print("RESULT " + json.dumps({"rows": rows, "steps": steps, "kernels": cpu_kernels()}), flush=True)


def _shim(folder: Path) -> Path | None:
    """A shared library whose MKL vendor check says Intel, or None without a C compiler."""
    if shutil.which("cc") is None:
        return None
    (folder / "fake.c").write_text(FAKE_INTEL)
    shim = folder / "libfakeintel.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(folder / "fake.c")], check=True)
    return shim


def measure(names: list[str]) -> list[dict[str, Any]]:
    """The rows of every setting in ``names``, each from a fresh process (skipped settings print why)."""
    from dmllab.numerics import cpuinfo, pinned_env
    from dmllab.training.numerics_fingerprint import controlled_env

    record = json.loads(RECORD.read_text())["hashes"]
    settings = _settings(pinned_env())
    cpu, rows = benchutil.machine(), []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            set_vars, no_onednn, intel = settings[name]
            env = controlled_env(set_vars=set_vars)
            if intel:
                if (cpuinfo() or {}).get("vendor_id") == "GenuineIntel":
                    print(f"{name}: skipped (an Intel CPU takes MKL's Intel paths as it is)", file=sys.stderr)
                    continue
                shim = _shim(Path(tmp))
                if shim is None:
                    print(f"{name}: skipped (no C compiler)", file=sys.stderr)
                    continue
                env["LD_PRELOAD"] = str(shim)
            cmd = [sys.executable, __file__, "--child", *(["--no-onednn"] if no_onednn else [])]
            out = subprocess.run(
                cmd,
                env={**env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
                capture_output=True,
                text=True,
            )
            if out.returncode != 0:
                raise RuntimeError(f"{name}: {' '.join(cmd)} failed: {out.stderr[-2000:]}")
            got = benchutil.child_result(out.stdout)
            kernels = " ".join(f"{k}={v}" for k, v in sorted(got["kernels"].items()))
            same = all(record.get(k) == v for k, v in got["steps"].items())
            common = {"setting": name, "cpu": cpu, "caches": caches(), "kernels": kernels}
            common["torch_version"] = _torch_version()
            rows += [{**common, **r} for r in got["rows"]]
            rows.append(
                {**common, "op": "smallcnn_steps", "onednn": "", "sha256": "match" if same else "differ"}
            )
            print(f"{name}: SmallCNN steps {'match' if same else 'differ from'} the record", file=sys.stderr)
    return rows


def _torch_version() -> str:
    from importlib import metadata

    return metadata.version("torch")


def check(path: Path) -> int:
    """Compare this CPU's ``pin`` rows with ``path``'s; print the operations that differ; 1 if any does."""
    with path.open() as fh:
        want = {r["op"]: r for r in csv.DictReader(fh) if r["setting"] == "pin"}
    got = {r["op"]: r for r in measure(["pin"])}
    differ = [
        op
        for op in want
        if (want[op]["sha256"], want[op]["onednn"])
        != (got.get(op, {}).get("sha256"), got.get(op, {}).get("onednn"))
    ]
    first = next(iter(want.values()))
    print(f"recorded on {first['cpu']} ({first['caches']}); here {benchutil.machine()} ({caches()})")
    for op in differ:
        w, g = want[op], got.get(op, {})
        print(
            f"differ: {op}: {w['sha256']} ({w['onednn'] or '-'}) recorded, {g.get('sha256')} ({g.get('onednn') or '-'}) here"
        )
    print(f"{len(want) - len(differ)} of {len(want)} operations identical")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--no-onednn", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--check", type=Path, help="compare this CPU's pinned operations with this CSV")
    parser.add_argument("--settings", default=",".join(_settings({})), help="comma-separated (default: all)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.child:
        child(args.no_onednn)
        return 0
    if args.check:
        return check(args.check)
    names = [s for s in args.settings.split(",") if s]
    unknown = sorted(set(names) - set(_settings({})))
    if unknown:
        parser.error(f"unknown settings {unknown}; valid: {', '.join(_settings({}))}")
    print(f"wrote {benchutil.write_csv(args.out, measure(names), FIELDS)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
