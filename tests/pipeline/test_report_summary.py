"""The report as a results section: the summary first, the papers' artifacts in the papers' order, a single number
as a table row, the four verdict classes with what differs from the paper, shared comparisons, checks and Holm, and
the device of each row where rows come from several."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from dmllab.experiments import Artifact, Claim, Figure, registry, verdicts
from dmllab.experiments.compare import paired
from dmllab.paths import repo_root
from dmllab.pipeline import summary
from dmllab.pipeline.report import build_report, numbers_table


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return build_report(
        "quick", results=repo_root() / "results", figures=out, out=out / "report.html"
    ).read_text()


def test_summary_opens_the_report(quick_report):
    starts = {
        m.group(1): m.start() for m in re.finditer(r"<section[^>]*id=['\"]([a-z0-9_-]+)['\"]", quick_report)
    }
    assert min(starts, key=starts.get) == "summary"
    assert quick_report.index("id='summary-counts'") < quick_report.index("id='summary-claims'")
    counts = quick_report[quick_report.index("id='summary-counts'") :].split("</table>")[0]
    for column in ("yes", "no", "inconclusive", "not testable", "tested (Holm)"):
        assert f"<th>{column}</th>" in counts
    assert re.search(r"m = \d+ claims tested", quick_report)
    assert verdicts.SEEDS_COVER.split(":")[0] in quick_report


def test_artifacts_in_the_papers_order(quick_report):
    order = [m.group(1) for m in re.finditer(r'<section class="artifact" id="([a-z0-9_]+)"', quick_report)]
    assert order == [a.id for a in registry.all_artifacts()]
    pnpp = [registry.get(i).label for i in order if i.startswith("pnpp_")]
    assert pnpp.index("Tables 3-6") < pnpp.index("Tables 7-10") < pnpp.index("Fig. 3") < pnpp.index("App. D")
    assert pnpp[-1] == "App. D" and order[-1] == "offline_benchmark"


def test_a_single_number_is_a_table_row(quick_report):
    section = quick_report[quick_report.index('id="pnpp_appd_googlenet"') :].split("</section>")[0]
    assert "<img" not in section and "Reproduced numbers" in section
    assert not registry.get("pnpp_appd_googlenet").figures


def _artifact(aid, claims):
    return Artifact(
        id=aid,
        paper="pnpp",
        label=f"Table {aid[-1]}",
        title="t",
        description="d",
        parameters={p: {"seeds": [0, 1, 2]} for p in ("smoke", "quick", "paper")},
        rows=lambda p, lookup: [],
        figures=(Figure(lambda t: None),),
        claims=claims,
    )


def _rows():
    return pd.DataFrame(
        [
            {"variant": v, "seed": s, "metric": "R@1", "value": base + gap, "profile": "quick"}
            for s, gap in enumerate((1.0, 1.2, 0.9))
            for v, base in (("A", 50.0), ("B", 40.0), ("C", 45.0))
        ]
    )


def test_claim_rows_show_every_class():
    def beats(v):
        return lambda df: paired(df, "R@1", {"variant": v}, {"variant": "B"})

    a = _artifact(
        "pnpp_table1",
        (
            Claim("A beats B", beats("A"), key="ab", differs="one draw of the benchmark"),
            Claim("C beats B", beats("C"), not_testable={"quick": "no converged model"}, differs="one run"),
            Claim(
                "B beats A", lambda df: paired(df, "R@1", {"variant": "B"}, {"variant": "A"}), differs="8 ep"
            ),
            Claim("a property", beats("A"), kind="check", unit="x"),
        ),
    )
    b = _artifact("pnpp_table2", (Claim("A beats B again", beats("A"), same_as="pnpp_table1:ab"),))
    frame = verdicts.claims_frame([a, b], {a.id: _rows(), b.id: _rows()}, "quick")
    html = summary.claim_rows(frame, {a.id: a.label, b.id: b.label}, with_artifact=True)
    rows = html.split("<tr")[2:]
    assert "class='light'" in rows[0] and "one draw of the benchmark" in rows[0]  # a yes: differs, lighter
    assert "class='nt'" in rows[1] and "not testable" in rows[1] and "no converged model" in rows[1]
    assert "one run" in rows[1] and "+5" in rows[1]  # the effect is shown, greyed
    assert '<span class="no">no</span>' in rows[2] and "8 ep" in rows[2]
    assert "same comparison as Table 2" in rows[0]
    assert "same comparison as Table 1, counted there" in rows[3]
    assert "a property" not in html
    checks = summary.check_rows(frame)
    assert "a property" in checks and '<span class="passes">passes</span>' in checks
    page = summary.summary_html(frame, [a, b], "quick", {})
    counts = page[page.index("summary-counts") :].split("</table>")[0]
    assert "<td>1</td><td>1</td><td>0</td><td>1</td><td>2</td>" in counts  # yes, no, inc., not testable, m
    assert "checks passed" in counts and "1 of 1" in counts
    assert "m = 2 claims tested" in page and "unknown" in page


def test_device_column_only_where_rows_come_from_several():
    rows = _rows().assign(dataset="synthetic", device="cpu")
    assert "<th>device</th>" not in numbers_table(rows)
    both = pd.concat([rows, rows.assign(device="cuda", value=rows["value"] + 0.5)])
    table = numbers_table(both)
    assert "<th>device</th>" in table and "cuda" in table
