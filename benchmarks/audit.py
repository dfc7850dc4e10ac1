"""Reliability audit: several hundred generated cases of bad input, each run under a timeout, one outcome per case.

Classes (the reliability audit's): ``degenerate embeddings`` (scale, collapse, ties, no positive), ``integrity`` (what
the run store and the caches read back), ``values`` (config, notebook parameters, environment, command line, API
constructors), ``locks``, ``file errors`` (full disk, damaged files: every error names its file) and ``api
tracebacks`` (inputs through the public API); and at the trust boundaries (benchmarks/audit_boundaries.py):
``security`` (hostile archives and ROOTs of ``data fetch``), ``index files`` (image paths, duplicates, boxes),
``downloads`` (slow, stalled and failing downloads, concurrent and killed fetches) and ``bounds`` (worker counts,
the notebooks' parameter ranges); and the third audit's: ``links`` (a link planted at every path a study or a run
writes), ``check before replace`` (a good CSV replaced by one the reader refuses, parameters that would write one),
``tampered inputs`` (edited notebooks, run records, divergence records, seeds), ``plausibility`` (values no metric
takes, merged or unparsable rows, intervals of no width), ``input bounds`` (sizes, FIFOs, devices, pipes) and
``messages`` (missing columns, codecs, folders, long values). The cases are generated from grids of values and damage kinds, not only the
inputs first reported.

Outcomes: ``correct answer`` (the right value, or the right repair: a damaged entry set aside and rebuilt),
``named error`` (a one-line error of the library's types whose message names what the case requires: the key, the
file, ...), ``unhelpful error`` (an error of the library's types that lacks it), ``silent wrong`` (a wrong value,
or a bad value accepted), ``traceback`` (an exception of another type: a crash), ``hang`` (no answer within the
case's timeout; the worker is killed and restarted), ``breach`` (a file written outside the folder it belongs in, or
through a link), ``data loss`` (a good file replaced by one dmllab refuses).

Every case runs in a worker process (one dmllab import, restarted after a hang) with DMLLAB_CACHE / DMLLAB_RESULTS /
DMLLAB_FIGURES in a scratch folder. A full disk is a real one where a small tmpfs can be mounted (root), else the
writes are made to fail with ENOSPC. Rows go to results/reliability/audit.csv (class, case, outcome, detail, seconds).

    python benchmarks/audit.py                 # every case (under a minute on 2 idle cores)
    python benchmarks/audit.py --only locks    # one class
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import errno
import json
import math
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from audit_kit import (
    BREACH,
    CLASSES,
    CORRECT,
    DATALOSS,
    DEFAULT_OUT,
    EXPECTED_TYPES,
    HANG,
    NAMED,
    OUTCOMES,
    REPO,
    TRACE,
    UNHELPFUL,
    WRONG,
    Case,
    Ctx,
    _clustered,
    _enospc,
    _fake_run,
    _layouts,
    _smoke_cfg,
    _tiny_fs,
    _unmount,
    cli,
    expect_error,
    expect_value,
    stderr_capture,
)


# ------------------------------------------------------------------------------------ degenerate embeddings
def degenerate_cases() -> list[Case]:
    cases = []

    def scale_case(dtype_name: str, exponent: int | None, decimal: float | None):
        def run(ctx):
            import numpy as np

            from dmllab.metrics import evaluate

            dtype = np.float32 if dtype_name == "float32" else np.float64
            x, y = _clustered(abs(exponent or 7), n=90)
            e = exponent if exponent is not None else int(round(math.log2(decimal)))
            tiniest = -149 if dtype_name == "float32" else -1074  # the smallest subnormal's exponent
            grid = 2.0 ** max(-3, tiniest - e + 1)  # coordinates on a grid the scaled dtype holds exactly
            x = np.round(x.astype(np.float64) / grid) * grid
            scaled = (np.ldexp(x, exponent) if exponent is not None else x * decimal).astype(dtype)
            back = np.ldexp(scaled.astype(np.float64), -e)  # what the scaled input holds, exactly rescaled
            want = evaluate(back, y, metrics=("recall", "nmi", "mlrc"), ks=(1, 2, 4, 8))

            def check(got, caught):
                if any("no query has a positive" in w for w in caught):
                    return "false no-positive warning"
                return got == want or f"expected {want}"

            return expect_value(
                lambda: evaluate(scaled, y, metrics=("recall", "nmi", "mlrc"), ks=(1, 2, 4, 8)), check
            )

        label = f"2^{exponent}" if exponent is not None else f"{decimal:g}"
        return Case("degenerate embeddings", f"scale {label} {dtype_name}", run)

    for e in range(-148, 125, 17):
        cases.append(scale_case("float32", e, None))
    for e in (-1070, -1060, -1040, -1000, -700, -300, 300, 700, 1000, 1020):
        cases.append(scale_case("float64", e, None))
    for s in (1e-44, 1e-41, 1e-39, 1e-36, 1e-20, 1e20, 1e30, 1e37):
        cases.append(scale_case("float32", None, s))
    for s in (1e-320, 1e-310, 1e-300, 1e-160, 1e160, 1e300, 1e307):
        cases.append(scale_case("float64", None, s))

    def collapsed_case(n: int, value: float, dtype_name: str, noise: float, distance: str):
        def run(ctx):
            import numpy as np

            from dmllab.metrics import evaluate

            rng = np.random.default_rng(n)
            dtype = np.float32 if dtype_name == "float32" else np.float64
            x = np.full((n, 6), value, dtype=np.float64)
            if distance == "cosine":
                x[:, 0] = value if value else 1.0
            x = (x * (1 + noise * rng.normal(size=x.shape))).astype(dtype)
            y = np.arange(n) % 5
            return expect_error(lambda: evaluate(x, y, distance=distance), "collapsed")

        return Case(
            "degenerate embeddings",
            f"collapsed n={n} value={value:g} {dtype_name} noise={noise:g} {distance}",
            run,
        )

    for n in (2, 10, 60):
        for value in (0.0, 1.0, -7.5, 1e-35, 1e35):
            for dtype_name in ("float32", "float64"):
                cases.append(collapsed_case(n, value, dtype_name, 0.0, "euclidean"))
    for noise in (1e-9, 1e-7):
        for distance in ("euclidean", "cosine"):
            cases.append(collapsed_case(40, 3.0, "float32", noise, distance))

    def allowed_case(seed: int, distance: str):
        def run(ctx):
            import numpy as np

            from dmllab.metrics import retrieval_metrics

            rng = np.random.default_rng(seed)
            n = int(rng.integers(10, 80))
            y = rng.integers(0, int(rng.integers(2, 6)), n)
            x = np.tile(rng.normal(size=(1, 5)), (n, 1)).astype(np.float32)
            results = []
            for order in (np.arange(n), np.argsort(y, kind="stable"), rng.permutation(n)):
                results.append(
                    retrieval_metrics(
                        x[order], y[order], ks=(1, 4), mlrc=True, distance=distance, allow_collapsed=True
                    )
                )
            neg = np.array([(y != c).sum() for c in y])
            pos = np.array([(y == c).sum() - 1 for c in y])
            want = {k: float(((neg < k) & (pos > 0)).sum() / n) for k in (1, 4)}

            def check(res, caught):
                if any(r != res[0] for r in res[1:]):
                    return "depends on the order"
                return res[0].recall == want or f"expected {want}"

            return expect_value(lambda: results, check)

        return Case("degenerate embeddings", f"collapsed allowed, order-free, seed {seed} {distance}", run)

    for seed in range(6):
        for distance in ("euclidean", "cosine"):
            cases.append(allowed_case(seed, distance))

    def tie_case(seed: int, mlrc: bool):
        def run(ctx):
            import numpy as np

            from dmllab.metrics import retrieval_metrics

            rng = np.random.default_rng(seed)
            n = int(rng.integers(30, 200))
            x = rng.integers(0, int(rng.integers(2, 4)), size=(n, int(rng.integers(1, 4)))).astype(np.float32)
            y = rng.integers(0, int(rng.integers(2, 9)), n)
            base = retrieval_metrics(x, y, ks=(1, 2, 5), mlrc=mlrc)
            others = [
                retrieval_metrics(x[p], y[p], ks=(1, 2, 5), mlrc=mlrc, chunk_size=13)
                for p in (rng.permutation(n), rng.permutation(n), np.arange(n)[::-1])
            ]
            return expect_value(lambda: others, lambda v, c: all(o == base for o in v) or "order-dependent")

        return Case("degenerate embeddings", f"ties order-free seed {seed} mlrc={mlrc}", run)

    for seed in range(8):
        for mlrc in (False, True):
            cases.append(tie_case(seed, mlrc))

    def nopos_case(kind: str, mlrc: bool, distance: str):
        def run(ctx):
            import numpy as np

            from dmllab.metrics import retrieval_metrics

            x, y = _clustered(3, n=40)
            kw: dict = {}
            if kind == "singletons":
                y = np.arange(40)
            elif kind == "label maps":
                kw = dict(gallery=x, gallery_labels=y + 100)
            else:
                kw = dict(gallery=x[:10], gallery_labels=np.full(10, 555))

            def check(res, caught):
                if not any("no query has a positive" in w for w in caught):
                    return "no warning"
                vals = list(res.recall.values()) + ([res.map_at_r, res.precision_at_1] if mlrc else [])
                return all(math.isnan(v) for v in vals) or "not NaN"

            return expect_value(
                lambda: retrieval_metrics(x, y, ks=(1, 4), mlrc=mlrc, distance=distance, **kw), check
            )

        return Case("degenerate embeddings", f"no positive ({kind}) mlrc={mlrc} {distance}", run)

    for kind in ("singletons", "label maps", "foreign gallery"):
        for mlrc in (False, True):
            for distance in ("euclidean", "cosine"):
                cases.append(nopos_case(kind, mlrc, distance))

    def nmi_single(n: int):
        def run(ctx):
            import numpy as np

            from dmllab.metrics import nmi

            x = np.random.default_rng(n).normal(size=(n, 4))
            return expect_value(
                lambda: nmi(x, np.zeros(n, dtype=int)),
                lambda v, c: (
                    (math.isnan(v) and any("single class" in w for w in c)) or "not NaN with a warning"
                ),
            )

        return Case("degenerate embeddings", f"NMI of a single class, n={n}", run)

    cases += [nmi_single(n) for n in (1, 2, 30)]

    def trainer_collapse(value: float):
        def run(ctx):
            import torch

            from dmllab.training.evaluation import check_embeddings

            return expect_error(
                lambda: check_embeddings(torch.full((50, 8), value), "test"), "collapsed", "test"
            )

        return Case("degenerate embeddings", f"trainer refuses collapsed embeddings ({value:g})", run)

    cases += [trainer_collapse(v) for v in (0.0, 0.3, -1e4)]
    return cases


# ------------------------------------------------------------------------------------------ api tracebacks
def api_cases() -> list[Case]:
    cases = []

    def evaluate_case(name: str, needle: str, mutate: Callable):
        def run(ctx):
            from dmllab.metrics import evaluate

            x, y = _clustered(4, n=30)
            args = dict(embeddings=x, labels=y)
            mutate(args)
            return expect_error(lambda: evaluate(args.pop("embeddings"), args.pop("labels"), **args), needle)

        return Case("api tracebacks", f"evaluate: {name}", run)

    import numpy as np

    grid = [
        (
            "string labels",
            "labels must hold numbers",
            lambda a: a.update(labels=np.array(["x", "y", "z"] * 10)),
        ),
        ("list of str labels", "labels must hold numbers", lambda a: a.update(labels=["bird"] * 30)),
        ("object labels", "labels must hold numbers", lambda a: a.update(labels=np.array([None] * 30))),
        ("float labels", "integers", lambda a: a.update(labels=np.linspace(0, 1, 30))),
        ("bool labels", "integers", lambda a: a.update(labels=np.ones(30, dtype=bool))),
        ("2-D labels", "1-D", lambda a: a.update(labels=np.zeros((30, 2), dtype=int))),
        ("short labels", "different lengths", lambda a: a.update(labels=np.zeros(29, dtype=int))),
        ("ks int", "ks", lambda a: a.update(ks=4)),
        ("ks numpy int", "ks", lambda a: a.update(ks=np.int64(2))),
        ("ks string", "ks", lambda a: a.update(ks="1,2,4")),
        ("ks zero", "positive integer", lambda a: a.update(ks=(0, 1))),
        ("ks float", "positive integer", lambda a: a.update(ks=(1.0, 2))),
        ("ks None", "ks", lambda a: a.update(ks=None)),
        ("(N, 0) embeddings", "0 dimensions", lambda a: a.update(embeddings=np.zeros((30, 0)))),
        (
            "(0, D) embeddings",
            "empty",
            lambda a: a.update(embeddings=np.zeros((0, 4)), labels=np.zeros(0, dtype=int)),
        ),
        ("1-D embeddings", "2-D", lambda a: a.update(embeddings=np.zeros(30))),
        ("3-D embeddings", "2-D", lambda a: a.update(embeddings=np.zeros((30, 2, 2)))),
        ("int embeddings", "floating point", lambda a: a.update(embeddings=np.ones((30, 3), dtype=int))),
        ("string embeddings", "embeddings must be", lambda a: a.update(embeddings="abc")),
        ("None embeddings", "embeddings must be", lambda a: a.update(embeddings=None)),
        ("ragged embeddings", "embeddings must be", lambda a: a.update(embeddings=[[1.0, 2.0], [1.0]] * 15)),
        ("NaN row", "NaN or inf", lambda a: a["embeddings"].__setitem__((3, 1), np.nan)),
        ("inf row", "NaN or inf", lambda a: a["embeddings"].__setitem__((5, 0), np.inf)),
        ("metric name typo", "valid", lambda a: a.update(metrics=("recal",))),
        ("metric not a name", "metrics must be names", lambda a: a.update(metrics=(1,))),
        ("distance typo", "valid", lambda a: a.update(distance="l2")),
        ("chunk size zero", "chunk_size", lambda a: a.update(chunk_size=0)),
        ("chunk size float", "chunk_size", lambda a: a.update(chunk_size=10.5)),
        ("dtype float16", "dtype", lambda a: a.update(dtype=__import__("torch").float16)),
        ("matmul typo", "matmul", lambda a: a.update(matmul="blas")),
        ("gallery without labels", "without", lambda a: a.update(gallery=a["embeddings"])),
        (
            "gallery dim",
            "dim",
            lambda a: a.update(gallery=np.zeros((5, 3)), gallery_labels=np.zeros(5, dtype=int)),
        ),
        ("nmi seed negative", "seed", lambda a: a.update(metrics=("nmi",), nmi_seed=-1)),
        ("nmi average typo", "valid", lambda a: a.update(metrics=("nmi",), nmi_average="harmonic")),
        ("allow_collapsed string", "allow_collapsed", lambda a: a.update(allow_collapsed="yes")),
    ]
    cases += [evaluate_case(n, needle, m) for n, needle, m in grid]

    def root_case(dataset: str, root: object):
        def run(ctx):
            from dmllab.data import build_dataset

            split = {"inshop": "query"}.get(dataset, "test")
            return expect_error(lambda: build_dataset(dataset, root, split), "root")

        return Case("api tracebacks", f"{dataset} root {type(root).__name__} {root!r}", run)

    for dataset in ("cub", "cars", "sop", "inshop", "synthetic"):
        for root in (5, 2.5, ["a"], b"bytes"):
            cases.append(root_case(dataset, root))

    def synthetic_kw(name: str, value: object):
        def run(ctx):
            from dmllab.data import SyntheticFineGrained

            return expect_error(
                lambda: SyntheticFineGrained(ctx.folder(), "train", progress=False, **{name: value}), name
            )

        return Case("api tracebacks", f"synthetic {name}={value!r}", run)

    for name, value in (
        ("seed", -1),
        ("image_size", 4),
        ("num_classes", 7),
        ("num_classes", 3.0),
        ("images_per_class", (10, 5)),
        ("images_per_class", 0),
        ("num_pretrain_classes", 0),
    ):
        cases.append(synthetic_kw(name, value))
    return cases


# -------------------------------------------------------------------------------------------------- values
def value_cases() -> list[Case]:
    cases = []

    def override(item: str, *needles: str, method: str = "proxynca++"):
        """``--set`` of ``item`` (``;`` between several) refused before any training: the overrides, then every
        component built at a toy size (:func:`dmllab.training.build.check`, what the trainer calls first)."""

        def run(ctx):
            from dmllab.training import apply_overrides, build, presets

            cfg = presets.get(method, "synthetic", "smoke")
            return expect_error(lambda: build.check(apply_overrides(cfg, item.split(";"))), *needles)

        return Case("values", f"--set {item} ({method})", run)

    def names(item: str) -> tuple[str, ...]:
        """What a helpful refusal of ``item`` names: a section field's key, or a component's path and keyword
        (``loss.temperature`` -> ``loss``, ``temperature``)."""
        key = item.split(";")[-1].split("=")[0]
        for path in (
            "data.sampler",
            "data.dataset",
            "model.pooling",
            "model.backbone",
            "callbacks.heating",
            "loss",
        ):
            if key.startswith(path + "."):
                return path, key[len(path) + 1 :]
        return (key,)

    bad = [
        "optim.lr=-0.1",
        "optim.lr=nan",
        "optim.lr=inf",
        "optim.lr_proxies=-400",
        "optim.lr_proxies=nan",
        "optim.lr_embedding=-1e-3",
        "optim.eps=0",
        "optim.eps=-1",
        "optim.weight_decay=-0.1",
        "optim.grad_clip_value=0",
        "optim.grad_clip_value=-10",
        "data.sampler.per_class=0",
        "data.sampler.per_class=-4",
        "data.sampler.per_class=3",
        "data.batch_size=0",
        "data.batch_size=-32",
        "data.eval_batch_size=0",
        "data.num_workers=-1",
        "data.feature_views=-1",
        "model.embedding_dim=0",
        "model.embedding_dim=-16",
        "model.pooling=kmax;model.pooling.k=0",
        "model.frozen_blocks=-1",
        "schedule.epochs=0",
        "schedule.epochs=-5",
        "schedule.warmup_epochs=-1",
        "schedule.patience=-1",
        "schedule.factor=0",
        "schedule.factor=1.5",
        "schedule.factor=nan",
        "schedule.stage2_drop_lag=-2",
        "run.seed=-1",
        "run.eval_every=0",
        "run.ks=0",
        "run.ks=1,-2",
        "loss.temperature=0",
        "loss.temperature=-0.1",
        "loss.temperature=nan",
        "loss.temperature=inf",
    ]
    for item in bad:
        cases.append(override(item, *names(item)))
    pa = ["loss.delta=nan", "loss.delta=-0.1", "loss.alpha=0", "loss.alpha=-32", "loss.alpha=inf"]
    cases += [override(item, *names(item), method="proxy_anchor") for item in pa]
    ps = ["loss.alpha=0", "loss.mu=-1", "loss.lam=1.5", "loss.lam=-0.2"]
    cases += [override(item, *names(item), method="proxy_synthesis:normsoftmax") for item in ps]
    modes = [
        ("schedule.milestones=3", "proxynca++", "does nothing"),
        ("schedule.step_size=5", "proxynca++", "does nothing"),
        ("schedule.gamma=0.3", "proxynca++", "does nothing"),
        ("optim.momentum=0.9", "proxynca++", "does nothing"),
        ("schedule.patience=2", "proxy_anchor", "does nothing"),
        ("data.feature_views=4", "proxynca++", "does nothing"),
        # a component's keyword that its component does not take (Proxy Synthesis's without it)
        ("loss.alpha=0.8", "proxynca++", "takes no keyword 'alpha'"),
        ("loss.mu=0.5", "proxynca++", "takes no keyword 'mu'"),
        ("loss.wraps.alpha=1.0", "proxynca++", "loss.wraps.alpha"),
        ("callbacks.heating.lr_factor=0.5", "proxynca++", "epoch"),
        ("callbacks.heating.epoch=1", "proxynca++", "alpha"),  # a loss without a scale to heat
    ]
    cases += [override(item, needle, method=m) for item, m, needle in modes]

    def good(items: list[str], method: str = "proxynca++"):
        def run(ctx):
            from dmllab.training import apply_overrides, build, presets

            cfg = presets.get(method, "synthetic", "smoke")
            return expect_value(lambda: build.check(apply_overrides(cfg, items)), lambda v, c: True)

        return Case("values", f"accepted: {' '.join(items)} ({method})", run)

    cases += [
        good(["optim.lr_proxies=400"]),
        good(["optim.lr=0"]),
        good(["data.sampler=random"]),
        good(["schedule.scheduler=multistep", "schedule.milestones=1,1"]),
        good(["data.feature_views=0"]),
        good(["loss.alpha=0.8", "loss.wraps.temperature=0.05"], method="proxy_synthesis:normsoftmax"),
        good(["schedule.scheduler=step", "schedule.step_size=3", "schedule.gamma=0.5"]),
        good(["optim.name=sgd", "optim.momentum=0.9"]),
        good(["loss.pairing=sorted"], method="proxy_synthesis:normsoftmax"),
    ]

    def param(name: str, value: object):
        def run(ctx):
            from dmllab.validation import check_parameter

            return expect_error(lambda: check_parameter(name, value), f"parameter {name}")

        return Case("values", f"notebook parameter {name}={value!r}", run)

    params = [
        ("seeds", []),
        ("seeds", [-1]),
        ("seeds", [0, 1.5]),
        ("seeds", "0,1"),
        ("epochs", 0),
        ("epochs", [1, 0]),
        ("epochs", -3),
        ("proxy_lrs", [4.0, -1.0]),
        ("proxy_lrs", []),
        ("temperatures", [float("nan")]),
        ("temperatures", [0.0]),
        ("lambdas", [1.2]),
        ("lambdas", [-0.1]),
        ("static_lambdas", [2]),
        ("deltas", [-0.1]),
        ("mus", [float("inf")]),
        ("dims", [0]),
        ("batch_sizes", [16, -8]),
        ("k", 0),
        ("ks", [0, 1]),
        ("grid", "yes"),
        ("inception", 1),
        ("mlrc_folds", -1),
        ("mlrc_repetitions", 0),
        ("perplexity", 0.0),
        ("alpha", float("nan")),
        ("train_missing", "maybe"),
        ("random_weight", float("nan")),
    ]
    cases += [param(n, v) for n, v in params]

    def param_ok(name: str, value: object):
        def run(ctx):
            from dmllab.validation import check_parameter

            return expect_value(lambda: check_parameter(name, value), lambda v, c: True)

        return Case("values", f"notebook parameter accepted {name}={value!r}", run)

    cases += [
        param_ok(n, v)
        for n, v in (
            ("seeds", [0, 1, 2]),
            ("epochs", None),
            ("lambdas", [0.0, 1.0]),
            ("deltas", [0.0, 0.1]),
            ("k", 4),
        )
    ]

    def env(var: str, value: str):
        def run(ctx):
            from dmllab.validation import check_environment

            return expect_error(lambda: check_environment({**os.environ, var: value}), var)

        return Case("values", f"environment {var}={value!r}", run)

    cases += [env("DMLLAB_CPU_ISA", v) for v in ("avx512", "AVX3", "", "native2")]
    cases += [env(v, "") for v in ("DMLLAB_CACHE", "DMLLAB_RESULTS", "DMLLAB_FIGURES")]

    def env_process(value: str, command: str):
        def run(ctx):
            e = {**os.environ, "DMLLAB_CPU_ISA": value}
            args = (
                [sys.executable, "-c", "import dmllab"]
                if command == "import"
                else [sys.executable, "-m", "dmllab.cli", "presets"]
            )
            out = subprocess.run(args, env=e, capture_output=True, text=True, timeout=100)
            if "Traceback" in out.stderr:
                return TRACE, out.stderr.strip().splitlines()[-1]
            if command == "import":
                ok = out.returncode == 0 and "DMLLAB_CPU_ISA" in out.stderr
                return (CORRECT if ok else WRONG), out.stderr.strip()[:160]
            last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
            if out.returncode == 0:
                return WRONG, "exit 0"
            return (NAMED if last.startswith("dmllab: error: DMLLAB_CPU_ISA") else UNHELPFUL), last[:160]

        return Case("values", f"DMLLAB_CPU_ISA={value!r} at {command}", run)

    cases += [env_process(v, c) for v in ("avx1024", "x") for c in ("import", "cli")]

    train = ["train", "--method", "proxynca++", "--dataset", "synthetic", "--profile", "smoke", "--quiet"]
    cli_cases = [
        (["--mlrc-folds", "3"], "--protocol mlrc"),
        (["--mlrc-lr", "1e-6"], "--protocol mlrc"),
        (["--mlrc-run-folds", "0"], "--protocol mlrc"),
        (["--mlrc-dim", "64"], "--protocol mlrc"),
        (["--protocol", "mlrc", "--mlrc-folds", "1"], "--mlrc-folds"),
        (["--protocol", "mlrc", "--mlrc-repetitions", "0"], "--mlrc-repetitions"),
        (["--protocol", "mlrc", "--mlrc-per-class", "0"], "--mlrc-per-class"),
        (["--protocol", "mlrc", "--mlrc-batch-size", "30"], "multiple"),
        (["--protocol", "mlrc", "--mlrc-lr", "-1e-6"], "--mlrc-lr"),
        (["--protocol", "mlrc", "--mlrc-run-folds", "a,b"], "--mlrc-run-folds"),
        (["--seed", "-3"], "run.seed"),
        (["--set", "optim.lr_proxies=-1"], "optim.lr_proxies"),
        (["--set", "data.sampler.per_class=0"], "per_class"),
        (["--set", "nonsense"], "key=value"),
        (["--set", "loss.alpha=2"], "takes no keyword 'alpha'"),
    ]
    for argv, needle in cli_cases:
        cases.append(
            Case("values", f"dmllab train {' '.join(argv)}", lambda ctx, a=argv, n=needle: cli(train + a, n))
        )
    for argv, needle in (
        (["--shorter-side", "0"], "--shorter-side"),
        (["--quality", "101"], "--quality"),
        (["--quality", "0"], "--quality"),
        (["--workers", "0"], "--workers"),
    ):
        cases.append(
            Case(
                "values",
                f"dmllab data cache {' '.join(argv)}",
                lambda ctx, a=argv, n=needle: cli(["data", "cache", "cub", str(ctx.folder())] + a, n),
            )
        )
    cases.append(
        Case("values", "dmllab pretrain --width 0", lambda ctx: cli(["pretrain", "--width", "0"], "--width"))
    )

    def loss_case(cls: str, name: str, value: object):
        def run(ctx):
            import dmllab.losses as L

            return expect_error(lambda: getattr(L, cls)(10, 8, **{name: value}), name)

        return Case("values", f"{cls}({name}={value!r})", run)

    loss_grid = {
        "ProxyAnchorLoss": ("alpha", "delta"),
        "ProxyNCALoss": ("temperature",),
        "NormSoftmaxLoss": ("temperature",),
        "SoftTripleLoss": ("scale", "gamma", "margin", "tau"),
        "HeatedSoftmaxLoss": ("alpha",),
        "VirtualSoftmaxLoss": ("clip",),
    }
    for cls, names in loss_grid.items():
        for name in names:
            for value in (float("nan"), float("inf"), -1.0, "0.1"):
                if name in ("margin",) and value == -1.0:
                    continue  # any finite margin is allowed
                cases.append(loss_case(cls, name, value))
    return cases


# ----------------------------------------------------------------------------------------------- integrity
def integrity_cases() -> list[Case]:
    cases = []

    def store_damage(kind: str, damage: Callable[[Path], None]):
        def run(ctx):
            cfg, store = _fake_run(ctx)
            d = store.run_dir(cfg, 0)
            damage(d)
            with stderr_capture() as err:
                loaded = store.load(cfg, 0)
            if loaded is not None:
                return WRONG, f"loaded: {loaded.metrics}"
            said = err.getvalue()
            aside = [p.name for p in d.parent.iterdir() if p.name.startswith("corrupt-")]
            if not aside or str(d) not in said:
                return UNHELPFUL, f"warning {said.strip()[:120]!r}, set aside {aside}"
            return CORRECT, said.strip()[:160]

        return Case("integrity", f"run store: {kind}", run)

    def edit(name: str, f: Callable[[str], str]):
        return lambda d: (d / name).write_text(f((d / name).read_text()))

    kinds = {
        "empty metrics.json": edit("metrics.json", lambda t: ""),
        "metrics.json cut": edit("metrics.json", lambda t: t[: len(t) // 3]),
        "metrics.json a list": edit("metrics.json", lambda t: "[1, 2]"),
        "metrics.json lacks keys": edit("metrics.json", lambda t: '{"metrics": {}}'),
        "metrics.json value edited": edit("metrics.json", lambda t: t.replace("0.5", "0.9")),
        "config.json edited": edit("config.json", lambda t: t.replace('"epochs": 2', '"epochs": 20')),
        "config.json garbage": edit("config.json", lambda t: "not json"),
        "config.json another section": edit("config.json", lambda t: t.replace('"optim"', '"optimizer"')),
        "history.csv edited": edit("history.csv", lambda t: t + "9,9\n"),
        "provenance.json edited": edit("provenance.json", lambda t: t.replace("cpu", "cuda")),
        "checksums.json garbage": edit("checksums.json", lambda t: "{"),
        "checksums.json another key": edit(
            "checksums.json", lambda t: t.replace('"run_key": "', '"run_key": "x')
        ),
        "config.json removed": lambda d: (d / "config.json").unlink(),
        "legacy run, config edited": lambda d: (
            (d / "checksums.json").unlink(),
            edit("config.json", lambda t: t.replace('"embedding_dim": ', '"embedding_dim": 1'))(d),
        ),
        "metrics.json of another seed": edit("metrics.json", lambda t: t.replace('"seed": 0', '"seed": 4')),
    }
    cases += [store_damage(k, f) for k, f in kinds.items()]

    def copied_run(ctx):
        from dmllab.training.store import CorruptRunError, verify_run_dir

        cfg, store = _fake_run(ctx)
        d = store.run_dir(cfg, 0)
        other = d.parent.parent / "feedfacecafebeef" / "seed0"
        shutil.copytree(d, other)
        return expect_error(lambda: verify_run_dir(other), "feedfacecafebeef", types=(CorruptRunError,))

    cases.append(Case("integrity", "run store: a run copied under another key", copied_run))

    def evaluate_damaged(ctx):
        cfg, store = _fake_run(ctx)
        d = store.run_dir(cfg, 0)
        edit("config.json", lambda t: t.replace('"embedding_dim": ', '"embedding_dim": 2'))(d)
        return cli(["evaluate", str(d)], "config.json")

    cases.append(Case("integrity", "dmllab evaluate on a hand-edited config.json", evaluate_damaged))

    def plan_with_damage(ctx):
        cfg, store = _fake_run(ctx)
        (store.run_dir(cfg, 0) / "metrics.json").write_text("")
        from dmllab.training.store import run as train

        calls = []
        import dmllab.training.store as store_mod

        original = store_mod.run_protocol
        store_mod.run_protocol = lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(KeyboardInterrupt)
        try:
            with stderr_capture():
                train(cfg, seed=0, store=store, progress=False)
        except KeyboardInterrupt:
            pass
        finally:
            store_mod.run_protocol = original
        return (CORRECT, "the damaged run is trained again") if calls else (WRONG, "not retrained")

    cases.append(Case("integrity", "a damaged run is trained again, not a stop", plan_with_damage))

    def synthetic_damage(kind: str):
        def run(ctx):
            import numpy as np

            from dmllab.data import SyntheticFineGrained

            root = ctx.folder()
            kw = dict(num_classes=24, images_per_class=10, image_size=32, progress=False)
            good = SyntheticFineGrained(root, "train", **kw).images.copy()
            folder = next(p for p in root.iterdir() if p.name.startswith("main-"))
            f = folder / "images.npy"
            if kind == "zeroed in place":
                a = np.load(f, mmap_mode="r+")
                a[:] = 0
                a.flush()
                del a
            elif kind == "one byte flipped":
                raw = bytearray(f.read_bytes())
                raw[-7] ^= 0x40
                f.write_bytes(bytes(raw))
            elif kind == "truncated":
                f.write_bytes(f.read_bytes()[:1000])
            elif kind == "header garbage":
                f.write_bytes(b"garbage" + f.read_bytes()[7:])
            elif kind == "meta.json garbage":
                (folder / "meta.json").write_text("{")
            elif kind == "boxes removed":
                (folder / "boxes.npy").unlink()
            elif kind == "class ids shuffled":
                ids = np.load(folder / "class_ids.npy")
                np.save(folder / "class_ids.npy", ids[::-1].copy())
            with stderr_capture():
                again = SyntheticFineGrained(root, "train", **kw).images
            return (
                (CORRECT, "rebuilt")
                if np.array_equal(again, good)
                else (WRONG, "trained on the damaged copy")
            )

        return Case("integrity", f"generated benchmark: {kind}", run)

    for kind in (
        "zeroed in place",
        "one byte flipped",
        "truncated",
        "header garbage",
        "meta.json garbage",
        "boxes removed",
        "class ids shuffled",
    ):
        cases.append(synthetic_damage(kind))

    def feature_damage(kind: str):
        def run(ctx):
            import numpy as np
            import torch

            from dmllab.data import SyntheticFineGrained
            from dmllab.data.tensor import FeatureCache

            ds = SyntheticFineGrained(
                ctx.folder(), "train", num_classes=24, images_per_class=10, image_size=32, progress=False
            )

            def prefix(x):
                return torch.nn.functional.avg_pool2d(x, 4)

            root = ctx.folder()
            first = FeatureCache(prefix, "w", ds, "smoke", train=False, root=root)
            good = first.features.clone()
            f = first.folder / "features.npy"
            del first
            if kind == "zeroed":
                a = np.load(f, mmap_mode="r+")
                a[:] = 0
                a.flush()
                del a
            else:
                f.write_bytes(f.read_bytes()[:200])
            with stderr_capture():
                again = FeatureCache(prefix, "w", ds, "smoke", train=False, root=root)
            return (
                (CORRECT, "rebuilt")
                if torch.equal(again.features, good)
                else (WRONG, "damaged features used")
            )

        return Case("integrity", f"feature cache: {kind}", run)

    cases += [feature_damage(k) for k in ("zeroed", "truncated")]

    def dataset_cache(kind: str):
        def run(ctx):
            lay = _layouts()
            from dmllab.data.cache import build_cache
            from dmllab.data.check import check_dataset
            from dmllab.data.real import fingerprint

            base = ctx.folder()
            a = lay.make_cub(base / "a" / "CUB_200_2011", size=(400, 300))
            out = base / "cache"
            with stderr_capture():
                build_cache("cub", a, out, progress=False)
            if kind == "another source":
                b = lay.make_cub(base / "b" / "CUB_200_2011", size=(400, 300))
                lay.write_jpeg(next((b / "images").rglob("*.jpg")), size=(500, 300), seed=5)
                return expect_error(
                    lambda: build_cache("cub", b, out, progress=False), str(out), "two sources"
                )
            if kind == "source changed":
                lay.write_jpeg(next((a / "images").rglob("*.jpg")), size=(500, 320), seed=6)
                rep = check_dataset("cub", out, check_counts=False, progress=False)
                return (CORRECT, rep.cache_problems[0][:160]) if not rep.ok else (WRONG, "data check passes")
            if kind == "cache edited":
                next((out / "images").rglob("*.jpg")).write_bytes(b"\xff\xd8\xff other")
                return expect_error(lambda: fingerprint("cub", out), str(out), "changed since it was built")
            if kind == "interrupted build":
                manifest = json.loads((out / "dmllab_cache.json").read_text())
                manifest["complete"] = False
                (out / "dmllab_cache.json").write_text(json.dumps(manifest))
                return expect_error(lambda: fingerprint("cub", out), "interrupted")
            return expect_error(lambda: build_cache("cub", a, a.parent, progress=False), "another folder")

        return Case("integrity", f"dataset cache: {kind}", run)

    cases += [
        dataset_cache(k)
        for k in ("another source", "source changed", "cache edited", "interrupted build", "foreign folder")
    ]

    def csv_case(kind: str, cut: float | None = None):
        def run(ctx):
            from dmllab.results import read_rows

            src = sorted((REPO / "results").glob("*.csv"))[3]
            path = ctx.folder() / src.name
            text = src.read_text()
            if cut is not None:
                pos = int(len(text) * cut)
                while text[pos - 1] == "\n" or text[pos] == "\n":  # inside a row, never at its end
                    pos += 1
                text = text[:pos]
            elif kind == "extra field":
                lines = text.splitlines()
                lines[5] += ",extra"
                text = "\n".join(lines) + "\n"
            elif kind == "value not a number":
                lines = text.splitlines()
                header = lines[0].split(",")
                row = lines[4].split(",")
                row[header.index("value")] = (
                    "five"  # (pandas reads "n/a", "NaN", "" as NaN: a value may be NaN)
                )
                lines[4] = ",".join(row)
                text = "\n".join(lines) + "\n"
            elif kind == "binary garbage":
                path.write_bytes(b"\xff\xfe\x00garbage")
                return expect_error(lambda: read_rows(path), path.name)
            path.write_text(text)
            return expect_error(lambda: read_rows(path), path.name)

        return Case("integrity", f"result CSV: {kind}", run)

    cases += [csv_case(f"cut mid-row at {c:.0%}", c) for c in (0.1, 0.33, 0.5, 0.77, 0.95, 0.999)]
    cases += [csv_case(k) for k in ("extra field", "value not a number", "binary garbage")]

    def checkpoint_case(kind: str):
        def run(ctx):
            import torch

            from dmllab.training.protocol import load_checkpoint, save_atomic

            path = ctx.folder() / "last.pt"
            save_atomic({"trainer": {"w": torch.arange(5000.0)}}, path)
            raw = bytearray(path.read_bytes())
            if kind == "a byte flipped":
                raw[len(raw) // 2] ^= 1
                path.write_bytes(bytes(raw))
            elif kind == "truncated":
                path.write_bytes(bytes(raw[: len(raw) // 2]))
            else:
                torch.save({"trainer": {"w": torch.zeros(3)}}, path)  # replaced, sidecar left
            return expect_error(lambda: load_checkpoint(path), str(path))

        return Case("integrity", f"checkpoint: {kind}", run)

    cases += [checkpoint_case(k) for k in ("a byte flipped", "truncated", "replaced")]

    def final_model_case(ctx):
        import torch

        from dmllab.training.protocol import save_atomic
        from dmllab.training.store import CorruptRunError

        cfg, store = _fake_run(ctx)
        path = store.checkpoint_dir(cfg, 0) / "final.pt"
        save_atomic({"model": {"w": torch.ones(3)}}, path)
        store.save(cfg, 0, store.load(cfg, 0))  # recorded with this final model
        save_atomic({"model": {"w": torch.zeros(3)}}, path)  # another model, consistent sidecar
        with stderr_capture():
            return expect_error(lambda: store.final_model(cfg, 0), "final.pt", types=(CorruptRunError,))

    cases.append(Case("integrity", "final model replaced after the run was stored", final_model_case))

    def empty_split(dataset: str, which: str):
        def run(ctx):
            lay = _layouts()
            root = {"sop": lay.make_sop, "cub": lay.make_cub}[dataset](ctx.folder() / dataset)
            header = "image_id class_id super_class_id path\n" if dataset == "sop" else ""
            (root / which).write_text(header)
            return cli(
                ["data", "check", dataset, str(root), "--no-counts", "--quiet"],
                "has no images" if dataset == "sop" else which,
                expect_rc=1,
            )

        return Case("integrity", f"data check --no-counts, empty {dataset} {which}", run)

    cases += [
        empty_split("sop", "Ebay_train.txt"),
        empty_split("sop", "Ebay_test.txt"),
        empty_split("cub", "images.txt"),
    ]
    return cases


# ---------------------------------------------------------------------------------------------- file errors
def file_cases() -> list[Case]:
    cases = []

    def full_disk(kind: str):
        def run(ctx):
            from dmllab.cli import error_message

            tiny = _tiny_fs(ctx, 96)
            try:
                where = tiny if tiny is not None else ctx.folder()
                patch = contextlib.nullcontext() if tiny is not None else _enospc()
                with patch:
                    try:
                        with stderr_capture(), warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            target = _write_big(kind, where)
                    except EXPECTED_TYPES as err:
                        msg = error_message(err)
                        ok = msg.startswith("no space left on device writing") and str(where) in msg
                        return (NAMED if ok else UNHELPFUL), msg[:200]
                    except Exception as err:  # noqa: BLE001
                        return TRACE, f"{type(err).__name__}: {str(err)[:160]}"
                return WRONG, f"wrote {target} on a full disk"
            finally:
                _unmount(tiny)

        return Case("file errors", f"full disk: {kind}", run)

    cases += [
        full_disk(k)
        for k in (
            "checkpoint",
            "run store",
            "generated benchmark",
            "result CSV",
            "divergence record",
            "dataset cache",
        )
    ]

    def npy_case(name: str, kind: str):
        def run(ctx):
            from dmllab.data.synthetic import ensure_cached, load_cached

            folder = ensure_cached(
                "main",
                seed=0,
                image_size=32,
                num_classes=24,
                images_per_class=10,
                root=ctx.folder(),
                progress=False,
            )
            f = folder / name
            f.write_bytes(
                b""
                if kind == "empty"
                else (b"\x93NUMPY\x01\x00garbage" if kind == "bad header" else f.read_bytes()[:100])
            )
            return expect_error(lambda: load_cached(folder), name)

        return Case("file errors", f"cache array {name}: {kind}", run)

    cases += [
        npy_case(n, k)
        for n in ("images.npy", "class_ids.npy", "boxes.npy")
        for k in ("empty", "bad header", "truncated")
    ]

    def mat_case(kind: str):
        def run(ctx):
            lay = _layouts()
            from dmllab.data import Cars196

            root = lay.make_cars(ctx.folder() / "cars")
            f = root / "cars_annos.mat"
            raw = f.read_bytes()
            f.write_bytes(
                {
                    "empty": b"",
                    "zeros": b"\x00" * 300,
                    "truncated": raw[: len(raw) // 2],
                    "text": b"annotations = []\n",
                }[kind]
            )
            return expect_error(lambda: Cars196(root, "train", check_counts=False), "cars_annos.mat")

        return Case("file errors", f"cars_annos.mat: {kind}", run)

    cases += [mat_case(k) for k in ("empty", "zeros", "truncated", "text")]

    def cars_class(ctx):
        import scipy.io

        lay = _layouts()
        from dmllab.data import Cars196

        root = lay.make_cars(ctx.folder() / "cars")
        mat = scipy.io.loadmat(root / "cars_annos.mat")
        mat["annotations"][0, 0]["class"] = 197
        scipy.io.savemat(root / "cars_annos.mat", {k: v for k, v in mat.items() if not k.startswith("__")})
        return expect_error(lambda: Cars196(root, "train", check_counts=False), "cars_annos.mat", "197")

    cases.append(Case("file errors", "Cars class id 197", cars_class))

    def cub_class(value: str):
        def run(ctx):
            lay = _layouts()
            from dmllab.data import CUB200

            root = lay.make_cub(ctx.folder() / "CUB_200_2011")
            lines = (root / "image_class_labels.txt").read_text().splitlines()
            lines[1] = f"{lines[1].split()[0]} {value}"
            (root / "image_class_labels.txt").write_text("\n".join(lines) + "\n")
            return expect_error(
                lambda: CUB200(root, "test", check_counts=False), "image_class_labels.txt", "line 2"
            )

        return Case("file errors", f"CUB class id {value}", run)

    cases += [cub_class(v) for v in ("0", "201", "-1", "2000", "x")]

    def unreadable_index(ctx):
        lay = _layouts()
        root = lay.make_cub(ctx.folder() / "CUB_200_2011")
        import builtins

        real = builtins.open

        def deny(path, *a, **k):
            if str(path).endswith("image_class_labels.txt"):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real(path, *a, **k)

        builtins.open = deny
        try:
            outcome, detail = cli(
                ["data", "check", "cub", str(root), "--quiet"], "denied reading", "image_class_labels"
            )
        finally:
            builtins.open = real
        if "free some space" in detail:
            return UNHELPFUL, detail
        return outcome, detail

    cases.append(Case("file errors", "an unreadable index file", unreadable_index))

    def index_dir(ctx):
        lay = _layouts()
        root = lay.make_cub(ctx.folder() / "CUB_200_2011")
        (root / "images.txt").unlink()
        (root / "images.txt").mkdir()
        return cli(["data", "check", "cub", str(root), "--quiet"], "images.txt")

    cases.append(Case("file errors", "an index file that is a folder", index_dir))

    def counts_advice(command: str):
        def run(ctx):
            lay = _layouts()
            root = lay.make_cub(ctx.folder() / "CUB_200_2011")
            if command == "train":
                argv = [
                    "train",
                    "--method",
                    "proxynca++",
                    "--dataset",
                    "cub",
                    "--profile",
                    "smoke",
                    "--quiet",
                    "--data-root",
                    str(root),
                ]
                return cli(argv, "--set data.dataset.check_counts=false")
            return cli(["data", "check", "cub", str(root), "--quiet"], "--no-counts", expect_rc=1)

        return Case("file errors", f"count check advice ({command})", run)

    cases += [counts_advice(c) for c in ("train", "data check")]
    return cases


def _write_big(kind: str, where: Path) -> Path:
    import torch

    if kind == "checkpoint":
        from dmllab.training.protocol import save_atomic

        save_atomic({"w": torch.randn(100_000)}, where / "ck" / "last.pt")
        return where / "ck" / "last.pt"
    if kind in ("run store", "divergence record"):
        from dmllab.training import RunStore
        from dmllab.training.config import config_hash
        from dmllab.training.protocol import RunResult

        cfg = _smoke_cfg()
        store = RunStore(where / "runs")
        if kind == "divergence record":
            store.save_diverged(cfg, 0, FloatingPointError("x" * 200_000), 1.0)
            return store.run_dir(cfg, 0)
        history = [{"epoch": i, "loss": 1.0 / (i + 1), "note": "x" * 200} for i in range(2000)]
        store.save(cfg, 0, RunResult({"R@1": 0.5}, history, 1, [], 1.0, config_hash(cfg), 0, "cpu"))
        return store.run_dir(cfg, 0)
    if kind == "generated benchmark":
        from dmllab.data.synthetic import ensure_cached

        return ensure_cached(
            "main",
            seed=0,
            image_size=32,
            num_classes=24,
            images_per_class=10,
            root=where / "syn",
            progress=False,
        )
    if kind == "result CSV":
        from dmllab.results import write_rows

        rows = [
            dict(experiment="e", paper="p", artifact="a", profile="q", metric=f"m{i}", value=i)
            for i in range(3000)
        ]
        write_rows(where / "r.csv", rows)
        return where / "r.csv"
    lay = _layouts()
    from dmllab.data.cache import build_cache

    src = lay.make_cub(where.parent / "src" / "CUB_200_2011", size=(600, 400))
    return build_cache("cub", src, where / "cache", progress=False, shorter_side=300)


# --------------------------------------------------------------------------------------------------- locks
def lock_cases() -> list[Case]:
    def holder(lock: Path, pid: str, hold: float) -> subprocess.Popen:
        lock.parent.mkdir(parents=True, exist_ok=True)
        code = (
            "import fcntl, json, os, time\n"
            f"fh = open({str(lock)!r}, 'a+'); fcntl.flock(fh, fcntl.LOCK_EX); fh.truncate(0)\n"
            f"fh.write(json.dumps({{'pid': {pid}, 'start': {'None' if pid == 'os.getpid()' else repr('1')}, "
            "'since': time.time()})); fh.flush()\n"
            f"print('locked', flush=True); time.sleep({hold})\n"
        )
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        p.stdout.readline()
        return p

    def waiting(ctx):
        from dmllab.training import RunStore

        cfg = _smoke_cfg()
        store = RunStore(ctx.folder() / "runs")
        p = holder(store.lock_path(cfg, 0), "os.getpid()", 2.0)
        try:
            with stderr_capture() as err:
                t0 = time.perf_counter()
                with store.lock(cfg, 0):
                    waited = time.perf_counter() - t0
            said = err.getvalue()
            ok = f"pid {p.pid}" in said and waited > 1.0
            return (CORRECT if ok else WRONG), f"waited {waited:.1f} s; {said.strip()[:120]}"
        finally:
            p.kill()
            p.wait()

    def dead(kind: str):
        def run(ctx):
            from dmllab.training import RunStore

            cfg = _smoke_cfg()
            store = RunStore(ctx.folder() / "runs")
            if kind == "dead pid":
                q = subprocess.Popen([sys.executable, "-c", "pass"])
                q.wait()
                pid = str(q.pid)
            else:  # a live process under a recorded start time that is not its own: the pid was reused
                pid = str(os.getppid())
            p = holder(store.lock_path(cfg, 0), pid, 120)
            try:
                with stderr_capture() as err:
                    t0 = time.perf_counter()
                    with store.lock(cfg, 0):
                        waited = time.perf_counter() - t0
                said = err.getvalue()
                ok = "no longer running" in said and waited < 10
                return (CORRECT if ok else WRONG), f"took over after {waited:.1f} s"
            finally:
                p.kill()
                p.wait()

        return Case("locks", f"a lock whose holder is gone ({kind})", run, timeout=60)

    def read_only(ctx):
        from dmllab.training.store import run as train

        cfg, store = _fake_run(ctx)
        tiny = _tiny_fs(ctx, 1024)
        if tiny is None:
            return NAMED, "skipped: no tmpfs (read-only store not testable here)"
        try:
            shutil.copytree(store.root, tiny / "runs")
            subprocess.run(["mount", "-o", "remount,ro", str(tiny)], check=True, capture_output=True)
            from dmllab.training import RunStore

            ro = RunStore(tiny / "runs")
            return expect_value(
                lambda: train(cfg, seed=0, store=ro, progress=False), lambda v, c: v.cached or "not cached"
            )
        finally:
            _unmount(tiny)

    def read_only_missing(ctx):
        from dmllab.training import RunStore
        from dmllab.training.store import run as train

        cfg = _smoke_cfg()
        tiny = _tiny_fs(ctx, 256)
        if tiny is None:
            return NAMED, "skipped: no tmpfs"
        try:
            (tiny / "runs").mkdir()
            subprocess.run(["mount", "-o", "remount,ro", str(tiny)], check=True, capture_output=True)
            from dmllab.cli import error_message

            try:
                train(cfg, seed=0, store=RunStore(tiny / "runs"), progress=False)
            except OSError as err:
                msg = error_message(err)
                return (NAMED if "read-only file system writing" in msg else UNHELPFUL), msg[:160]
            return WRONG, "trained into a read-only store"
        finally:
            _unmount(tiny)

    return [
        Case("locks", "a waiting run names the holder at once", waiting, timeout=60),
        dead("dead pid"),
        dead("reused pid"),
        Case("locks", "a read-only store can be read", read_only),
        Case("locks", "a read-only store that lacks the run", read_only_missing),
    ]


# ------------------------------------------------------------------------ the third audit: links, checks, bounds
_SECRET = b"a file of the user's that no write of dmllab may touch\n"


def _judge_link(path: Path, target: Path, write: Callable[[], object]) -> tuple[str, str]:
    """``write`` with a link to ``target`` planted at ``path``: a breach if the target changed (or a dangling
    link's target was created); correct when the link was replaced by a file; a named error when it refused."""
    before = target.read_bytes() if target.exists() else None
    try:
        with warnings.catch_warnings(), stderr_capture():
            warnings.simplefilter("ignore")
            write()
    except EXPECTED_TYPES as err:
        outcome, detail = NAMED, f"refused: {type(err).__name__}: {str(err)[:140]}"
    except Exception as err:  # noqa: BLE001
        outcome, detail = TRACE, f"{type(err).__name__}: {str(err)[:160]}"
    else:
        outcome, detail = CORRECT, f"{path.name} replaced by a regular file; the link's target untouched"
        if path.is_symlink():
            outcome, detail = WRONG, f"the link at {path.name} is still there: nothing was written"
    after = target.read_bytes() if target.exists() else None
    if after != before:
        return (
            BREACH,
            f"{target} {'created' if before is None else 'overwritten'} through the link at {path.name}",
        )
    return outcome, detail


def _in_run(name: str, diverged: bool = False) -> tuple[Callable[[Path], Path], Callable[[Path], object]]:
    """A file of a stored run: (where it lies in the store under ``d``, the store's write of it)."""

    def where(d: Path) -> Path:
        from dmllab.training import RunStore

        return RunStore(d / "runs").run_dir(_smoke_cfg(), 0) / name

    def write(d: Path):
        from dmllab.training import RunStore
        from dmllab.training.config import config_hash
        from dmllab.training.protocol import RunResult

        cfg, store = _smoke_cfg(), RunStore(d / "runs")
        if diverged:
            return store.save_diverged(cfg, 0, FloatingPointError("loss is NaN"), 1.0)
        return store.save(cfg, 0, RunResult({"R@1": 0.5}, [], 1, [], 1.0, config_hash(cfg), 0, "cpu"))

    return where, write


def _executed(suffix: str) -> tuple[Callable[[Path], Path], Callable[[Path], object]]:
    """A file ``dmllab study`` writes under results/executed/<profile>/: the executed notebook or its log."""

    def write(d: Path):
        import papermill

        from dmllab.pipeline import execute

        def fake(inp, output, **kwargs):  # papermill's own writer, which follows a link at its output path
            Path(output).write_text(json.dumps({"cells": [], "metadata": {}}))
            os.write(2, b"kernel log line\n")

        real, papermill.execute_notebook = papermill.execute_notebook, fake
        try:
            execute.NotebookJob(d / "a.ipynb", d / "a.ipynb", {}, "python3")()
        finally:
            papermill.execute_notebook = real

    return (lambda d: d / f"a{suffix}"), write


def _link_writers() -> dict[str, tuple[Callable[[Path], Path], Callable[[Path], object]]]:
    """What a study or a run writes, by name: (the path a link is planted at, the write into folder ``d``)."""

    def csv(d: Path):
        from dmllab import results

        row = dict(experiment="a", paper="p", artifact="t", profile="smoke", metric="R@1", value=50.0, seed=0)
        results.write_rows(d / "a.csv", [row], mode="replace")

    def checkpoint(d: Path):
        from dmllab.training.protocol import save_atomic

        save_atomic({"w": 1}, d / "final.pt")

    def stamp(d: Path):
        from dmllab.pipeline import execute
        from dmllab.pipeline.jobs import JobResult

        (d / "a.csv").write_text("x\n")
        execute._write_stamps([JobResult("a", "ok", 1.0, output="x")], d, {"a": "s"}, d)

    def figure(d: Path):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from dmllab.plots import save_figure

        fig = plt.figure()
        save_figure(fig, d / "f")
        plt.close(fig)

    def sidecar(d: Path):
        from dmllab.fileio import write_sidecar

        (d / "x.bin").write_bytes(b"x")
        write_sidecar(d / "x.bin")

    def cache_stamp(d: Path):
        from dmllab.numerics.cache import CACHE_STAMP, stamp_cache

        stamp_cache(d)
        return CACHE_STAMP

    def export(d: Path):
        from dmllab.fileio import atomic_open

        with atomic_open(d / "e.npz") as fh:
            fh.write(b"npz")

    def generated_notebooks(d: Path):
        from dmllab.pipeline.template import write_all

        write_all(d)

    return {
        "result CSV": (lambda d: d / "a.csv", csv),
        "checkpoint": (lambda d: d / "final.pt", checkpoint),
        "checkpoint sidecar": (lambda d: d / "final.pt.sha256", checkpoint),
        "checksum sidecar": (lambda d: d / "x.bin.sha256", sidecar),
        "run metrics.json": _in_run("metrics.json"),
        "run checksums.json": _in_run("checksums.json"),
        "divergence record": _in_run("diverged.json", diverged=True),
        "executed notebook": _executed(".ipynb"),
        "kernel stderr log": _executed(".stderr.log"),
        "notebook stamp": (lambda d: d / "a.stamp", stamp),
        "figure": (lambda d: d / "f.png", figure),
        "cache stamp": (lambda d: d / "numerics.json", cache_stamp),
        "an atomic_open writer (exports)": (lambda d: d / "e.npz", export),
        "generated notebook": (lambda d: d / "pnpp_fig3_two_moons.ipynb", generated_notebooks),
    }


def link_cases() -> list[Case]:
    def case(what: str, dangling: bool):
        def run(ctx):
            where, write = _link_writers()[what]
            d = ctx.folder()
            target = ctx.folder() / ("gone/t" if dangling else "victim.txt")
            if not dangling:
                target.write_bytes(_SECRET)
            path = where(d)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(target)
            return _judge_link(path, target, lambda: write(d))

        return Case("links", f"{what}: a {'dangling ' if dangling else ''}link at its path", run, timeout=60)

    return [case(w, dangling) for w in _link_writers() for dangling in (False, True)]


def _row(**kw) -> dict:
    return {"experiment": "a", "paper": "p", "artifact": "t", "profile": "smoke", "metric": "R@1", "value": 50.0,
            "seed": 0, **kw}  # fmt: skip


def replace_cases() -> list[Case]:
    """A result CSV replaced by one the reader refuses is a data loss; parameters that would write one must be
    refused before anything trains."""

    def csv_case(name: str, rows: list[dict], *needles: str):
        def run(ctx):
            from dmllab import results

            path = ctx.folder() / "a.csv"
            results.write_rows(path, [_row(seed=7)])
            before = path.read_bytes()
            outcome, detail = expect_error(lambda: results.write_rows(path, rows), *needles)
            if path.read_bytes() != before:
                try:
                    results.read_rows(path)
                except ValueError as err:
                    return DATALOSS, f"the good CSV was replaced by one the reader refuses: {str(err)[:120]}"
                return (WRONG if outcome == WRONG else outcome), detail
            return outcome, detail

        return Case("check before replace", f"write_rows: {name}", run)

    def params_case(artifact: str, given: dict, *needles: str):
        def run(ctx):
            from dmllab.experiments import registry
            from dmllab.experiments.params import resolve_parameters

            return expect_error(lambda: resolve_parameters(registry.get(artifact), {"profile": "smoke", **given}),
                                *needles)  # fmt: skip

        shown = ", ".join(f"{k}={v if len(repr(v)) < 40 else '<long>'}" for k, v in given.items())
        return Case("check before replace", f"notebook parameters {artifact}: {shown}", run)

    cases = [
        csv_case("the same seed twice", [_row(seed=7)], "same measurement", "a.csv"),
        csv_case("a seed written twice in one call", [_row(seed=1), _row(seed=1)], "same measurement"),
        csv_case("R@1 of 400", [_row(seed=1, value=400.0)], "R@1 = 400.0", "a.csv"),
        csv_case("NMI of -3", [_row(seed=1, metric="NMI", value=-3.0)], "NMI = -3.0"),
        csv_case("an infinite loss", [_row(seed=1, metric="loss", value=float("inf"))], "loss = inf"),
        csv_case("a seed of 2**70", [_row(seed=2**70)], "seed"),
        csv_case("one seed under two runs", [_row(seed=7, run_id="other/seed7")], "from two runs"),
    ]
    grid = [
        ("pnpp_fig3_two_moons", {"seeds": [0, 0]}, "seeds", "twice"),
        ("pnpp_fig3_two_moons", {"seeds": [3, 1, 3]}, "seeds", "twice"),
        ("pnpp_fig3_two_moons", {"seeds": [2**63]}, "seeds", "bits"),
        ("pnpp_fig3_two_moons", {"seeds": [2**70]}, "seeds", "bits"),
        ("pnpp_fig3_two_moons", {"seeds": [-1]}, "seeds"),
        ("pnpp_fig3_two_moons", {"seeds": [0.5]}, "seeds"),
        ("pa_table5_6_batch", {"datasets": ["cub", "cub"]}, "datasets", "twice"),
        ("pnpp_fig4a_temperature", {"temperatures": [0.1, 0.1]}, "temperatures", "twice"),
        ("pa_table5_6_batch", {"batch_sizes": [2**63]}, "batch_sizes", "bits"),
        ("pa_table5_6_batch", {"batch_sizes": [1 << 17]}, "batch_sizes", "65536"),
    ]
    cases += [params_case(a, g, *n) for a, g, *n in grid]
    return cases


def _notebook_edit(ctx: Ctx, change: Callable[[object], None]) -> tuple[Path, object]:
    import nbformat

    from dmllab.experiments import registry
    from dmllab.pipeline.template import make_notebook

    artifact = registry.get("pnpp_fig3_two_moons")
    nb = make_notebook(artifact)
    change(nb)
    path = ctx.folder() / f"{artifact.id}.ipynb"
    nbformat.write(nb, str(path))
    return path, artifact


def _parameters_cell(nb) -> object:
    return next(c for c in nb.cells if "parameters" in c.metadata.get("tags", ()))


def tamper_cases() -> list[Case]:
    """Inputs edited or tampered with after dmllab wrote them: refused, never believed."""

    def notebook_case(name: str, change: Callable[[object], None], *needles: str):
        def run(ctx):
            from dmllab.pipeline.template import check_parameters_cell

            path, artifact = _notebook_edit(ctx, change)
            return expect_error(lambda: check_parameters_cell(path, artifact), str(path), *needles)

        return Case("tampered inputs", f"study notebook: {name}", run)

    def untag(nb):
        for c in nb.cells:
            c.metadata.pop("tags", None)

    def edit(old: str, new: str):
        return lambda nb: setattr(
            _parameters_cell(nb), "source", _parameters_cell(nb).source.replace(old, new)
        )

    def twice(nb):
        import copy

        nb.cells.insert(1, copy.deepcopy(_parameters_cell(nb)))

    cases = [
        notebook_case("parameters tag removed", untag, "no cell tagged 'parameters'"),
        notebook_case("parameters cell tagged twice", twice, "2 cells tagged"),
        notebook_case("fewer seeds than planned", edit("seeds = None", "seeds = [0]"), "edited"),
        notebook_case("another profile", edit('profile = "quick"', 'profile = "paper"'), "edited"),
        notebook_case("a parameter line deleted", edit("train_missing = None", ""), "edited"),
    ]

    def cut_csv(ctx):
        from dmllab.pipeline import execute
        from dmllab.pipeline.jobs import JobResult

        d = ctx.folder()
        csv = d / "a.csv"
        csv.write_text("h\n1\n2\n3\n")
        execute._write_stamps([JobResult("a", "ok", 1.0, output="x")], d, {"a": "s"}, d)
        csv.write_text("h\n1\n")  # cut to its valid rows
        job = execute.NotebookJob(d / "a.ipynb", d / "a.ipynb", {}, "python3")
        cached = execute.up_to_date(job, "s", csv)
        return (WRONG, "the cut CSV is 'cached'") if cached else (CORRECT, "the notebook runs again")

    cases.append(Case("tampered inputs", "a CSV cut to its valid rows after its notebook ran", cut_csv))

    def record_case(name: str, change: Callable[[dict], None]):
        def run(ctx):
            cfg, store = _fake_run(ctx)
            d = store.run_dir(cfg, 0)
            record = json.loads((d / "checksums.json").read_text())
            change(record)
            (d / "checksums.json").write_text(json.dumps(record))
            (d / "metrics.json").write_text((d / "metrics.json").read_text().replace("0.5", "0.99"))
            with stderr_capture() as err:
                loaded = store.load(cfg, 0)
            if loaded is not None:
                return WRONG, f"served: {loaded.metrics}"
            return (
                (CORRECT, err.getvalue().strip()[:160]) if str(d) in err.getvalue() else (UNHELPFUL, "silent")
            )

        return Case("tampered inputs", f"run record: {name}, metrics edited", run)

    for entry in ("metrics.json", "config.json", "history.csv", "provenance.json"):
        cases.append(record_case(f"{entry} entry deleted", lambda r, e=entry: r["files"].pop(e)))
    cases.append(record_case("final_model entry deleted", lambda r: r.pop("final_model")))
    cases.append(record_case("seed entry deleted", lambda r: r.pop("seed")))

    def final_model_unlisted(ctx):
        from dmllab.training.protocol import save_atomic
        from dmllab.training.store import CorruptRunError

        cfg, store = _fake_run(ctx)
        record = store.run_dir(cfg, 0) / "checksums.json"
        record.write_text(
            json.dumps({**json.loads(record.read_text()), "final_model": None})
        )  # saved without one
        save_atomic({"w": 1}, store.checkpoint_dir(cfg, 0) / "final.pt")  # another run's weights, placed here
        return expect_error(
            lambda: store.final_model(cfg, 0), "final.pt", "not listed", types=(CorruptRunError,)
        )

    cases.append(
        Case("tampered inputs", "a final model its run's record does not list", final_model_unlisted)
    )

    def diverged_case(name: str, change: Callable[[dict], None]):
        def run(ctx):
            from dmllab.training import RunStore

            cfg = _smoke_cfg()
            store = RunStore(ctx.folder() / "runs")
            path = store.save_diverged(cfg, 0, FloatingPointError("loss is NaN"), 1.0)
            record = json.loads(path.read_text())
            change(record)
            target = store.run_dir(cfg, 1) / "diverged.json"
            target.parent.mkdir(parents=True)
            target.write_text(json.dumps(record))
            with stderr_capture() as err:
                believed = store.diverged(cfg, 1)
            if believed is not None:
                return WRONG, f"believed: {str(believed)[:120]}"
            return (CORRECT, err.getvalue().strip()[:160]) if "divergence record" in err.getvalue() else (
                UNHELPFUL, "silent")  # fmt: skip

        return Case("tampered inputs", f"divergence record: {name}", run)

    cases += [
        diverged_case("copied from seed 0", lambda r: None),
        diverged_case("its run key removed", lambda r: (r.pop("run_key"), r.update(seed=1))),
        diverged_case("its config hash removed", lambda r: (r.pop("config_hash"), r.update(seed=1))),
        diverged_case("another run key", lambda r: r.update(run_key="feedfacecafebeef", seed=1)),
    ]
    train = ["train", "--method", "proxynca++", "--dataset", "synthetic", "--profile", "smoke", "--quiet"]
    for given in (
        ["--seed", "1", "--set", "run.seed=2"],
        ["--set", "run.seed=3"],
        ["--seed", "0", "--set", "run.seed=1"],
    ):
        cases.append(Case("tampered inputs", f"train {' '.join(given)}",
                          lambda ctx, g=given: cli([*train, *g], "disagree", "--seed")))  # fmt: skip
    return cases


_RESULT_HEADER = "experiment,paper,artifact,variant,dataset,profile,seed,metric,value,run_id\n"


def _result_line(
    seed: int, value: object = 50.0, metric: str = "R@1", run: str = "r/seed0", variant="v"
) -> str:
    return f"a,p,t,{variant},cub,smoke,{seed},{metric},{value},{run}\n"


def plausibility_cases() -> list[Case]:
    """Numbers no metric can take, and rows that would move an effect, never reach a verdict silently."""

    def read_case(name: str, body: str, *needles: str):
        def run(ctx):
            from dmllab import results

            path = ctx.folder() / "a.csv"
            path.write_text(_RESULT_HEADER + body)
            return expect_error(lambda: results.read_rows(path), str(path), *needles)

        return Case("plausibility", f"result CSV: {name}", run)

    cases = []
    for metric in ("R@1", "R@8", "NMI", "MAP@R", "RP", "accuracy", "P@1"):
        for value in ("1e308", "-400", "1e6", "100.5", "-0.01", "inf", "-inf"):
            cases.append(read_case(f"{metric} = {value}", _result_line(0) + _result_line(1, value, metric),
                                   "line 3", metric))  # fmt: skip
    for metric in ("loss", "elapsed_s", "norm_mean"):
        cases.append(read_case(f"{metric} = inf", _result_line(0, "inf", metric), "line 2", "finite"))

    def accepted(ctx):
        from dmllab import results

        path = ctx.folder() / "a.csv"
        path.write_text(
            _RESULT_HEADER + _result_line(0, 0) + _result_line(1, 100) + _result_line(2, -5, "loss")
        )
        return expect_value(lambda: len(results.read_rows(path)), lambda v, w: v == 3)

    cases.append(Case("plausibility", "result CSV: 0, 100 and a negative loss are plausible", accepted))

    def reference_case(value: str):
        def run(ctx):
            from dmllab.reference import load_reference

            d = ctx.folder()
            (d / "pnpp.csv").write_text(
                f"paper,artifact,row,column,dataset,metric,value,note\npnpp,T,a,b,cub,R@1,{value},\n"
            )
            return expect_error(lambda: load_reference(directory=d), "pnpp.csv", "line 2")

        return Case("plausibility", f"reference CSV: R@1 = {value}", run)

    cases += [reference_case(v) for v in ("inf", "-inf", "1e308", "-400", "250")]
    head = _RESULT_HEADER.replace("value,", "value,param_temperature,")
    for bad in ("0.1x", "one", "0,1"):
        body = "".join(
            _result_line(s).replace("50.0,", f"50.0,{t},")
            for s, t in ((0, "0.1"), (1, f'"{bad}"'), (2, "0.5"))
        )

        def run(ctx, body=body, bad=bad):
            from dmllab import results

            path = ctx.folder() / "a.csv"
            path.write_text(head + body)
            return expect_error(lambda: results.read_rows(path), "line 3", "param_temperature")

        cases.append(Case("plausibility", f"a parameter value {bad!r} in a column of numbers", run))
    merged = (
        _result_line(0, 40, run="r1/seed0")
        + _result_line(1, 41, run="r1/seed1")
        + _result_line(0, 30, run="r2/seed0")
    )
    cases.append(read_case("one arm's seed under two run ids (merged CSVs)", merged, "two runs", "r2/seed0"))

    def flat(gaps: tuple[float, ...], verdict: str):
        def run(ctx):
            import pandas as pd

            from dmllab.experiments import verdicts
            from dmllab.experiments.artifact import Claim
            from dmllab.experiments.compare import paired

            recs = []
            for seed, gap in enumerate(gaps):
                recs += [{"variant": "B", "seed": seed, "metric": "R@1", "value": 40.0, "run_id": f"B/{seed}"},
                         {"variant": "A", "seed": seed, "metric": "R@1", "value": 40.0 + gap, "run_id": f"A/{seed}"}]  # fmt: skip
            claim = Claim("A beats B", lambda df: paired(df, "R@1", {"variant": "A"}, {"variant": "B"}))
            j = verdicts.assess(claim, pd.DataFrame(recs), "quick", None)
            ok = j.verdict == verdict and (verdict != "inconclusive" or "no variation" in j.why)
            return (CORRECT if ok else WRONG), f"{j.verdict}: {j.why}"

        return Case("plausibility", f"claim on {len(gaps)} seeds with effects {gaps}", run)

    cases += [
        flat((2.0, 2.0), "inconclusive"),
        flat((-3.3, -3.3), "inconclusive"),
        flat((2.0, 2.0, 2.0), "yes"),
    ]
    return cases


def input_bound_cases() -> list[Case]:
    """Every size a user gives has a bound, and every file dmllab reads is a regular file: a named error, never a
    hang, an OverflowError or torch's c10::Error."""
    train = ["train", "--method", "proxynca++", "--dataset", "synthetic", "--profile", "smoke", "--quiet"]
    cases = []
    for key, value in (
        ("data.batch_size", 2**63), ("data.batch_size", 2**31), ("data.batch_size", 1 << 17),
        ("data.eval_batch_size", 2**40), ("model.embedding_dim", 2**63), ("model.embedding_dim", 1 << 20),
        ("schedule.epochs", 2**64), ("run.eval_every", 2**70), ("data.dataset.num_classes", 2**63),
    ):  # fmt: skip
        cases.append(Case("input bounds", f"--set {key}={value}",
                          lambda ctx, k=key, v=value: cli([*train, "--set", f"{k}={v}"], k), timeout=60))  # fmt: skip
    for seed in (2**63, 2**70, 10**30):
        cases.append(Case("input bounds", f"train --seed {seed}",
                          lambda ctx, s=seed: cli([*train, "--seed", str(s)], "run.seed"), timeout=60))  # fmt: skip

    def fifo_case(name: str, read: Callable[[Path], object], *needles: str):
        def run(ctx):
            fifo = ctx.folder() / "x"
            os.mkfifo(fifo)
            return expect_error(lambda: read(fifo), "FIFO", *needles)

        return Case("input bounds", f"a FIFO as {name}", run, timeout=20)

    def device_case(name: str, read: Callable[[Path], object], *needles: str):
        def run(ctx):
            link = ctx.folder() / "zero"
            link.symlink_to("/dev/zero")
            return expect_error(lambda: read(link), "character device", *needles)

        return Case("input bounds", f"a link to /dev/zero as {name}", run, timeout=20)

    def result(p):
        from dmllab import results

        return results.read_rows(p)

    def image(p):
        from dmllab.data.real import load_image

        return load_image(p)

    def index(p):
        from dmllab.data.index import read_lines

        return read_lines(p)

    def weights(p):
        from dmllab.models.weights import read_state_dict

        return read_state_dict(p)

    def checkpoint(p):
        from dmllab.training.checkpoint import load_checkpoint

        return load_checkpoint(p)

    def reference(p):
        from dmllab.reference import load_reference

        (p.parent / "ref").mkdir()
        (p.parent / "ref" / "pnpp.csv").symlink_to(p)
        return load_reference(directory=p.parent / "ref")

    readers = {"a result CSV": result, "an image": image, "an index file": index, "a weights file": weights,
               "a checkpoint": checkpoint, "a reference CSV": reference}  # fmt: skip
    cases += [fifo_case(n, r) for n, r in readers.items()] + [device_case(n, r) for n, r in readers.items()]
    cases += [
        fifo_case("a weights file (says why)", weights, "seek"),
        Case("input bounds", "--from a FIFO", lambda ctx: _fetch_from(ctx, "fifo"), timeout=30),
        Case(
            "input bounds",
            "--from a pipe (process substitution)",
            lambda ctx: _fetch_from(ctx, "pipe"),
            timeout=30,
        ),
    ]

    def big_csv(ctx):
        from dmllab import results

        path = ctx.folder() / "a.csv"
        with path.open("wb") as fh:
            fh.truncate(results.MAX_CSV_BYTES + 1)  # sparse: no disk used
        return expect_error(lambda: results.read_rows(path), "at most", str(path))

    cases.append(Case("input bounds", "a result CSV beyond the size bound", big_csv, timeout=30))

    def box(values: list[str]):
        def run(ctx):
            from dmllab.data.index import cub_box

            return expect_error(
                lambda: cub_box(values, ctx.folder() / "bounding_boxes.txt", 5), "line 5", "box"
            )

        return Case("input bounds", f"an annotation box {' '.join(values)}", run)

    cases += [
        box(v) for v in (["0", "0", str(2**40), "4"], ["0", str(2**63), "4", "4"], ["1e300", "0", "1", "1"])
    ]

    def image_id(ctx):
        from dmllab.data.index import parse_int

        return expect_error(
            lambda: parse_int(str(2**70), ctx.folder() / "images.txt", 2, "image id"), "64 bits"
        )

    cases.append(Case("input bounds", "an image id of 2**70", image_id))
    for argv, needle in (
        (
            ["study", "--profile", "smoke", "--only", "pnpp_fig3_two_moons", "--plan", "--seeds", "10000000"],
            "--seeds",
        ),
        (["data", "cache", "cub", "/nonexistent", "--shorter-side", str(2**40)], "--shorter-side"),
        (["pretrain", "--width", str(2**63)], "--width"),
        ([*train, "--protocol", "mlrc", "--mlrc-dim", str(2**40)], "--mlrc-dim"),
        ([*train, "--protocol", "mlrc", "--mlrc-batch-size", str(2**31)], "--mlrc-batch-size"),
    ):
        cases.append(Case("input bounds", " ".join(argv[:1] + argv[-2:]),
                          lambda ctx, a=argv, n=needle: cli(a, n), timeout=60))  # fmt: skip
    return cases


def _fetch_from(ctx: Ctx, kind: str) -> tuple[str, str]:
    from dmllab.data.fetch import fetch_dataset

    d = ctx.folder()
    if kind == "fifo":
        source = d / "CUB_200_2011.tgz"
        os.mkfifo(source)
        return expect_error(
            lambda: fetch_dataset("cub", d / "root", archives=[source]), "FIFO", "save it to a file"
        )
    read, write = os.pipe()
    try:
        os.write(write, b"not an archive")
        return expect_error(lambda: fetch_dataset("cub", d / "root", archives=[f"/proc/self/fd/{read}"]),
                            "FIFO", "process substitution")  # fmt: skip
    finally:
        os.close(read)
        os.close(write)


def message_cases() -> list[Case]:
    """Errors that name the file and the cause."""

    def column_case(column: str):
        def run(ctx):
            from dmllab import results

            names = _RESULT_HEADER.strip().split(",")
            keep = [i for i, n in enumerate(names) if n != column]
            lines = [_RESULT_HEADER.strip(), _result_line(0).strip(), _result_line(1).strip()]
            path = ctx.folder() / "a.csv"
            path.write_text("".join(",".join(line.split(",")[i] for i in keep) + "\n" for line in lines))
            return expect_error(lambda: results.read_rows(path), str(path), f"lacks the column(s) {column}")

        return Case("messages", f"a result CSV without its {column} column", run)

    cases = [column_case(c) for c in ("metric", "value", "profile", "seed", "experiment")]

    def claim_column(ctx):
        import pandas as pd

        from dmllab.experiments import verdicts
        from dmllab.experiments.artifact import Claim
        from dmllab.experiments.compare import paired

        rows = pd.DataFrame({"variant": ["A", "B"], "metric": ["R@1"] * 2, "value": [41.0, 40.0]})
        claim = Claim("A beats B", lambda df: paired(df, "R@1", {"variant": "A"}, {"variant": "B"}))
        j = verdicts.assess(claim, rows, "quick", None)
        ok = "lack the column 'seed'" in j.why
        return (NAMED if ok else UNHELPFUL), j.why[:160]

    cases.append(Case("messages", "a claim on rows without a seed column", claim_column))

    def codec(kind: str):
        def run(ctx):
            path = ctx.folder() / ("a.csv" if kind == "result" else "images.txt")
            data = (_RESULT_HEADER + _result_line(0)).encode() if kind == "result" else b"1 a.jpg\n2 b.jpg\n"
            path.write_bytes(data[:12] + b"\xff\xfe" + data[12:])
            if kind == "result":
                from dmllab import results

                return expect_error(lambda: results.read_rows(path), str(path), "byte 12")
            from dmllab.data.index import read_lines

            return expect_error(lambda: read_lines(path), str(path), "byte 12", "line 2")

        return Case("messages", f"a non-UTF-8 {kind} file", run)

    cases += [codec("result"), codec("index")]

    def zip_name(ctx):
        import struct
        import zipfile

        from dmllab.data.sources import Archive
        from dmllab.data.unpack import unpack

        d = ctx.folder()
        path = d / "CUB_200_2011.zip"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("CUB/b.jpg", b"y")
        raw = bytearray(path.read_bytes())
        for at in (i for i in range(len(raw)) if raw.startswith(b"CUB/b.jpg", i)):
            raw[at + 4] = 0xFF
        for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # names flagged UTF-8
            at = raw.find(signature)
            while at != -1:
                struct.pack_into(
                    "<H", raw, at + offset, struct.unpack_from("<H", raw, at + offset)[0] | 0x800
                )
                at = raw.find(signature, at + 1)
        path.write_bytes(bytes(raw))
        archive = Archive(filename=path.name, url=None, md5=None, sha256=None, source="audit", place="")
        return expect_error(lambda: unpack(archive, path, d / "staging"), str(path), "byte 4")

    cases.append(Case("messages", "a zip member name that is not UTF-8", zip_name))

    def relative(name: str):
        def run(ctx):
            from dmllab.paths import resolve_folders

            env = {name: "relative/folder"}
            resolve_folders(env)
            ok = os.path.isabs(env[name]) and env[name].endswith("relative/folder")
            return (CORRECT if ok else WRONG), env[name]

        return Case("messages", f"a relative {name} is resolved once", run)

    def dangling(name: str):
        def run(ctx):
            from dmllab.paths import resolve_folders

            link = ctx.folder() / "folder"
            link.symlink_to(ctx.root / "nowhere")
            return expect_error(lambda: resolve_folders({name: str(link)}), name, "dangling link")

        return Case("messages", f"{name} a dangling link", run)

    for name in ("DMLLAB_CACHE", "DMLLAB_RESULTS", "DMLLAB_FIGURES"):
        cases += [relative(name), dangling(name)]

    def dangling_file(ctx):
        from dmllab import results

        link = ctx.folder() / "a.csv"
        link.symlink_to(ctx.root / "gone.csv")
        return expect_error(lambda: results.read_rows(link), "dangling link", str(link))

    cases.append(Case("messages", "a result CSV that is a dangling link", dangling_file))
    train = ["train", "--method", "proxynca++", "--dataset", "synthetic", "--profile", "smoke", "--quiet"]

    def long_value(text: str):
        def run(ctx):
            outcome, detail = cli([*train, "--set", text], "characters")
            return outcome, detail[:160]

        return Case("messages", f"--set with a {len(text):,}-character value", run)

    cases += [long_value("loss.temperature=" + "a" * 100_000), long_value("x" * 100_000 + "=1"),
              long_value("data.root=" + "/d" * 50_000)]  # fmt: skip
    return cases


def third_audit_cases() -> list[Case]:
    return (
        link_cases()
        + replace_cases()
        + tamper_cases()
        + plausibility_cases()
        + input_bound_cases()
        + message_cases()
    )


def all_cases() -> list[Case]:
    from audit_boundaries import boundary_cases  # security, index files, downloads, bounds

    return (
        degenerate_cases()
        + api_cases()
        + value_cases()
        + integrity_cases()
        + file_cases()
        + lock_cases()
        + boundary_cases()
        + third_audit_cases()
    )


# ------------------------------------------------------------------------------------------------ running
def worker(scratch: Path) -> None:
    """Read case indices on stdin, answer one JSON line each (stdout is kept for the answers)."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything a case prints goes to stderr
    sys.stdout = sys.stderr
    import dmllab  # noqa: F401  (pins the CPU kernels first)

    cases = all_cases()
    for line in sys.stdin:
        i = int(line)
        ctx = Ctx(scratch / f"c{i}")
        t0 = time.perf_counter()
        try:
            outcome, detail = cases[i].run(ctx)
        except BaseException as err:  # noqa: BLE001
            outcome, detail = TRACE, f"{type(err).__name__}: {str(err)[:160]}"
        answers.write(
            json.dumps({"outcome": outcome, "detail": detail, "seconds": time.perf_counter() - t0}) + "\n"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="comma-separated classes")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument(
        "--code",
        default=str(REPO),
        help="checkout whose dmllab is audited (default: this one; e.g. an older one)",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker))
        return 0
    scratch = Path(tempfile.mkdtemp(prefix="dmllab-audit-"))
    env = {**os.environ, "PYTHONPATH": str(Path(args.code).resolve())}
    for name in ("DMLLAB_CACHE", "DMLLAB_RESULTS", "DMLLAB_FIGURES"):
        env[name] = str(scratch / name.lower())
    cases = all_cases()
    wanted = set(args.only.split(",")) if args.only else set(CLASSES)
    todo = [i for i, c in enumerate(cases) if c.cls in wanted]
    print(f"{len(todo)} cases ({len(cases)} in all); scratch {scratch}", flush=True)

    def start() -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(scratch / "work")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=scratch,
        )

    proc = start()
    rows = []
    for n, i in enumerate(todo, start=1):
        case = cases[i]
        proc.stdin.write(f"{i}\n")
        proc.stdin.flush()
        t0 = time.perf_counter()
        ready, _, _ = select.select([proc.stdout], [], [], case.timeout)
        line = proc.stdout.readline() if ready else ""
        if line:
            answer = json.loads(line)
        else:  # a hang (or a worker that died): kill it and start a fresh one
            alive = proc.poll() is None
            proc.kill()
            proc.wait()
            answer = {
                "outcome": HANG if alive else TRACE,
                "detail": "timeout" if alive else "worker died",
                "seconds": time.perf_counter() - t0,
            }
            proc = start()
        rows.append({"class": case.cls, "case": case.name, **answer})
        flag = "" if answer["outcome"] in (CORRECT, NAMED) else "   <<<"
        print(f"[{n}/{len(todo)}] {case.cls} | {case.name}: {answer['outcome']}{flag}", flush=True)
    proc.stdin.close()
    proc.kill()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["class", "case", "outcome", "detail", "seconds"])
        w.writeheader()
        for r in rows:
            w.writerow({**r, "seconds": f"{r['seconds']:.2f}"})
    counts = Counter((r["class"], r["outcome"]) for r in rows)
    print("\ncounts per class:")
    for cls in CLASSES:
        if cls in wanted:
            per = {o: counts[(cls, o)] for o in OUTCOMES if counts[(cls, o)]}
            print(f"  {cls:<22} {sum(per.values()):>4}  {per}")
    total = Counter(r["outcome"] for r in rows)
    print(f"  {'all':<22} {len(rows):>4}  {dict(total)}")
    print(f"rows in {out}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
