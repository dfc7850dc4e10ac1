"""Exploring never dirties the repository: where an execution's CSVs and figures go (only a study of the committed
profile on the committed device writes the committed folders), a re-run that changes nothing rewrites nothing
(values keep the provenance they were first written with), concurrent writers of one extra table keep every
block, a study whose artifacts have no claim builds its report, and a duplicated row is refused."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil

import pandas as pd
import pytest

from dmllab import paths, results
from dmllab.pipeline import notebook as nbmod

AID = "pnpp_fig3_two_moons"


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """Results and figures in temporary folders, outside any study."""
    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "res"))
    monkeypatch.setenv("DMLLAB_FIGURES", str(tmp_path / "fig"))
    monkeypatch.delenv(paths.STUDY_ENV, raising=False)
    return tmp_path / "res", tmp_path / "fig"


@pytest.mark.parametrize(
    "profile, device, study, tracked",
    [
        ("quick", "cpu", True, True),  # the committed rows: only a study of quick on the CPU
        ("quick", None, True, True),  # no device named: the committed device
        ("quick", "cpu", False, False),  # a notebook run by hand
        ("smoke", "cpu", True, False),  # another profile
        ("paper", "cpu", True, False),
        ("quick", "cuda", True, False),  # another device
        ("quick", "cuda:1", True, False),
    ],
)
def test_destination(folders, monkeypatch, profile, device, study, tracked):
    res, fig = folders
    if study:
        monkeypatch.setenv(paths.STUDY_ENV, "1")
    where = paths.destination(profile, device)
    assert where.tracked is tracked
    if tracked:
        assert (where.results, where.figures) == (res, fig)
    else:
        assert (where.results, where.figures) == (res / "scratch" / profile, fig / "scratch" / profile)


def test_study_context_sets_and_restores_the_mode(folders):
    assert not paths.in_study()
    with paths.study():
        assert paths.in_study() and os.environ[paths.STUDY_ENV] == "1"
    assert not paths.in_study() and paths.STUDY_ENV not in os.environ


def _rows(values):
    return [
        {
            "variant": "T=1",
            "dataset": "two_moons",
            "seed": s,
            "metric": "accuracy",
            "value": v,
            "param_t": 1.0,
        }
        for s, v in enumerate(values)
    ]


def test_a_notebook_by_hand_writes_the_scratch_folder_and_says_so(folders, capsys):
    res, fig = folders
    ctx = nbmod.setup({"profile": "quick", "execution": "device=cpu"}, AID)
    said = capsys.readouterr().out
    assert f"results go to {res / 'scratch' / 'quick'}/" in said and "git-ignored" in said
    assert said.count("\n") == 1  # one line
    ctx.write_results(_rows([90.0, 91.0]))
    assert (res / "scratch" / "quick" / f"{AID}.csv").is_file() and not (res / f"{AID}.csv").exists()
    assert ctx.read_results()["value"].tolist() == [90.0, 91.0]  # read back from where it wrote
    with paths.study():  # the study's notebook of the same profile: the committed folder, silently
        ctx = nbmod.setup({"profile": "quick", "execution": "device=cpu"}, AID)
        assert capsys.readouterr().out == ""
        ctx.write_results(_rows([90.0, 91.0]))
    assert (res / f"{AID}.csv").is_file()


def test_rewriting_unchanged_values_leaves_the_file_byte_identical(folders, monkeypatch):
    res, _ = folders
    path = res / "r.csv"
    rows = [
        results.tidy({"R@1": 0.5 + s / 10}, experiment="e", paper="p", artifact="a", profile="quick", seed=s)
        for s in range(3)
    ]
    rows = [r for block in rows for r in block]
    monkeypatch.setattr(results, "provenance", _provenance("sha-one", "2025-01-01T00:00:00+00:00"))
    results.write_rows(path, [{**r, "experiment": "other"} for r in rows])  # another block before ours
    results.replace_experiment(path, "e", rows, profile="quick", device="cpu")
    results.write_rows(path, [{**r, "experiment": "last"} for r in rows])  # and one after it
    before, stamp = path.read_bytes(), path.stat().st_mtime_ns
    monkeypatch.setattr(results, "provenance", _provenance("sha-two", "2026-06-01T00:00:00+00:00"))
    results.replace_experiment(path, "e", rows, profile="quick", device="cpu")
    assert path.read_bytes() == before and path.stat().st_mtime_ns == stamp  # not even rewritten
    rows[1]["value"] += 1.0  # one value changes: only its row takes the new provenance, in place
    results.replace_experiment(path, "e", rows, profile="quick", device="cpu")
    frame = results.read_rows(path)
    assert frame["experiment"].tolist() == ["other"] * 3 + ["e"] * 3 + ["last"] * 3
    mine = frame[frame["experiment"] == "e"]
    assert mine["git_sha"].tolist() == ["sha-one", "sha-two", "sha-one"]
    assert mine["timestamp"].tolist()[1] == "2026-06-01T00:00:00+00:00"


def _provenance(sha, when):
    def provenance(device=None):
        return {c: "" for c in results.PROVENANCE_COLUMNS} | {
            "git_sha": sha,
            "timestamp": when,
            "device": device or "",
        }

    return provenance


def test_rewriting_an_unchanged_table_does_not_touch_it(folders):
    res, _ = folders
    path = res / "e.grid.csv"
    grid = pd.DataFrame({"x": [0.1, 0.2, 1 / 3], "p": [0.25, 0.5, 2 / 3]})
    results.write_table(path, grid.assign(x=grid["x"] + 1), profile="smoke", device="cpu")
    results.write_table(path, grid, profile="quick", device="cpu")
    results.write_table(path, grid.assign(x=grid["x"] + 2), profile="paper", device="cpu")
    before, stamp = path.read_bytes(), path.stat().st_mtime_ns
    results.write_table(path, grid, profile="quick", device="cpu")
    assert path.read_bytes() == before and path.stat().st_mtime_ns == stamp
    results.write_table(path, grid.assign(p=0.0), profile="quick", device="cpu")  # replaced in place
    assert pd.read_csv(path)["profile"].tolist() == ["smoke"] * 3 + ["quick"] * 3 + ["paper"] * 3


def test_the_committed_csvs_read_and_write_back_byte_for_byte():
    """What the writers rebuild from a committed file is that file: a re-run that changes nothing cannot change a
    byte of any committed CSV."""
    for path in sorted((paths.repo_root() / "results").glob("*.csv")):
        if path.name.count(".") == 1:
            frame = results.read_rows(path)
            text = frame.reindex(columns=results.columns_in_order(frame.columns)).to_csv(index=False)
        else:
            text = pd.read_csv(path).to_csv(index=False, float_format="%.6g")
        assert text.encode() == path.read_bytes(), path.name


def _write_block(path: str, worker: int, repeats: int) -> None:
    grid = pd.DataFrame({"x": [worker + i / 10 for i in range(50)], "note": ["x" * 100] * 50})
    for r in range(repeats):
        results.write_table(path, grid.assign(r=r), profile=f"p{worker}", device="cpu")


def test_concurrent_table_writers_keep_every_block(tmp_path):
    path = str(tmp_path / "e.tsne.csv")
    ctx = mp.get_context("fork")
    writers = [ctx.Process(target=_write_block, args=(path, w, 5)) for w in range(6)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(120)
    assert [p.exitcode for p in writers] == [0] * 6
    frame = pd.read_csv(path)
    assert sorted(frame["profile"].unique()) == [f"p{w}" for w in range(6)]
    assert (frame.groupby("profile").size() == 50).all() and (frame["r"] == 4).all()
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_duplicated_row_is_refused_with_its_lines(tmp_path):
    path = tmp_path / "r.csv"
    results.write_rows(
        path,
        results.tidy(
            {"R@1": 0.5, "R@2": 0.6}, experiment="e", paper="p", artifact="a", profile="quick", seed=0
        ),
    )
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines, lines[1]]) + "\n")  # the first row again, as a copy would
    with pytest.raises(ValueError, match=r"r.csv: lines 2 and 4 hold the same measurement"):
        results.read_rows(path)
    assert len(results.read_rows(path, duplicates=True)) == 3  # the writers still read it, to replace it
    results.replace_experiment(
        path,
        "e",
        results.tidy({"R@1": 0.5}, experiment="e", paper="p", artifact="a", profile="quick", seed=0),
    )
    assert len(results.read_rows(path)) == 1  # a re-run repairs it


def test_an_empty_result_file_is_named(tmp_path):
    (tmp_path / "r.csv").write_text("")
    with pytest.raises(ValueError, match=r"r.csv is empty"):
        results.read_rows(tmp_path / "r.csv")


def test_a_report_of_artifacts_without_claims_builds(tmp_path):
    """A study of artifacts that judge no claim (Table 1: the settings) builds its report: zero verdicts."""
    from dmllab.experiments import multiplicity, registry, verdicts
    from dmllab.pipeline.report import build_report

    aid = "pnpp_table1_settings"
    assert not registry.get(aid).claims
    shutil.copy(paths.repo_root() / "results" / f"{aid}.csv", tmp_path / f"{aid}.csv")
    page = build_report("quick", results=tmp_path, figures=tmp_path / "fig", out=tmp_path / "report.html")
    text = page.read_text()
    assert f'id="{aid}"' in text and "1 of " in text and 'id="summary"' in text
    empty = multiplicity.counts(multiplicity.claims_frame([], {}, "quick"), ["pnpp"])
    totals = empty.sum(numeric_only=True)  # what the summary adds up: zeros, not a missing column
    assert empty.empty and all(totals[v] == 0 for v in verdicts.VERDICTS)


def test_a_report_refuses_a_duplicated_row(tmp_path):
    from dmllab.pipeline.report import build_report

    aid = "pnpp_table1_settings"
    text = (paths.repo_root() / "results" / f"{aid}.csv").read_text()
    (tmp_path / f"{aid}.csv").write_text(text + text.splitlines()[1] + "\n")
    with pytest.raises(ValueError, match=rf"{aid}.csv: lines 2 and \d+ hold the same measurement"):
        build_report("quick", results=tmp_path, figures=tmp_path, out=tmp_path / "report.html")


def test_rows_of_a_stored_run_carry_the_provenance_of_its_training(tmp_path):
    """The git commit, versions and time of a run's rows are those the run store recorded when it was trained, not
    those of the notebook that reads it."""
    import json
    from types import SimpleNamespace

    from dmllab.experiments.lookup import _trained_with
    from dmllab.training.store import PROVENANCE_FILE

    record = {
        "git_sha": "abc123",
        "timestamp": "2026-01-02T03:04:05Z",
        "versions": {"dmllab": "0.9", "torch": "2.1.0", "pytorch_metric_learning": "2.3.0"},
        "device": "cpu",
    }
    (tmp_path / PROVENANCE_FILE).write_text(json.dumps(record))
    prov = _trained_with(SimpleNamespace(run_dir=str(tmp_path)))
    assert prov == {
        "git_sha": "abc123",
        "timestamp": "2026-01-02T03:04:05+00:00",
        "dmllab_version": "0.9",
        "torch_version": "2.1.0",
        "pml_version": "2.3.0",
    }
    rows = results.tidy(
        {"R@1": 0.5}, experiment="e", paper="p", artifact="a", profile="quick", seed=0, **prov
    )
    results.write_rows(tmp_path / "r.csv", rows)
    written = results.read_rows(tmp_path / "r.csv").iloc[0]
    assert written["git_sha"] == "abc123" and written["timestamp"] == "2026-01-02T03:04:05+00:00"
    assert written["numpy_version"] == results.provenance()["numpy_version"]  # not recorded: filled as now
    assert (
        _trained_with(SimpleNamespace(run_dir=None)) == {}
        and _trained_with(SimpleNamespace(run_dir=str(tmp_path / "x"))) == {}
    )


def test_an_unchanged_figure_is_not_rewritten(tmp_path):
    from dmllab.plots import save_figure, use_headless_backend

    use_headless_backend()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    written = save_figure(fig, tmp_path / "f")
    stamps = [p.stat().st_mtime_ns for p in written]
    assert written[0].read_bytes()[:4] == b"\x89PNG" and written[1].read_bytes()[:4] == b"%PDF"
    assert save_figure(fig, tmp_path / "f") == written and [p.stat().st_mtime_ns for p in written] == stamps
    ax.plot([0, 1], [0, 1])
    save_figure(fig, tmp_path / "f")
    assert all(p.stat().st_mtime_ns != s for p, s in zip(written, stamps))
    plt.close(fig)
