"""sha256 hashes of a fixed set of CPU computations, one per library that the pin covers: a machine gives the
committed bits when it gives these hashes (:mod:`dmllab.numerics`).

The computations (one thread, inputs from numpy's PCG64, which no pinned variable touches): an MKL matrix product
(257 x 513 @ 513 x 129) and a ``Linear`` layer's forward and backward; a convolution's forward and backward
(oneDNN); ATen's element-wise ops and reductions; numpy's loops and its OpenBLAS products; and a few SGD and Adam
steps of the quick profile's SmallCNN (width 16, 56-pixel crops) with a proxy softmax head on a fixed batch.
``python -m dmllab.training.numerics_fingerprint --check tests/numerics_fingerprints.json`` computes them in a fresh process
whose environment holds no library variable but the pin's (:func:`controlled_env`) and compares them with the
committed record (tests/test_numerics_fingerprint.py does the same); ``--write PATH`` records them with the CPU,
the kernels that ran and the versions that computed them (after a torch, numpy or OpenBLAS upgrade).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmllab.fileio import write_text_atomic

#: Prefixes of the variables that the libraries of the pin read (threads, cache sizes, ISA): a controlled
#: environment has none but the pin's.
LIBRARY_VAR_PREFIXES = ("ATEN_", "ONEDNN_", "DNNL_", "MKL_", "OMP_", "KMP_", "NPY_", "OPENBLAS_", "GOTO_")


def _sha(array: Any) -> str:
    import numpy as np

    if hasattr(array, "detach"):
        array = array.detach().contiguous().numpy()
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _smallcnn_steps(randn) -> dict[str, Any]:
    """Three SGD (momentum) then three Adam steps of SmallCNN + linear head + normalised proxies, cross-entropy."""
    import torch
    import torch.nn.functional as F

    from dmllab.models.smallcnn import build_smallcnn

    torch.manual_seed(0)
    trunk = build_smallcnn(width=16)  # the quick profile's trunk, random init
    head = torch.nn.Linear(trunk.out_channels, 64)
    proxies = torch.nn.Parameter(randn(8, 64))
    images, labels = randn(32, 3, 56, 56), torch.arange(8).repeat_interleave(4)  # 8 classes x 4
    params = [*trunk.parameters(), *head.parameters(), proxies]
    losses = []
    for opt in (torch.optim.SGD(params, lr=0.05, momentum=0.9), torch.optim.Adam(params, lr=1e-3)):
        for _ in range(3):
            emb = head(trunk(images).mean(dim=(2, 3)))  # (B, 256) -> (B, 64)
            logits = 16.0 * F.normalize(emb, dim=1) @ F.normalize(proxies, dim=1).T  # (B, 8)
            loss = F.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
    return {
        "smallcnn_losses": torch.stack(losses),
        "smallcnn_params": torch.cat([p.detach().flatten() for p in params]),
        "smallcnn_bn_stats": torch.cat([b.flatten() for b in trunk.buffers() if b.is_floating_point()]),
    }


def fingerprints() -> dict[str, str]:
    """The hashes of the computations (module docstring), by name, computed in this process on one thread."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))

    out: dict[str, Any] = {}
    a, b = randn(257, 513), randn(513, 129)
    out["mkl_matmul"] = a @ b
    linear = torch.nn.Linear(513, 129)
    with torch.no_grad():
        linear.weight.copy_(randn(129, 513) * 0.05)
        linear.bias.copy_(randn(129) * 0.05)
    x = randn(64, 513).requires_grad_()
    y = linear(x)
    y.square().sum().backward()
    out |= {
        "mkl_linear_forward": y,
        "mkl_linear_weight_grad": linear.weight.grad,
        "mkl_linear_input_grad": x.grad,
    }
    conv = torch.nn.Conv2d(16, 32, kernel_size=3, padding=1)
    with torch.no_grad():
        conv.weight.copy_(randn(32, 16, 3, 3) * 0.1)
        conv.bias.copy_(randn(32) * 0.1)
    xc = randn(8, 16, 28, 28).requires_grad_()
    yc = conv(xc)
    yc.square().sum().backward()
    out |= {
        "onednn_conv_forward": yc,
        "onednn_conv_weight_grad": conv.weight.grad,
        "onednn_conv_input_grad": xc.grad,
    }
    z = randn(512, 1000)
    out["aten_softmax"] = torch.softmax(z, dim=1)
    out["aten_logsumexp"] = torch.logsumexp(z, dim=1)
    out["aten_sum"] = z.sum(dim=1)
    out["aten_exp_tanh"] = torch.exp(z[:, :100]) + torch.tanh(z[:, 100:200])
    out["aten_norm"] = torch.nn.functional.normalize(z, dim=1)
    a64, b64 = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    out["openblas_sgemm"] = a.numpy() @ b.numpy()
    out["openblas_dgemm"] = a64 @ b64
    out["numpy_logspace"] = np.logspace(-2, 2, 41)
    out["numpy_exp_log"] = np.exp(a64) + np.log(np.abs(a64) + 1.0)
    out["numpy_sin_f32"] = np.sin(a.numpy())
    out |= _smallcnn_steps(randn)
    return {name: _sha(value) for name, value in out.items()}


