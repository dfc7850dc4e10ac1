"""The classes of bad input of the reliability audit, kept fixed: degenerate embeddings, what is read from disk,
values out of range, locks, errors about files, raw tracebacks through the API. Each class with several cases
beyond the ones first reported (benchmarks/audit.py runs several hundred more)."""

from __future__ import annotations

import errno
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from dmllab.metrics import CollapsedEmbeddingError, evaluate, nmi, recall_at_k, retrieval_metrics
from dmllab.validation import InvalidValueError, check_environment, check_parameter

sys.path.insert(0, str(Path(__file__).resolve().parent / "metrics"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "data"))
from data_layouts import make_cars, make_cub, make_sop  # noqa: E402
from metrics_reference import brute_force_metrics  # noqa: E402

KS = (1, 2, 4, 8)


def clustered(seed=0, n=120, dim=8, classes=15):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    return (rng.normal(size=(classes, dim))[y] + rng.normal(size=(n, dim))).astype(np.float64), y


# ------------------------------------------------------------------------------------- degenerate embeddings
@pytest.mark.parametrize(
    ("dtype", "exponent"),
    [(np.float32, e) for e in (-140, -130, -100, -40, 40, 100, 120)]
    + [(np.float64, e) for e in (-1060, -1030, -500, 500, 1000)],
)
def test_any_finite_scale_gives_the_metrics_of_scale_one(dtype, exponent):
    x, y = clustered(n=100)
    x = x.astype(np.float32).astype(dtype)  # exactly representable after the power-of-two scale
    if (dtype is np.float32 and exponent < -126) or exponent < -1022:  # subnormals: a coarse grid stays exact
        x = np.round(x * 8) / 8
    scaled = np.ldexp(x, exponent).astype(dtype)
    assert np.array_equal(np.ldexp(scaled.astype(np.float64), -exponent), x.astype(np.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no false "no positive" warning either
        got = evaluate(scaled, y, metrics=("recall", "nmi", "mlrc"), ks=KS)
    assert got == evaluate(x, y, metrics=("recall", "nmi", "mlrc"), ks=KS)


@pytest.mark.parametrize("scale", [1e-39, 3e-42, 1e160, 1e-310, 1e300])
def test_decimal_scales_match_the_same_values_rescaled(scale):
    x, y = clustered(seed=1, n=90)
    dtype = np.float32 if scale in (1e-39, 3e-42) else np.float64
    xs = (x * scale).astype(dtype)
    exact = xs.astype(np.float64) / scale  # what the scaled input really holds, brought back
    assert recall_at_k(xs, y, KS) == brute_force_metrics(exact, y, ks=KS)["recall"]
    assert nmi(xs, y) == nmi(exact, y)


@pytest.mark.parametrize("value", [0.0, 1.0, -3.5, 1e-30, 1e30])
@pytest.mark.parametrize("distance", ["euclidean", "cosine"])
def test_collapsed_embeddings_are_refused_and_allowed_on_request(value, distance):
    y = np.arange(40) % 8
    x = np.full((40, 6), value, dtype=np.float32)
    if distance == "cosine" and value == 0.0:
        x[:, 0] = 1.0  # zero vectors have no direction (a separate, named error)
    with pytest.raises(CollapsedEmbeddingError, match="collapsed"):
        evaluate(x, y, distance=distance)
    orders = [np.arange(40), np.argsort(y, kind="stable"), np.random.default_rng(0).permutation(40)]
    values = [
        evaluate(x[o], y[o], distance=distance, allow_collapsed=True, metrics=("recall",)) for o in orders
    ]
    assert all(v == values[0] for v in values)  # the order of the samples changes nothing
    assert values[0]["R@4"] == 0.0  # 35 tied negatives come before the 4 tied positives


def test_nearly_collapsed_is_collapsed_and_a_bad_model_is_not():
    rng = np.random.default_rng(0)
    y = np.arange(60) % 6
    base = rng.normal(size=(1, 16)).astype(np.float32) * 10
    with pytest.raises(CollapsedEmbeddingError):
        recall_at_k(base + 1e-6 * rng.normal(size=(60, 16)).astype(np.float32), y)
    recall_at_k(base + 1e-2 * rng.normal(size=(60, 16)).astype(np.float32), y)  # computed: a bad model


@pytest.mark.parametrize("mlrc", [False, True])
@pytest.mark.parametrize("case", ["singletons", "other_label_map", "one_query"])
def test_no_query_with_a_positive_is_nan_with_a_warning(mlrc, case):
    x, y = clustered(seed=2, n=30)
    kw = {}
    if case == "singletons":
        y = np.arange(30)
    elif case == "other_label_map":
        kw = dict(gallery=x, gallery_labels=y + 1000)
    else:
        x, y, kw = x[:1], y[:1], dict(gallery=x[1:], gallery_labels=np.full(29, 999))
    with pytest.warns(UserWarning, match="no query has a positive"):
        res = retrieval_metrics(x, y, ks=(1, 4), mlrc=mlrc, **kw)
    assert all(math.isnan(v) for v in res.recall.values())
    if mlrc:
        assert math.isnan(res.map_at_r) and math.isnan(res.precision_at_1)


@pytest.mark.parametrize("seed", range(4))
def test_ties_do_not_depend_on_the_order_of_the_samples(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, size=(150, 2)).astype(np.float32)  # many exact ties and duplicates
    y = rng.integers(0, 6, 150)
    ref = retrieval_metrics(x, y, ks=(1, 3, 10), mlrc=True)
    for _ in range(3):
        p = rng.permutation(150)
        assert retrieval_metrics(x[p], y[p], ks=(1, 3, 10), mlrc=True, chunk_size=17) == ref


def test_typical_embeddings_give_the_reference_values():
    """The tie rule, the duplicate grouping and the rescale change nothing on continuous data."""
    for seed in range(3):
        x, y = clustered(seed=seed, n=200, dim=16, classes=25)
        for distance in ("euclidean", "cosine"):
            res = retrieval_metrics(
                x.astype(np.float32), y, ks=(1, 2, 4, 8, 16), mlrc=True, distance=distance
            )
            ref = brute_force_metrics(x.astype(np.float32), y, ks=(1, 2, 4, 8, 16), distance=distance)
            assert res.recall == ref["recall"]
            assert res.map_at_r == pytest.approx(ref["MAP@R"], abs=1e-12)


@pytest.mark.parametrize("n", [1, 5])
def test_nmi_of_a_single_class_is_nan_with_a_warning(n):
    with pytest.warns(UserWarning, match="single class"):
        assert math.isnan(nmi(np.random.default_rng(0).normal(size=(n, 3)), np.zeros(n, dtype=int)))


# ------------------------------------------------------------------------------------- API tracebacks
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(labels=np.array(["a", "b"] * 10)), "labels must hold numbers"),
        (dict(labels=["cat"] * 20), "labels must hold numbers"),
        (dict(labels=np.zeros(20)), "integers"),
        (dict(ks=4), r"write ks=\(4,\)"),
        (dict(ks="1,2"), "ks must be a sequence"),
        (dict(ks=(1, 2.5)), "positive integer"),
        (dict(embeddings=np.zeros((20, 0))), "0 dimensions"),
        (dict(embeddings="x"), "embeddings must be a torch tensor"),
        (dict(embeddings=[[1.0, 2.0], [3.0]] * 10), "embeddings must be a torch tensor"),
        (dict(metrics=("recall", 3)), "metrics must be names"),
        (dict(distance="l2"), "valid"),
    ],
)
def test_bad_api_inputs_are_one_line_errors(kwargs, match):
    x, y = clustered(n=20)
    args = dict(embeddings=x, labels=y)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match) as info:
        evaluate(args.pop("embeddings"), args.pop("labels"), **args)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("root", [5, 3.0, ["a"], b"x"])
