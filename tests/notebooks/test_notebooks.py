"""The notebooks: committed clean and generated from their artifacts; a batch study on the smoke profile runs the
selected artifacts' notebooks under papermill (training their runs first, notebooks only reading them), the
plotting notebooks draw the figures from the CSVs, and the report builds and renders (headless Chromium)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from dmllab.experiments import registry
from dmllab.pipeline import report, study
from dmllab.pipeline.plan import make_plan
from dmllab.pipeline.template import make_notebook, notebooks_dir

NOTEBOOKS = sorted(notebooks_dir().glob("*.ipynb"))
# The papermill path is exercised on these (every artifact's rows and figures run in-process in
# tests/experiments/test_artifacts_smoke.py; a papermill kernel per notebook would cost minutes more).
STUDIED = "pnpp_fig3_two_moons,pnpp_sec36_proxy_gradients,heated_fig1_gradients,heated_fig2_digits,ps_fig2_gaussian,offline_benchmark"


@pytest.fixture(scope="module")
def smoke_env(tmp_path_factory):
    """DMLLAB_RESULTS / DMLLAB_FIGURES / DMLLAB_CACHE in temporary folders, inherited by the kernels."""
    root = tmp_path_factory.mktemp("smoke")
    env = {
        "DMLLAB_RESULTS": root / "results",
        "DMLLAB_FIGURES": root / "figures",
        "DMLLAB_CACHE": root / "cache",
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, str(value))
        yield env


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_clean_and_generated(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit notebooks without outputs"
    assert sum("parameters" in c.metadata.get("tags", ()) for c in nb.cells) == 1
    if path.stem.startswith("plots_"):
        return
    artifact = registry.get(path.stem)
    import papermill

    assert set(papermill.inspect_notebook(str(path))) == set(artifact.parameter_names) | {"train_missing"}
    assert [c.source for c in nb.cells] == [c.source for c in make_notebook(artifact).cells]


@pytest.fixture(scope="module")
def smoke_study(smoke_env, tmp_path_factory):
    return study.run_study(
        "smoke",
        only=STUDIED,
        jobs=2,
        device="cpu",
        progress=False,
        executed_dir=tmp_path_factory.mktemp("executed"),
        say=lambda s: None,
    )


def test_study_trains_then_notebooks_only_read(smoke_study):
    assert smoke_study.plan.missing, "the smoke store starts empty"
    assert all(r.status == "ok" for r in smoke_study.training), smoke_study.training
    failed = [r for r in smoke_study.notebooks + smoke_study.plots if r.status != "ok"]
    assert not failed, study.format_summary(smoke_study)
    assert {r.name for r in smoke_study.plots} == {
        "plots_pnpp",
        "plots_heated",
        "plots_proxy_synthesis",
        "plots_dmllab",
    }
    steps = smoke_study.phase_s
    assert list(steps) == ["plan", "train", "notebooks", "plots", "report"] and min(steps.values()) >= 0
    assert sum(steps.values()) <= smoke_study.wall_s <= sum(steps.values()) + 1.0
    assert steps["train"] >= max(r.wall_s for r in smoke_study.training)  # the pool's wall holds every run
    assert "steps: plan " in study.format_summary(smoke_study)


@pytest.mark.parametrize("aid", STUDIED.split(","))
def test_rows_and_figures_written(aid, smoke_env, smoke_study):
    from dmllab.results import read_rows

    rows = read_rows(smoke_env["DMLLAB_RESULTS"] / f"{aid}.csv")
    rows = rows[rows["profile"] == "smoke"]
    assert len(rows) > 0 and rows["value"].notna().all() and (rows["experiment"] == aid).all()
    assert not list(smoke_env["DMLLAB_FIGURES"].glob(f"{aid}*.png"))  # quick's place stays untouched
    for fig in registry.get(aid).figures:
        png = smoke_env["DMLLAB_FIGURES"] / "smoke" / f"{aid}{fig.suffix}.png"
        assert png.exists() and png.with_suffix(".pdf").exists(), png


def test_rerun_trains_nothing_and_skips_unchanged_notebooks(smoke_study, tmp_path):
    plan = make_plan(registry.select(STUDIED), "smoke", device="cpu")
    assert plan.missing == []
    again = study.run_study(
        "smoke",
        only="two_moons",
        device="cpu",
        progress=False,
        report=False,
        executed_dir=smoke_study.notebooks[0].output and Path(smoke_study.notebooks[0].output).parent,
        say=lambda s: None,
    )
    assert [r.output for r in again.notebooks] == ["up to date (skipped)"] and again.plots == ()


def _colour_stats(png: Path) -> tuple[int, float]:
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB"))
    return len(np.unique(img.reshape(-1, 3), axis=0)), float((img.min(axis=2) < 240).mean())


def test_report_builds_and_renders(smoke_env, smoke_study, tmp_path):
    text = smoke_study.report.read_text()
    for aid in STUDIED.split(","):
        assert f'id="{aid}"' in text and f'<img src="{aid}' in text
    assert "95% interval" in text and "inconclusive" in text or "yes" in text
    chromium = report.find_chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium); report screenshot not checked")
    colours, non_white = _colour_stats(report.screenshot(smoke_study.report, tmp_path / "report.png"))
    assert colours > 50 and non_white > 0.02, f"blank-looking screenshot: {colours} colours, {non_white:.3f}"


def test_blank_page_fails_the_check(tmp_path):
    """The non-blank check can fail: an empty page has too few colours."""
    if report.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    page = tmp_path / "blank.html"
    page.write_text("<html><body></body></html>")
    colours, non_white = _colour_stats(report.screenshot(page, tmp_path / "blank.png", height=400))
    assert colours <= 50 or non_white <= 0.02
