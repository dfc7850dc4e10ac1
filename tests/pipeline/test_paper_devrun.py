"""The paper profile end to end: ``dmllab study --profile paper --data-root D --fast-dev-run --pretrained none``
on the miniature copies of CUB, Cars196, SOP and In-Shop in their real layouts (one root, one folder per dataset as
``dmllab data fetch NAME D/NAME`` makes them), one training artifact per paper. The runs take the real data path
(ResNet-50 / GoogLeNet at the papers' 224-256 px crops, the papers' transforms, DataLoader workers, warm-up,
two-stage switch, heating), the notebooks find every run, the plots and the report run on those rows, and
nothing outside the scratch folders changes (the committed results/*.csv, figures/*.png and figures/report.html,
and a real paper study's figures/scratch/paper/)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from data_layouts import make_cars, make_cub, make_inshop, make_sop  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# One training artifact per paper, each with one or two runs on its first seed: CUB (GoogLeNet, two-stage with
# warm-up) and Cars196 (ResNet-50 for Proxy Anchor and Proxy Synthesis, GoogLeNet heated inside its run). The
# paper presets on SOP and In-Shop (query/gallery) run in tests/training/test_fast_dev.py.
ARTIFACTS = (
    "pnpp_appd_googlenet",
    "pa_fig11_tsne",
    "heated_fig3_feature_norm",
    "ps_table3_input_deformation",
)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and "fast-dev-run" not in p.parts
    }


@pytest.mark.slow
def test_paper_profile_fast_dev_run_on_the_miniature_datasets(tmp_path):
    root = tmp_path / "D"
    make_cub(root / "cub")
    make_cars(root / "cars")
    make_sop(root / "sop")
    make_inshop(root / "inshop")
    results, figures = tmp_path / "results", tmp_path / "figures"
    (figures / "scratch" / "paper").mkdir(parents=True)
    results.mkdir()
    for a in ARTIFACTS:  # the committed rows of these artifacts, which a fast dev run must not touch
        shutil.copy(REPO / "results" / f"{a}.csv", results / f"{a}.csv")
    (figures / "report.html").write_text("the committed quick report")
    (figures / "pa_fig11_tsne.png").write_bytes(b"the committed figure")
    (figures / "scratch" / "paper" / "report.html").write_text("a real paper study's report")
    before = {"results": _snapshot(results), "figures": _snapshot(figures)}
    env = {
        **os.environ,
        "DMLLAB_RESULTS": str(results),
        "DMLLAB_FIGURES": str(figures),
        "DMLLAB_CACHE": str(tmp_path / "cache"),
        "TORCH_HOME": str(tmp_path / "torch"),  # no ImageNet weights: --pretrained none
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "PYTHONWARNINGS": "ignore",
    }
    cmd = [sys.executable, "-m", "dmllab.cli", "study", "--profile", "paper", "--data-root", str(root)]
    cmd += ["--fast-dev-run", "--pretrained", "none", "--no-counts", "--only", ",".join(ARTIFACTS)]
    start = time.perf_counter()
    out = subprocess.run([*cmd, "--no-progress"], capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - start
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "READY: every run trained and every notebook found its runs" in log, log
    assert "random initialisation (--pretrained none)" in log
    assert f"data: cub at {root / 'cub'}" in log and f"data: cars at {root / 'cars'}" in log
    summary = log.split("fast dev run, per artifact:")[1].splitlines()
    for a in ARTIFACTS:
        (line,) = [x for x in summary if x.startswith(a + " ")]
        trained, needed = line.split()[1].split("/")
        assert trained == needed != "0" and "found its" in line, line
    # the rows, figures and report of the fast dev run are in the scratch folders
    scratch = results / "fast-dev-run" / "scratch" / "paper"
    report = figures / "fast-dev-run" / "scratch" / "paper" / "report.html"
    for a in ARTIFACTS:
        rows = (scratch / f"{a}.csv").read_text()
        assert ",paper," in rows and ",cpu," in rows
        section = re.search(rf'<section class="artifact" id="{a}">(.*?)</section>', report.read_text(), re.S)
        assert section and "not run yet" not in section.group(1), a
    assert (figures / "fast-dev-run" / "scratch" / "paper" / "pa_fig11_tsne.png").is_file()
    # nothing else changed: the committed CSVs and figures, and a real paper study's report
    assert {"results": _snapshot(results), "figures": _snapshot(figures)} == before
    print(f"\npaper fast dev run of {len(ARTIFACTS)} artifacts: {wall:.0f} s\n{out.stdout}")


@pytest.mark.slow
def test_paper_fast_dev_run_with_cub_only_and_a_gpu_hour_budget(tmp_path):
    """``--datasets cub --max-gpu-hours 2`` on a data root that holds the miniature CUB alone: Table 15 (four
    datasets, 1.4 GPU-hours on CUB) runs its CUB part and its claims say which datasets they were judged without;
    Fig. 4c (3.8 GPU-hours on CUB, more important than the appendix's Table 15) does not fit and Proxy Anchor's
    Fig. 1 (Cars only) has no data: both are left out, with the reason."""
    root = tmp_path / "D"
    make_cub(root / "cub")
    results, figures = tmp_path / "results", tmp_path / "figures"
    env = {
        **os.environ,
        "DMLLAB_RESULTS": str(results),
        "DMLLAB_FIGURES": str(figures),
        "DMLLAB_CACHE": str(tmp_path / "cache"),
        "TORCH_HOME": str(tmp_path / "torch"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "PYTHONWARNINGS": "ignore",
    }
    only = "pnpp_table15_crop,pnpp_fig4c_proxy_lr,pa_fig1_convergence"
    cmd = [sys.executable, "-m", "dmllab.cli", "study", "--profile", "paper", "--data-root", str(root)]
    cmd += ["--fast-dev-run", "--pretrained", "none", "--no-counts", "--only", only, "--no-progress"]
    cmd += ["--datasets", "cub", "--max-gpu-hours", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "READY: every run trained and every notebook found its runs" in log, log
    left = [line for line in log.splitlines() if line.startswith("left out: ")]
    assert left and "pnpp_fig4c_proxy_lr (needs 3.8 GPU-h, 2.0 of 2 left)" in left[0], log
    assert "pa_fig1_convergence (needs cars (not in --datasets))" in left[0], log
    scratch = results / "fast-dev-run" / "scratch" / "paper"
    rows = pd.read_csv(scratch / "pnpp_table15_crop.csv")
    assert set(rows["dataset"]) == {"cub"} and not (scratch / "pnpp_fig4c_proxy_lr.csv").exists()
    report = (figures / "fast-dev-run" / "scratch" / "paper" / "report.html").read_text()
    section = re.search(r'<section class="artifact" id="pnpp_table15_crop">(.*?)</section>', report, re.S)
    assert section and "judged without cars, sop, inshop" in section.group(1)