@pytest.mark.parametrize("name", ["cub", "cars", "sop", "inshop"])
def test_a_dataset_root_that_is_not_a_path_is_named(name, root):
    from dmllab.data import build_dataset

    with pytest.raises(InvalidValueError, match="root must be a folder path"):
        build_dataset(name, root, "test" if name != "inshop" else "query")


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        ("ProxyAnchorLoss", dict(delta=float("nan")), "delta"),
        ("ProxyAnchorLoss", dict(delta=-0.1), "delta"),
        ("ProxyAnchorLoss", dict(alpha=float("inf")), "alpha"),
        ("ProxyNCALoss", dict(temperature="0.1"), "temperature"),
        ("NormSoftmaxLoss", dict(temperature=0), "temperature"),
        ("SoftTripleLoss", dict(margin=float("nan")), "margin"),
        ("SoftTripleLoss", dict(tau=-1), "tau"),
        ("VirtualSoftmaxLoss", dict(clip=float("nan")), "clip"),
        ("HeatedSoftmaxLoss", dict(alpha=-2.0), "alpha"),
    ],
)
def test_loss_hyper_parameters_have_ranges(cls, kwargs, match):
    import dmllab.losses as L

    with pytest.raises(ValueError, match=match):
        getattr(L, cls)(10, 8, **kwargs)


