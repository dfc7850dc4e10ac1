"""The notebooks: committed clean and generated from their artifacts; a batch study on the smoke profile runs the
selected artifacts' notebooks under papermill (training their runs first, notebooks only reading them), the
plotting notebooks draw the figures from the CSVs, and the report builds and renders (headless Chromium)."""

from __future__ import annotations

from pathlib import Path

import headless_chromium as browser  # beside this file
import nbformat
import pytest

from dmllab.experiments import registry
from dmllab.experiments.execution import Execution
from dmllab.pipeline import outcome, study
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

    assert set(papermill.inspect_notebook(str(path))) == {
        *artifact.parameter_names,
        "manifest",
        "train_missing",
    }
    assert [c.source for c in nb.cells] == [c.source for c in make_notebook(artifact).cells]


@pytest.fixture(scope="module")
def smoke_study(smoke_env, tmp_path_factory):
    return study.run_study(
        "smoke",
        Execution(device="cpu"),
        only=STUDIED,
        jobs=2,
        progress=False,
        executed_dir=tmp_path_factory.mktemp("executed"),
        say=lambda s: None,
    )


def test_study_trains_then_notebooks_only_read(smoke_study):
    assert smoke_study.plan.missing, "the smoke store starts empty"
    assert all(r.status == "ok" for r in smoke_study.training), smoke_study.training
    failed = [r for r in smoke_study.notebooks + smoke_study.plots if r.status != "ok"]
    assert not failed, outcome.format_summary(smoke_study)
    assert {r.name for r in smoke_study.plots} == {
        "plots_pnpp",
        "plots_heated",
        "plots_proxy_synthesis",
        "plots_dmllab",
    }
    steps = smoke_study.phase_s
    assert (
        list(steps) == ["plan", "prepare", "train", "notebooks", "plots", "report"]
        and min(steps.values()) >= 0
    )
    assert sum(steps.values()) <= smoke_study.wall_s <= sum(steps.values()) + 1.0
    assert steps["train"] >= max(r.wall_s for r in smoke_study.training)  # the pool's wall holds every run
    assert "steps: plan " in outcome.format_summary(smoke_study)


def test_kernels_talk_over_unix_sockets(smoke_study):
    """No kernel of the study runs over TCP (no port to collide, no warning about it in the kernel's log)."""
    logs = [Path(r.output).with_suffix(".stderr.log") for r in smoke_study.notebooks + smoke_study.plots]
    assert logs and all(log.is_file() for log in logs)
    assert not [log.name for log in logs if "over TCP" in log.read_text()]


@pytest.mark.parametrize("aid", STUDIED.split(","))
def test_rows_and_figures_written(aid, smoke_env, smoke_study):
    from dmllab.results import read_rows

    rows = read_rows(smoke_env["DMLLAB_RESULTS"] / "scratch" / "smoke" / f"{aid}.csv")
    rows = rows[rows["profile"] == "smoke"]
    assert len(rows) > 0 and rows["value"].notna().all() and (rows["experiment"] == aid).all()
    assert not list(smoke_env["DMLLAB_FIGURES"].glob(f"{aid}*.png"))  # quick's place stays untouched
    for fig in registry.get(aid).figures:
        png = smoke_env["DMLLAB_FIGURES"] / "scratch" / "smoke" / f"{aid}{fig.suffix}.png"
        assert png.exists() and png.with_suffix(".pdf").exists(), png


def test_notebooks_show_their_figures_and_steps(smoke_study):
    """The executed plotting notebooks show each figure inline; an artifact notebook shows its parameters as a
    person writes them, its verdicts with what differs from the paper, and its figures."""
    shown = {}
    for result in smoke_study.plots + smoke_study.notebooks:
        nb = nbformat.read(result.output, as_version=4)
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
        shown[result.name] = {kind for o in outputs for kind in o.get("data", {})}
    assert all("image/png" in shown[p] for p in ("plots_pnpp", "plots_heated", "plots_proxy_synthesis")), (
        shown
    )
    assert "image/png" in shown["pnpp_fig3_two_moons"] and "text/html" in shown["pnpp_fig3_two_moons"]


def test_rerun_trains_nothing_and_skips_unchanged_notebooks(smoke_study, tmp_path):
    plan = make_plan(registry.select(STUDIED), "smoke", Execution(device="cpu"))
    assert plan.missing == []
    again = study.run_study(
        "smoke",
        Execution(device="cpu"),
        only="two_moons",
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


FIRST_SCREEN = (1280, 900)  # a laptop's browser window, in CSS pixels


def test_report_builds_and_renders(smoke_env, smoke_study, tmp_path):
    text = smoke_study.report.read_text()
    for aid in STUDIED.split(","):
        assert f'id="{aid}"' in text and f'<img src="{aid}' in text
    assert "95% interval" in text and ("inconclusive" in text or "yes" in text)
    assert text.index('id="summary"') < text.index('id="pnpp_fig3_two_moons"')
    chromium = browser.find_chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium); report screenshot not checked")
    colours, non_white = _colour_stats(browser.screenshot(smoke_study.report, tmp_path / "report.png"))
    assert colours > 50 and non_white > 0.02, f"blank-looking screenshot: {colours} colours, {non_white:.3f}"


def test_summary_and_forest_plot_are_in_the_first_screen(tmp_path):
    """The report of the committed quick results opens with its summary: the verdict counts lie wholly within the
    first 1280 x 900 screen, and the first paper's forest plot starts there."""
    from dmllab.paths import repo_root
    from dmllab.pipeline.report import build_report

    if browser.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium); first screen not checked")
    page = build_report(
        "quick", results=repo_root() / "results", figures=tmp_path, out=tmp_path / "report.html"
    )
    width, height = FIRST_SCREEN
    boxes = browser.element_boxes(
        page, ["summary", "summary-counts", "summary-claims", "forest-pnpp"], width=width, height=height
    )
    left, top, w, h = boxes["summary-counts"]
    assert 0 <= top and top + h <= height and left + w <= width, (
        f"verdict counts at {boxes['summary-counts']}"
    )
    f_left, f_top, f_w, f_h = boxes["forest-pnpp"]
    assert top + h < f_top < height - 100 and f_left + f_w <= width, f"forest plot at {boxes['forest-pnpp']}"
    colours, non_white = _colour_stats(
        browser.screenshot(page, tmp_path / "top.png", width=width, height=height)
    )
    assert colours > 50 and non_white > 0.02


def test_blank_page_fails_the_check(tmp_path):
    """The non-blank check can fail: an empty page has too few colours."""
    if browser.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    page = tmp_path / "blank.html"
    page.write_text("<html><body></body></html>")
    colours, non_white = _colour_stats(browser.screenshot(page, tmp_path / "blank.png", height=400))
    assert colours <= 50 or non_white <= 0.02


def test_first_screen_check_can_fail(tmp_path):
    """An element below 900 px of other content is measured below the first screen."""
    if browser.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    page = tmp_path / "late.html"
    page.write_text(
        "<html><body><div style='height:1200px'>intro</div><table id='x'><tr><td>1</td></tr></table>"
    )
    boxes = browser.element_boxes(page, ["x", "absent"], height=900)
    assert set(boxes) == {"x"} and boxes["x"][1] >= 1200