def controlled_env(
    base: Mapping[str, str] = os.environ, set_vars: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``base`` without ``DMLLAB_CPU_ISA``, the pin's marker and the libraries' variables
    (:data:`LIBRARY_VAR_PREFIXES`), so ``import dmllab`` pins; with ``set_vars``, ``DMLLAB_CPU_ISA=native`` and
    exactly ``set_vars`` instead (``import dmllab`` adds nothing)."""
    from dmllab.numerics.pin import CPU_ISA_VAR, PINNED_MARKER

    env = {
        k: v
        for k, v in base.items()
        if k not in (CPU_ISA_VAR, PINNED_MARKER) and not k.startswith(LIBRARY_VAR_PREFIXES)
    }
    if set_vars is not None:
        env |= {CPU_ISA_VAR: "native", **set_vars}
    return env


def run_fingerprints(env: Mapping[str, str]) -> dict[str, Any]:
    """:func:`record` of a fresh process with exactly ``env``.

    Raises:
        RuntimeError: the process failed; the message ends with its stderr.
    """
    cmd = [sys.executable, "-m", "dmllab.training.numerics_fingerprint"]
    out = subprocess.run(cmd, env=dict(env), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def versions() -> dict[str, str]:
    """The versions the hashes depend on: torch, numpy, and numpy's OpenBLAS."""
    import numpy
    import torch

    blas = numpy.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    return {"torch": torch.__version__, "numpy": numpy.__version__, "openblas": str(blas.get("version"))}


def record() -> dict[str, Any]:
    """What this process computes: ``hashes`` (:func:`fingerprints`), the ``kernels`` that ran
    (:func:`dmllab.numerics.cpu_kernels`), the ``versions`` (:func:`versions`) and the ``cpu``."""
    from dmllab.numerics.kernels import cpu_kernels
    from dmllab.numerics.pin import cpuinfo

    hashes = fingerprints()
    info = cpuinfo() or {}
    name, family, model = (info.get(k, "?") for k in ("model name", "cpu family", "model"))
    cpu = f"{name} (family {family} model {model})"
    return {"hashes": hashes, "kernels": cpu_kernels(), "versions": versions(), "cpu": cpu}


def compare(want: Mapping[str, str], got: Mapping[str, str]) -> list[str]:
    """The names whose hashes differ between two :func:`fingerprints` (or that only one has), sorted."""
    return sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dmllab.training.numerics_fingerprint", description=__doc__
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, help="record a fresh pinned process's hashes in this JSON file")
    group.add_argument(
        "--check", type=Path, help="compare a fresh pinned process's hashes with this JSON file"
    )
    args = parser.parse_args(argv)
    if args.check and not args.check.is_file():
        parser.error(f"{args.check}: no such file; record one with --write {args.check}")
    if not (args.write or args.check):  # the child of run_fingerprints: this process, as it was started
        print(json.dumps(record(), sort_keys=True))
        return 0
    now = run_fingerprints(controlled_env())
    if args.write:
        write_text_atomic(args.write, json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.write}")
        return 0
    want = json.loads(args.check.read_text())
    differ = compare(want["hashes"], now["hashes"])
    print(f"identical: {len(now['hashes'])} hashes" if not differ else f"differ: {' '.join(differ)}")
    for key in ("versions", "kernels", "cpu"):
        print(f"{key}: recorded {want.get(key)}; here {now[key]}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