# ------------------------------------------------------------------------------------- values
@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("optim.lr_proxies=-400", "optim.lr_proxies"),
        ("optim.lr_embedding=-1", "optim.lr_embedding"),
        ("optim.lr_proxies=nan", "optim.lr_proxies"),
        ("data.sampler.per_class=0", "data.sampler"),
        ("data.sampler.per_class=2.5", "data.sampler"),
        ("data.sampler.per_class=5", "multiple of data.sampler.per_class"),
        ("optim.eps=0", "optim.eps"),
        ("optim.weight_decay=-1e-4", "optim.weight_decay"),
        ("schedule.factor=1.5", "schedule.factor"),
        ("schedule.stage2_drop_lag=-1", "stage2_drop_lag"),
        ("loss.temperature=nan", "loss: temperature must be a finite number"),
        ("loss.delta=0.1", r"loss 'proxynca' takes no keyword 'delta' \(loss.delta\); valid: .*temperature"),
        ("run.ks=0,4", "run.ks"),
        ("data.eval_batch_size=0", "eval_batch_size"),
        ("schedule.milestones=3", "schedule.milestones does nothing"),
        ("loss.alpha=0.8", r"loss 'proxynca' takes no keyword 'alpha'"),  # Proxy Synthesis's: not without it
        ("optim.momentum=0.9", "momentum does nothing"),
    ],
)
def test_config_values_out_of_range_or_without_effect_are_refused(override, match):
    """Section fields are refused by the override; a component's keyword values by its constructor, which
    ``build.check`` (called by the trainer before any training) runs at a toy size."""
    from dmllab.training import apply_overrides, build, presets

    cfg = presets.get("proxynca++", "synthetic", "smoke")  # plateau scheduler, Adam, no Proxy Synthesis
    with pytest.raises(ValueError, match=match):
        build.check(apply_overrides(cfg, [override]))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("seeds", []),
        ("seeds", [0, -1]),
        ("epochs", 0),
        ("proxy_lrs", [0.4, -4.0]),
        ("temperatures", [float("nan")]),
        ("lambdas", [1.5]),
        ("dims", [16, 0]),
        ("grid", "yes"),
        ("mlrc_repetitions", 0),
        ("unknown_weight", float("inf")),
    ],
)
def test_notebook_parameters_have_ranges(name, value):
    with pytest.raises(InvalidValueError, match=f"parameter {name}"):
        check_parameter(name, value)


def test_good_notebook_parameters_pass():
    for name, value in {
        "seeds": [0, 1],
        "epochs": None,
        "proxy_lrs": [4.0],
        "lambdas": [0.0, 1.0],
        "k": 4,
    }.items():
        check_parameter(name, value)


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"DMLLAB_CPU_ISA": "avx512"}, "DMLLAB_CPU_ISA"),
        ({"DMLLAB_CPU_ISA": ""}, "DMLLAB_CPU_ISA"),
        ({"DMLLAB_CACHE": " "}, "DMLLAB_CACHE is set but empty"),
        ({"DMLLAB_RESULTS": ""}, "DMLLAB_RESULTS"),
    ],
)
def test_environment_variables_are_checked(env, match):
    with pytest.raises(InvalidValueError, match=match):
        check_environment({**os.environ, **env})


