"""Check before train, validate before replace, plausibility at the reader: a notebook's parameters are checked
before anything trains (a repeated seed or dataset, an integer beyond 64 bits, an oversized batch); a result CSV is
replaced only by one that passes the reader; the reader refuses a value outside its metric's range, a file without
a required column, rows of one measurement from two runs, a file that is not UTF-8 (with the byte offset), a file
that is not a regular file and one beyond the size bound."""

from __future__ import annotations

import os

import pytest

from dmllab import results
from dmllab.experiments import registry
from dmllab.experiments.params import resolve_parameters
from dmllab.validation import InvalidValueError, check_value

HEADER = "experiment,paper,artifact,variant,dataset,profile,seed,metric,value,run_id\n"


def _row(seed, value=50.0, metric="R@1", run="r/seed0"):
    return f"a,p,t,v,cub,smoke,{seed},{metric},{value},{run}\n"


@pytest.mark.parametrize(
    "artifact, given, words",
    [
        ("pnpp_fig3_two_moons", {"seeds": [0, 0]}, "parameter seeds names 0 twice"),
        ("pa_table5_6_batch", {"datasets": ["cub", "cub"]}, "parameter datasets names 'cub' twice"),
        ("pnpp_fig3_two_moons", {"seeds": [2**70]}, "parameter seeds is an integer of 71 bits"),
        ("pnpp_fig3_two_moons", {"seeds": [2**63]}, "parameter seeds is an integer of 64 bits"),
    ],
)
def test_parameters_that_would_write_a_refused_csv_are_refused_before_training(artifact, given, words):
    with pytest.raises(InvalidValueError) as err:
        resolve_parameters(registry.get(artifact), {"profile": "smoke", **given})
    assert words in str(err.value) and "\n" not in str(err.value)


def test_repeatable_list_parameters_and_the_largest_seed_pass():
    params = resolve_parameters(
        registry.get("pnpp_fig3_two_moons"), {"profile": "smoke", "seeds": [2**63 - 1]}
    )
    assert params.seeds == [2**63 - 1]
    hidden = registry.get("heated_fig1_gradients").parameters["smoke"]["hidden"]
    assert len(set(hidden)) < len(hidden)  # layer widths repeat, and that is allowed
    resolve_parameters(registry.get("heated_fig1_gradients"), {"profile": "smoke"})


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("data.batch_size", 2**63, "data.batch_size is an integer of 64 bits"),
        ("data.batch_size", 1 << 17, "data.batch_size must be a positive integer <= 65536"),
        ("model.embedding_dim", 2**63 - 1, "model.embedding_dim must be a positive integer <= 65536"),
        ("run.seed", 2**70, "run.seed is an integer of 71 bits"),
        ("schedule.epochs", -(2**64), "schedule.epochs is an integer of 65 bits"),
    ],
)
def test_config_integers_have_sane_ranges(key, value, words):
    with pytest.raises(InvalidValueError, match=words.replace("*", r"\*")):
        check_value(key, value)
    check_value(key, 64 if key != "run.seed" else 2**63 - 1)


def test_a_result_csv_is_replaced_only_by_one_the_reader_accepts(tmp_path):
    path = tmp_path / "a.csv"
    row = dict(experiment="a", paper="p", artifact="t", profile="smoke", metric="R@1", value=50.0, seed=0)
    results.write_rows(path, [row])
    before = path.read_bytes()
    with pytest.raises(
        ValueError, match=r"not writing .*lines 2 and 3 hold the same measurement.*keeps its old"
    ):
        results.write_rows(path, [row])  # the same seed again: duplicate measurements
    with pytest.raises(ValueError, match=r"not writing .*R@1 = 400.0 is not a plausible value"):
        results.write_rows(path, [{**row, "seed": 1, "value": 400.0}])
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".locks", "a.csv"]  # no temporary file left


@pytest.mark.parametrize(
    "body, words",
    [
        (_row(0, "1e308"), "line 2: R@1 = 1e+308 is not a plausible value (it must be in [0, 100]"),
        (_row(0) + _row(1, "-400", "NMI"), "line 3: NMI = -400.0 is not a plausible value"),
        (_row(0, "1e6", "MAP@R"), "MAP@R = 1000000.0"),
        (_row(0, "101", "accuracy"), "accuracy = 101.0"),
        (_row(0, "inf", "loss"), "loss = inf is not a plausible value (it must be finite)"),
        (_row(0, "-inf", "elapsed_s"), "elapsed_s = -inf"),
    ],
)
def test_implausible_values_are_named_with_file_and_line(tmp_path, body, words):
    path = tmp_path / "a.csv"
    path.write_text(HEADER + body)
    with pytest.raises(ValueError) as err:
        results.read_rows(path)
    assert words in str(err.value) and str(path) in str(err.value)


