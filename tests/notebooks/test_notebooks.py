"""Every notebook in notebooks/: committed clean, parameters match its artifact, executes on the smoke profile
under papermill, writes its CSV and figures; then the report builds and renders (headless Chromium)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from dmllab.pipeline import report, study
from dmllab.pipeline.artifacts import ARTIFACTS, load_all
from dmllab.pipeline.notebook import make_notebook, notebooks_dir

NOTEBOOKS = study.discover()
NAMES = [p.stem for p in NOTEBOOKS]


@pytest.fixture(scope="module")
def smoke_env(tmp_path_factory):
    """DMLLAB_RESULTS / DMLLAB_FIGURES / DMLLAB_CACHE in temporary folders, inherited by the kernels."""
    root = tmp_path_factory.mktemp("smoke")
    env = {
        "DMLLAB_RESULTS": str(root / "results"),
        "DMLLAB_FIGURES": str(root / "figures"),
        "DMLLAB_CACHE": str(root / "cache"),
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield {k: Path(v) for k, v in env.items()}


def test_notebooks_found():
    assert NOTEBOOKS, f"no notebooks in {notebooks_dir()}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NAMES)
def test_committed_clean_and_matching_artifact(path):
    load_all()
    assert path.stem in ARTIFACTS, f"{path.name} has no registered artifact (valid: {ARTIFACTS.names()})"
    artifact = ARTIFACTS.get(path.stem)
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit notebooks without outputs"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", ())]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    import papermill

    assert set(papermill.inspect_notebook(str(path))) == set(artifact.parameter_names)
    want = make_notebook(artifact)
    assert [c.source for c in nb.cells] == [c.source for c in want.cells], (
        "regenerate with `dmllab notebooks`"
    )


@pytest.fixture(scope="module")
def smoke_study(smoke_env, tmp_path_factory):
    """All notebooks through the study runner on the smoke profile, two at a time (papermill kernels)."""
    results = study.run_study(
        "smoke", jobs=2, device="cpu", executed_dir=tmp_path_factory.mktemp("executed"), progress=False
    )
    return {r.name: r for r in results}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NAMES)
def test_executes_on_smoke(path, smoke_env, smoke_study):
    result = smoke_study[path.stem]
    assert result.status == "ok", f"{path.stem} failed in cell {result.cell}: {result.error}"
    from dmllab.results import read_rows

    rows = read_rows(smoke_env["DMLLAB_RESULTS"] / f"{path.stem}.csv")
    rows = rows[rows["profile"] == "smoke"]
    assert len(rows) > 0 and rows["value"].notna().all()
    assert (rows["experiment"] == path.stem).all()
    assert not list(smoke_env["DMLLAB_FIGURES"].glob(f"{path.stem}*.png"))  # quick's place stays untouched
    pngs = list((smoke_env["DMLLAB_FIGURES"] / "smoke").glob(f"{path.stem}*.png"))
    assert pngs, f"{path.stem} wrote no figures/smoke/{path.stem}*.png"
    assert all(p.with_suffix(".pdf").exists() for p in pngs)


def _colour_stats(png: Path) -> tuple[int, float]:
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB"))
    colours = len(np.unique(img.reshape(-1, 3), axis=0))
    non_white = float((img.min(axis=2) < 240).mean())
    return colours, non_white


def test_report_builds_and_renders(smoke_env, smoke_study, tmp_path):
    out = report.build_report("smoke")
    text = out.read_text()
    load_all()
    for name in ARTIFACTS.names():
        assert f'id="{name}"' in text
    for name in NAMES:  # every executed notebook shows its figure, not "not run yet"
        assert f'<img src="{name}' in text
    chromium = report.find_chromium()
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install chromium); report screenshot not checked")
    png = report.screenshot(out, tmp_path / "report.png")
    colours, non_white = _colour_stats(png)
    assert colours > 50 and non_white > 0.02, (
        f"blank-looking screenshot: {colours} colours, {non_white:.3f} non-white"
    )


def test_blank_page_fails_the_check(tmp_path):
    """The non-blank check can fail: an empty page has too few colours."""
    if report.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    page = tmp_path / "blank.html"
    page.write_text("<html><body></body></html>")
    colours, non_white = _colour_stats(report.screenshot(page, tmp_path / "blank.png", height=400))
    assert colours <= 50 or non_white <= 0.02