def test_an_invalid_cpu_isa_does_not_break_the_import_and_is_one_line_in_the_cli(tmp_path):
    env = {**os.environ, "DMLLAB_CPU_ISA": "sse2", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", "import dmllab"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "Traceback" not in out.stderr and "DMLLAB_CPU_ISA" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "dmllab.cli", "presets"], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("dmllab: error: DMLLAB_CPU_ISA='sse2'")


@pytest.mark.parametrize(
    "argv",
    [
        ["--mlrc-folds", "3"],
        ["--mlrc-lr", "1e-6"],
        ["--mlrc-dim", "64", "--mlrc-repetitions", "2"],
        ["--protocol", "mlrc", "--mlrc-folds", "1"],
        ["--protocol", "mlrc", "--mlrc-per-class", "0"],
        ["--protocol", "mlrc", "--mlrc-batch-size", "30", "--mlrc-per-class", "4"],
        ["--protocol", "mlrc", "--mlrc-lr", "-1"],
        ["--seed", "-1"],
    ],
)
def test_train_options_without_effect_or_out_of_range_are_one_line(argv, capsys):
    from dmllab.cli import main

    base = ["train", "--method", "proxynca++", "--dataset", "synthetic", "--profile", "smoke", "--quiet"]
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dmllab: error:") and "debug" not in err[0]


# ------------------------------------------------------------------------------------- index files
@pytest.mark.parametrize("class_id", ["0", "201", "-3", "999"])
def test_cub_class_ids_outside_1_to_200_are_named(tmp_path, class_id):
    from dmllab.data import CUB200
    from dmllab.data.real import IndexFileError

    root = make_cub(tmp_path / "CUB_200_2011")
    lines = (root / "image_class_labels.txt").read_text().splitlines()
    lines[2] = f"{lines[2].split()[0]} {class_id}"
    (root / "image_class_labels.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(IndexFileError, match=rf"image_class_labels.txt, line 3: class id {class_id}"):
        CUB200(root, "train", check_counts=False)


@pytest.mark.parametrize("content", [b"", b"MATLAB 5.0 MAT-file garbage", b"\x00" * 200])
def test_a_damaged_cars_annotation_file_is_named(tmp_path, content):
    from dmllab.data import Cars196
    from dmllab.data.real import IndexFileError

    root = make_cars(tmp_path / "cars")
    (root / "cars_annos.mat").write_bytes(content)
    with pytest.raises(IndexFileError, match="cars_annos.mat"):
        Cars196(root, "train", check_counts=False)


def test_an_unreadable_index_file_is_reported_as_reading(tmp_path, monkeypatch, capsys):
    from dmllab.cli import main

    root = make_cub(tmp_path / "CUB_200_2011")
    real_open = open

    def deny(path, *a, **k):
        if str(path).endswith("images.txt"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", deny)
    assert main(["data", "check", "cub", str(root), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert f"permission denied reading {root / 'images.txt'}" in err and "free some space" not in err


@pytest.mark.parametrize("which", ["Ebay_train.txt", "Ebay_test.txt"])
def test_data_check_without_counts_fails_on_an_empty_split(tmp_path, which, capsys):
    from dmllab.cli import main

    root = make_sop(tmp_path / "SOP")
    (root / which).write_text("image_id class_id super_class_id path\n")
    assert main(["data", "check", "sop", str(root), "--no-counts", "--quiet"]) == 1
    assert "has no images" in capsys.readouterr().out


# ------------------------------------------------------------------------------------- files
@pytest.mark.parametrize(
    "text",
    [
        "experiment,paper,artifact,profile,metric,value\ne,p,a,quick,R@1,5",  # no final line break
        "experiment,paper,artifact,profile,metric,value\ne,p,a,quick,R@1,5\ne,p,a,qu",
        "experiment,paper,artifact,profile,metric,value\ne,p,a,quick,R@1\n",
        "experiment,paper,artifact,profile,metric,value\ne,p,a,quick,R@1,5,6\n",
        "experiment,paper,artifact,profile,metric,value\ne,p,a,quick,R@1,five\n",
    ],
)
def test_a_malformed_result_csv_is_named(tmp_path, text):
    from dmllab.results import read_rows

    path = tmp_path / "artifact.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match="artifact.csv"):
        read_rows(path)


def test_a_full_disk_names_the_file_being_written(tmp_path, monkeypatch):
    from dmllab.cli import error_message
    from dmllab.fileio import naming
    from dmllab.results import write_rows

    with pytest.raises(OSError) as info, naming(tmp_path / "last.pt", "writing"):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    assert "last.pt" in error_message(info.value)
    real_write = os.write

    def full(fd, data):  # a full disk under tmp_path: the write fails without naming a file
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as info:
        write_rows(
            tmp_path / "r.csv",
            [dict(experiment="e", paper="p", artifact="a", profile="q", metric="m", value=1)],
        )
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))  # no temporary file left
    assert error_message(info.value).startswith(f"no space left on device writing {tmp_path / 'r.csv'}")


def test_a_damaged_checkpoint_is_named_not_loaded(tmp_path):
    from dmllab.training.protocol import CorruptCheckpointError, load_checkpoint, save_atomic

    path = tmp_path / "final.pt"
    save_atomic({"model": {"w": torch.randn(200, 50)}}, path)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x10  # torch.load alone would read this silently
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptCheckpointError, match="final.pt does not match the checksum"):
        load_checkpoint(path)


def test_a_damaged_stored_run_does_not_stop_the_study(tmp_path, capsys):
    from dmllab.training import RunStore, presets
    from dmllab.training.protocol import RunResult
    from dmllab.training.store import config_hash

    cfg = presets.get("proxynca++", "synthetic", "smoke")
    store = RunStore(tmp_path / "runs")
    result = RunResult({"R@1": 0.5}, [{"epoch": 1}], None, [], 1.0, config_hash(cfg), 0, "cpu")
    store.save(cfg, 0, result)
    assert store.load(cfg, 0).metrics == {"R@1": 0.5}
    for damage in ('{"metrics": ', "[]", json.dumps({"metrics": {}})):
        store.save(cfg, 0, result)
        (store.run_dir(cfg, 0) / "metrics.json").write_text(damage)
        assert store.load(cfg, 0) is None  # missing, to be trained again: not an exception
        assert "metrics.json" in capsys.readouterr().err
