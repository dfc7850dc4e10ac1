"""dmllab.pipeline.report: the HTML report from tidy CSVs, figures and the papers' numbers."""

from __future__ import annotations

import html

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from dmllab import results  # noqa: E402
from dmllab.pipeline import report  # noqa: E402
from dmllab.pipeline.artifacts import PROFILES, Artifact, Claim, ordered  # noqa: E402
from dmllab.plots import save_figure  # noqa: E402


def _rows(name: str, profile: str) -> list[dict]:
    rows = []
    for seed, (a, b) in enumerate([(30.0, 60.0), (32.0, 62.0)]):
        for variant, v in (("untrained", a), ("ProxyNCA++", b)):
            rows.append(
                dict(experiment=name, paper="dmllab", artifact="X", variant=variant, dataset="synthetic",
                     profile=profile, seed=seed, metric="R@1", value=v)
            )  # fmt: skip
    return rows


def test_report_lists_every_artifact(tmp_path):
    arts = ordered()
    first = arts[0]
    res, fig_dir = tmp_path / "results", tmp_path / "figures"
    results.write_rows(res / f"{first.name}.csv", _rows(first.name, "quick") + _rows(first.name, "smoke"))
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    save_figure(fig, fig_dir / first.name)
    plt.close(fig)
    out = report.build_report("quick", results=res, figures=fig_dir)
    assert out == fig_dir / "report.html"
    text = out.read_text()
    for a in arts:
        assert html.escape(a.title) in text and f'id="{a.name}"' in text
    assert f'<img src="{first.name}.png"' in text
    assert "31 ± 1.4" in text and "61 ± 1.4" in text  # mean ± std over the two seeds
    for claim in first.claims:
        assert html.escape(claim.text) in text
    n_missing = sum(1 for a in arts if a is not first)
    assert text.count("not run yet") == n_missing
    # profile inferred from the rows: quick preferred over smoke
    assert "quick profile" in report.build_report(None, results=res, figures=fig_dir).read_text()


def test_report_without_results(tmp_path):
    out = report.build_report(None, results=tmp_path / "r", figures=tmp_path / "f")
    assert out.read_text().count("not run yet") == len(ordered())
    with pytest.raises(ValueError, match="valid profiles"):
        report.build_report("fast", results=tmp_path, figures=tmp_path)


def _artifact(**kw) -> Artifact:
    return Artifact(
        name="t", paper="pnpp", artifact="Table 2", title="T", description="d",
        parameters={p: {} for p in PROFILES}, **kw,
    )  # fmt: skip


def test_reference_table_deltas():
    art = _artifact(
        reference_key=lambda r: ("Table 2", r["variant"], "CUB") if r["variant"] != "skip" else None
    )
    rows = pd.DataFrame(_rows("t", "paper"))
    ref = pd.DataFrame(
        [dict(paper="pnpp", artifact="Table 2", row="ProxyNCA++", column="CUB", dataset="cub", metric="R@1",
              value=64.7, note="")]
    )  # fmt: skip
    table = report.reference_table(art, rows, ref)
    assert "61 ± 1.4" in table and "64.7" in table and "-3.7" in table  # 61 - 64.7
    assert "not transcribed" in table  # the untrained row has no paper cell
    assert "prints no numbers" in report.reference_table(_artifact(), rows, ref)


def test_paper_profile_keeps_the_claims_of_figures_without_numbers(tmp_path):
    """A dataset-free figure (no numbers in the paper) is compared through its claims on every profile."""
    from dmllab.toys.artifacts import TWO_MOONS

    assert TWO_MOONS.reference_key is None and TWO_MOONS.claims
    rows = [
        dict(experiment=TWO_MOONS.name, paper="pnpp", artifact="Fig. 3", variant=f"T={t:g}", profile="paper",
             seed=0, metric=m, value=v, param_temperature=t)
        for t, length, acc in ((1.0, 5.0, 85.0), (0.0625, 9.0, 97.0))
        for m, v in (("boundary_length", length), ("train_accuracy", acc))
    ]  # fmt: skip
    res = tmp_path / "results"
    results.write_rows(res / f"{TWO_MOONS.name}.csv", rows)
    text = report.build_report("paper", results=res, figures=tmp_path / "figures").read_text()
    section = text.split(f'id="{TWO_MOONS.name}"')[1].split("</section>")[0]
    assert "The paper prints no numbers for this artifact." in section
    for claim in TWO_MOONS.claims:
        assert f'{html.escape(claim.text)}: paper yes, here <span class="yes">yes</span>' in section


def test_claim_verdicts():
    rows = pd.DataFrame(_rows("t", "quick"))
    yes = Claim("a", lambda df: True)
    no = Claim("b", lambda df: False)
    na = Claim("c", lambda df: None)
    broken = Claim("d", lambda df: df["nope"].sum() > 0)
    assert [report.claim_verdict(c, rows) for c in (yes, no, na)] == ["yes", "no", "n/a"]
    assert report.claim_verdict(broken, rows).startswith("n/a (KeyError")
    text = report.claims_list(_artifact(claims=(yes, no)), rows)
    assert 'a: paper yes, here <span class="yes">yes</span>' in text
    assert 'b: paper yes, here <span class="no">no</span>' in text