def test_plausible_values_pass_and_nan_is_a_diverged_run(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(HEADER + _row(0, "0") + _row(1, "100") + _row(2, "nan") + _row(3, "-5", "loss"))
    assert results.read_rows(path)["value"].tolist()[:2] == [0.0, 100.0]


def test_one_arm_and_seed_under_two_runs_is_a_merged_file(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(
        HEADER + _row(0, 40, run="r1/seed0") + _row(1, 41, run="r1/seed1") + _row(0, 30, run="r2/seed0")
    )
    with pytest.raises(
        ValueError, match=r"lines 2 and 4 hold one measurement .* from two runs \(r1/seed0 and r2"
    ):
        results.read_rows(path)


@pytest.mark.parametrize("column", list(results.READ_COLUMNS))
def test_a_missing_column_is_named_as_missing_with_the_file(tmp_path, column):
    names = HEADER.strip().split(",")
    keep = [i for i, n in enumerate(names) if n != column]
    rows = [HEADER.strip(), _row(0).strip(), _row(1).strip()]
    path = tmp_path / "a.csv"
    path.write_text("".join(",".join(r.split(",")[i] for i in keep) + "\n" for r in rows))
    with pytest.raises(ValueError) as err:
        results.read_rows(path)
    assert f"result file {path} lacks the column(s) {column}" in str(err.value)


def test_a_codec_error_names_the_file_and_the_byte(tmp_path):
    path = tmp_path / "a.csv"
    data = (HEADER + _row(0)).encode()
    path.write_bytes(data[:70] + b"\xff" + data[70:])
    with pytest.raises(ValueError, match=rf"result file {path} is not UTF-8 text \(byte 70: b'\\xff'\)"):
        results.read_rows(path)


def test_a_result_file_must_be_a_regular_file_of_bounded_size(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="is a FIFO"):  # never a hang
        results.read_rows(fifo)
    link = tmp_path / "zero.csv"
    link.symlink_to("/dev/zero")
    with pytest.raises(OSError, match="is a character device"):
        results.read_rows(link)
    dangling = tmp_path / "gone.csv"
    dangling.symlink_to(tmp_path / "nowhere.csv")
    with pytest.raises(FileNotFoundError, match="is a dangling link"):
        results.read_rows(dangling)
    big = tmp_path / "big.csv"
    big.write_text(HEADER + _row(0) * 40)
    monkeypatch.setattr(results, "MAX_CSV_BYTES", 1024)
    with pytest.raises(ValueError, match="a result file is at most"):
        results.read_rows(big)


def test_a_parameter_value_that_does_not_parse_is_an_error_not_a_dropped_row(tmp_path):
    path = tmp_path / "a.csv"
    head = HEADER.replace("value,", "value,param_temperature,")
    rows = [_row(s).replace("50.0,", f"50.0,{t},") for s, t in ((0, "0.1"), (1, "0.1x"), (2, "0.5"))]
    path.write_text(head + "".join(rows))
    with pytest.raises(ValueError, match=r"line 3: parameter param_temperature is '0.1x', not a number"):
        results.read_rows(path)


def test_a_reference_file_with_implausible_values_is_refused(tmp_path):
    from dmllab.reference import load_reference

    path = tmp_path / "pnpp.csv"
    path.write_text("paper,artifact,row,column,dataset,metric,value,note\npnpp,Table 2,a,b,cub,R@1,inf,\n")
    with pytest.raises(ValueError, match=rf"reference file {path}, line 2: R@1 = inf is not a plausible"):
        load_reference(directory=tmp_path)
    path.write_text("paper,artifact,row,column,dataset,metric,value,note\npnpp,Table 2,a,b,cub,R@1,64.2,\n")
    assert load_reference(directory=tmp_path)["value"].tolist() == [64.2]


def _judge(gaps):
    import pandas as pd

    from dmllab.experiments import verdicts
    from dmllab.experiments.artifact import Claim
    from dmllab.experiments.compare import paired

    recs = []
    for seed, gap in enumerate(gaps):
        recs += [
            {"variant": "B", "seed": seed, "metric": "R@1", "value": 40.0, "run_id": f"B/seed{seed}"},
            {"variant": "A", "seed": seed, "metric": "R@1", "value": 40.0 + gap, "run_id": f"A/seed{seed}"},
        ]
    claim = Claim("A beats B", lambda df: paired(df, "R@1", {"variant": "A"}, {"variant": "B"}))
    return verdicts.assess(claim, pd.DataFrame(recs), "quick", None)


@pytest.mark.parametrize("gaps", [(2.0, 2.0), (-3.0, -3.0)])
def test_two_seeds_with_one_effect_are_inconclusive_not_yes_or_no(gaps):
    j = _judge(gaps)
    assert j.verdict == "inconclusive" and "no variation: 2 seeds with one effect" in j.why


def test_identical_effects_on_three_seeds_and_varying_ones_on_two_still_decide():
    assert _judge((2.0, 2.0, 2.0)).verdict == "yes"  # an interval from 3 seeds
    assert _judge((2.0, 2.1)).verdict in ("yes", "inconclusive")
    assert "no variation" not in _judge((2.0, 2.1)).why


def test_a_claim_on_rows_without_its_column_says_which_column():
    import pandas as pd

    from dmllab.experiments import verdicts
    from dmllab.experiments.artifact import Claim
    from dmllab.experiments.compare import paired

    rows = pd.DataFrame({"variant": ["A", "B"], "metric": ["R@1"] * 2, "value": [41.0, 40.0]})  # no seed
    claim = Claim("A beats B", lambda df: paired(df, "R@1", {"variant": "A"}, {"variant": "B"}))
    j = verdicts.assess(claim, rows, "quick", None)
    assert j.verdict == "inconclusive" and "the rows lack the column 'seed'" in j.why


def test_a_components_keyword_beyond_64_bits_is_refused_where_it_is_set():
    from dmllab.training import apply_overrides, presets

    cfg = presets.get("proxynca++", "synthetic", "smoke")
    with pytest.raises(InvalidValueError, match=r"data.dataset.num_classes is an integer of 64 bits"):
        apply_overrides(cfg, [f"data.dataset.num_classes={2**63}"])
    assert apply_overrides(cfg, ["data.dataset.num_classes=12"]).data.dataset.kw["num_classes"] == 12
