"""The GPU cost model: the calibration rows it reads, the images a run processes (against counts written out
from the protocol), the price (against the formula written out), its approximations, and the datasets' split
sizes it rests on."""

from __future__ import annotations

import csv
import math

import pytest

from dmllab.experiments.execution import Execution
from dmllab.pipeline import cost
from dmllab.pipeline.cost import Calibration, Price, Unpriced, Workload
from dmllab.training import presets


def test_the_committed_calibration_reads_as_written():
    """Every rate the model reads equals its row of results/benchmarks/gpu.csv (read here with the csv module)."""
    cal = cost.load_calibration(cost.DEFAULT_CALIBRATION)
    with open(cost.DEFAULT_CALIBRATION, newline="") as fh:
        rows = list(csv.DictReader(fh))
    value = {(r["benchmark"], r["setting"], r["metric"]): float(r["value"]) for r in rows}
    assert cal.step[("resnet50", 256, "fp32")] == {
        32: value[("model_step", "resnet50_256px_b32_fp32", "images_per_s")],
        192: value[("model_step", "resnet50_256px_b192_fp32", "images_per_s")],
    }
    assert (
        cal.end_to_end[("resnet50", 256, "bf16")][192]
        == value[("end_to_end", "resnet50_256px_b192_bf16", "images_per_s")]
    )
    assert cal.loader == {
        32: value[("loader", "b32_workers8", "images_per_s")],
        192: value[("loader", "b192_workers8", "images_per_s")],
    }
    warm = [
        float(r["value"]) for r in rows if r["setting"].endswith("_warm") and r["metric"] == "wall_time_s"
    ]
    assert len(warm) == 2 and cal.gpu_run_s("quick") == pytest.approx(sum(warm) / 2)
    assert cal.gpu_run_s("paper") is None and cal.gpu_run_s("quick", workers=4) is None  # not measured
    assert cal.device == "NVIDIA H100 80GB HBM3"


def test_a_calibration_that_cannot_be_read_is_one_line_naming_the_file(tmp_path):
    with pytest.raises(cost.CalibrationError, match="gpu.csv: cannot be read .*--calibration"):
        cost.load_calibration(tmp_path / "gpu.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "benchmark,setting,metric,value,device\nmodel_step,resnet50_256px_b32_fp32,images_per_s,fast,x\n"
    )
    with pytest.raises(cost.CalibrationError, match="bad.csv, line 2: value 'fast' is not a number"):
        cost.load_calibration(bad)
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(cost.CalibrationError, match="other.csv: needs the columns"):
        cost.load_calibration(other)


@pytest.mark.parametrize(
    ("transform", "crop"),
    [("proxynca++", 256), ("proxy_anchor", 224), ("heated", 224), ("proxynca++227", 227)],
)
def test_crop_size_of_the_transform_presets(transform, crop):
    assert cost.crop_size(transform) == crop  # the sizes the presets' docstrings state


