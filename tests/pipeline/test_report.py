"""The report: paper-vs-reproduced columns, verdicts with effect and interval, a true introduction."""

from __future__ import annotations

import pandas as pd

from dmllab import paths
from dmllab.pipeline import notebook as nbmod
from dmllab.pipeline.report import build_report


def test_report_shows_verdicts_intervals_and_missing_artifacts(tmp_path, monkeypatch):
    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path / "res"))
    monkeypatch.setenv("DMLLAB_FIGURES", str(tmp_path / "fig"))
    monkeypatch.setenv(paths.STUDY_ENV, "1")  # as the study runs the notebook: the committed folders
    ctx = nbmod.setup({"profile": "quick", "execution": "device=cpu"}, "heated_fig2_digits")
    rows = []
    for seed, (sm, ln) in enumerate([(40.0, 50.0), (41.0, 52.0), (39.0, 51.0)]):
        rows += [
            {"variant": "SM", "dataset": "digits", "seed": seed, "metric": "R@1", "value": sm},
            {"variant": "LN alpha=4", "dataset": "digits", "seed": seed, "metric": "R@1", "value": ln},
        ]
    ctx.write_results(rows)
    out = build_report("quick")
    text = out.read_text()
    assert "Tables 1-2: the normalised model retrieves better than SM" in text
    assert '<span class="v yes">yes</span>' in text  # +11 points on 3 paired seeds
    assert "[+" in text and "95% interval" in text
    assert "not run yet" in text  # the other artifacts say they have no rows
    assert "1 of " in text and "artifacts have quick rows" in text
    assert "every artifact is reproduced" not in text.lower()
    assert isinstance(pd.read_csv(tmp_path / "res" / "heated_fig2_digits.csv"), pd.DataFrame)