def test_split_images_partition_the_canonical_counts():
    """Exact for the canonical groups; train and val split trainval between them (in proportion to classes)."""
    from dmllab.data import DATASETS

    for name in ("cub", "cars", "sop"):
        cls = DATASETS.get(name)
        assert cls.split_images("trainval") == cls.canonical_counts["trainval"][0]
        assert cls.split_images("test") == cls.canonical_counts["test"][0]
        assert cls.split_images("train") + cls.split_images("val") == pytest.approx(
            cls.split_images("trainval")
        )
    assert DATASETS.get("cub").split_images("val") == pytest.approx(
        5864 * 50 / 100
    )  # classes 51-100 of 1-100
    assert DATASETS.get("sop").split_images("train") == pytest.approx(59551 * 5659 / 11318)
    inshop = DATASETS.get("inshop")
    assert inshop.split_images("trainval") == 25882  # the index's "train" side
    assert (inshop.split_images("query"), inshop.split_images("gallery")) == (14218, 12612)
    assert inshop.split_images("train") == pytest.approx(25882 * (3997 // 2) / 3997)


def test_workload_of_a_two_stage_paper_run_counts_its_images():
    """ProxyNCA++ on CUB (paper): stage 1 trains 'train' for warm-up + epochs and evaluates 'val' after every
    epoch, stage 2 trains 'trainval' as long (its upper bound), then 'test' is embedded once."""
    cfg = presets.get("proxynca++", "cub", "paper")
    d, s = cfg.data, cfg.schedule
    assert cfg.run.two_stage and cfg.run.eval_every == 1
    epochs, b = s.warmup_epochs + s.epochs, d.batch_size
    train, val, trainval, test = 5864 / 2, 5864 / 2, 5864, 5924
    w = cost.workload(cfg)
    assert isinstance(w, Workload) and (w.backbone, w.crop, w.batch) == ("resnet50", 256, b)
    assert w.precision == {"off": "fp32", "auto": "bf16", "fp16": "fp16", "bf16": "bf16"}[cfg.run.amp]
    stage1, stage2 = epochs * (train // b) * b, epochs * (trainval // b) * b
    assert w.train_images == stage1 + stage2 and w.stage2_images == stage2
    assert w.eval_images == epochs * val + test
    assert cost.workload(cfg.replace("run.fast_dev_run", 2)) == w  # a fast dev run is priced as the real run


def test_workload_of_an_mlrc_fold_and_of_in_shop():
    from dmllab.training.mlrc import MLRCSettings, fold_config

    cfg = presets.get("proxynca", "cub", "paper")
    fold = fold_config(cfg, MLRCSettings(), 1)
    w = cost.workload(fold)
    f, b, epochs = (
        MLRCSettings().folds,
        fold.data.batch_size,
        fold.schedule.warmup_epochs + fold.schedule.epochs,
    )
    assert not fold.run.two_stage
    assert w.train_images == epochs * ((5864 * (f - 1) / f) // b) * b
    assert w.eval_images == pytest.approx(epochs * 5864 / f + 5924)
    inshop = presets.get("proxynca++", "inshop", "paper")
    assert cost.workload(inshop).eval_images >= 14218 + 12612  # query and gallery embedded at the end
    assert isinstance(cost.workload(presets.get("proxynca++", "synthetic", "quick")), Unpriced)


def _cal(**tables) -> Calibration:
    return Calibration("cal.csv", "a GPU", **tables)


def test_price_follows_the_formula():
    """central = train / min(step, loader) + eval / min(forward, loader); low = (train - stage2 / 2) / step +
    eval / forward; high = train / end-to-end + the central evaluation."""
    w = Workload("resnet50", 256, "bf16", 32, 128, train_images=1e6, stage2_images=4e5, eval_images=2e5)
    cal = _cal(
        step={("resnet50", 256, "bf16"): {32: 800.0, 128: 1600.0}},
        embed={("resnet50", 256, "bf16"): {128: 5000.0}},
        end_to_end={("resnet50", 256, "bf16"): {32: 500.0}},
        loader={32: 2000.0, 128: 1000.0},
    )
    p = cost.price(w, cal)
    assert isinstance(p, Price) and p.notes == ()
    assert p.seconds == pytest.approx(1e6 / 800 + 2e5 / 1000)
    assert p.low_s == pytest.approx((1e6 - 2e5) / 800 + 2e5 / 5000)
    assert p.high_s == pytest.approx(1e6 / 500 + 2e5 / 1000)
    assert p.hours == pytest.approx(p.seconds / 3600)
    bound = cost.price(w, _cal(step=cal.step, embed=cal.embed, loader={32: 400.0, 128: 1000.0}))
    assert (
        bound.seconds == pytest.approx(1e6 / 400 + 2e5 / 1000) and bound.high_s == bound.seconds
    )  # input-bound


def test_price_states_every_approximation_and_never_guesses_a_backbone():
    step = {("resnet50", 256, "bf16"): {32: 800.0, 192: 2400.0}}
    cal = _cal(step=step, loader={32: 1e9, 192: 1e9})

    def one(backbone="resnet50", crop=256, precision="bf16", batch=32):
        return cost.price(Workload(backbone, crop, precision, batch, batch, 1e6, 0.0, 0.0), cal)

    mid = one(batch=112)  # halfway between 32 and 192
    assert (
        mid.seconds == pytest.approx(1e6 / 1600) and "batch 112 interpolated between 32 and 192" in mid.notes
    )
    assert one(batch=600).seconds == pytest.approx(1e6 / 2400)  # outside: the nearest measured batch
    assert any("outside the measured ones" in n for n in one(batch=600).notes)
    small = one(crop=128)  # a quarter of the pixels: four times the rate
    assert small.seconds == pytest.approx(1e6 / 3200) and any("scaled from 256 px" in n for n in small.notes)
    half = one(precision="fp16")
    assert half.seconds == pytest.approx(1e6 / 800) and "fp16 at the bf16 rate" in half.notes
    assert "evaluation at 3 x the step's rate (no embed row)" in half.notes
    for missing in (one(backbone="googlenet"), one(precision="fp32")):
        assert isinstance(missing, Unpriced) and "no model_step row for" in missing.why
    assert "model-bound" in " ".join(
        cost.price(Workload("resnet50", 256, "bf16", 32, 32, 1.0, 0.0, 0.0), _cal(step=step)).notes
    )


def test_a_run_without_a_canonical_size_is_priced_at_its_profiles_measured_run():
    quick = presets.get("proxynca++", "synthetic", "quick")
    measured = cost.price_config(quick, _cal(quick_run_s={1: 19.0}))
    assert isinstance(measured, Price) and measured.seconds == 19.0 and not measured.from_images
    assert isinstance(cost.price_config(quick, _cal()), Unpriced)


def test_the_paper_study_is_priced_from_5_5_g_training_images():
    """The whole paper plan: every run on a real dataset has a workload; summed, about 5.5 G training and 1.2 G
    evaluation images; the committed calibration prices every ResNet-50 run and names the missing rows."""
    from dmllab.experiments import registry
    from dmllab.pipeline.plan import make_plan

    plan = make_plan(registry.select("pnpp_table3_6_sota,ps_table4_mlrc"), "paper", Execution(device="cpu"))
    works = [cost.workload(r.run.config) for r in plan.runs]
    assert all(isinstance(w, Workload) for w in works)
    cal = cost.load_calibration(cost.DEFAULT_CALIBRATION)
    prices = [cost.price(w, cal) for w in works]
    central, low, high, unpriced = cost.total(prices)
    assert unpriced == 0 and low <= central <= high and math.isfinite(high)
    assert central == pytest.approx(sum(p.seconds for p in prices))


def test_bench_gpu_names_its_settings_as_the_calibration_reads_them(tmp_path):
    """bench_gpu.py's model settings parse back into (backbone, crop, precision) and batch (``cost.SETTING``)."""
    import sys

    sys.path.insert(0, str(cost.paths.repo_root() / "benchmarks"))
    import bench_gpu

    for setting in bench_gpu.DEFAULT_SETTINGS + bench_gpu.SMOKE_SETTINGS:
        name = bench_gpu.name(bench_gpu.config(tmp_path, "cuda", setting, None))
        m = cost.SETTING.match(name)
        assert m and (m["backbone"], int(m["batch"])) == (setting[0], setting[2]), name
        assert int(m["crop"]) == cost.crop_size(setting[1])
        assert m["precision"] == cost.AMP_PRECISION[setting[3]]
