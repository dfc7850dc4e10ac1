"""The report as a results section: the summary first (verdict counts in six classes, then per paper a forest plot
and the claims table with the paper's effect), the papers' artifacts in the papers' order, what differs from the
paper once per artifact, a single number as a table row, and the device of each row where rows come from several."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from dmllab.experiments import Artifact, Claim, Figure, multiplicity, registry, verdicts
from dmllab.experiments.compare import paired
from dmllab.paths import repo_root
from dmllab.pipeline import summary
from dmllab.pipeline.forest import forest
from dmllab.pipeline.report import build_report, numbers_table, render


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
    assert quick_report.index('id="summary-counts"') < quick_report.index('id="summary-claims"')
    counts = quick_report[quick_report.index('id="summary-counts"') :].split("</table>")[0]
    for column in verdicts.VERDICTS:
        assert f"<th>{column}</th>" in counts
    assert "after Holm" in counts and "after BH" in counts


def test_every_paper_opens_with_a_forest_plot_then_its_claims(quick_report):
    claims = quick_report[quick_report.index('id="summary-claims"') :]
    for paper in ("pnpp", "proxy_anchor", "heated", "proxy_synthesis"):
        forest_at = claims.index(f'id="forest-{paper}"')
        table_at = claims.index("<table", forest_at)
        assert claims.index(f'id="claims-{paper}"') < forest_at < table_at
        assert "<th>paper's effect</th>" in claims[table_at : claims.index("</table>", table_at)]
    assert "<svg" in claims and 'class="paper"' in claims  # the paper's effect as a marker


def test_artifacts_in_the_papers_order(quick_report):
    order = [m.group(1) for m in re.finditer(r'<section class="artifact" id="([a-z0-9_]+)"', quick_report)]
    assert order == [a.id for a in registry.all_artifacts()]
    pnpp = [registry.get(i).label for i in order if i.startswith("pnpp_")]
    assert pnpp.index("Tables 3-6") < pnpp.index("Tables 7-10") < pnpp.index("Fig. 3") < pnpp.index("App. D")
    assert pnpp[-1] == "App. D" and order[-1] == "offline_benchmark"


def test_what_differs_is_said_once_per_artifact(quick_report):
    section = quick_report[quick_report.index('id="pnpp_table7_10_ablation"') :].split(
        '<section class="artifact"'
    )[0]
    lines = summary.differs_lines(registry.get("pnpp_table7_10_ablation"), "quick")
    assert lines and len(lines) < len(registry.get("pnpp_table7_10_ablation").claims)
    for line in lines:
        escaped = line.replace("&", "&amp;").replace("'", "&#39;").replace('"', "&#34;")
        assert section.count(escaped) == 1, line


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
    gaps = {"A": (1.0, 1.2, 0.9), "B": (1.0, 1.2, 0.9), "C": (1.0, 1.2, 0.9), "D": (1.1, 1.0, 1.1)}
    base = {"A": 50.0, "B": 40.0, "C": 45.0, "D": 40.0}
    return pd.DataFrame(
        [
            {
                "variant": v,
                "seed": s,
                "metric": "R@1",
                "value": base[v] + gaps[v][s],
                "profile": "quick",
                "run_id": f"{v}/seed{s}",
            }
            for s in range(3)
            for v in base
        ]
    )


def _frame():
    def beats(v, other="B"):
        return lambda df: paired(df, "R@1", {"variant": v}, {"variant": other})

    a = _artifact(
        "pnpp_table1",
        (
            Claim("A beats B", beats("A"), key="ab", primary=True, paper_effect=12.0, unit="R@1 points"),
            Claim(
                "C beats B",
                beats("C"),
                not_testable={"quick": "no converged model"},
                key="cb",
                unit="R@1 points",
            ),
            Claim("B beats A", beats("B", "A"), key="ba", unit="R@1 points"),
            Claim("D beats B", beats("D"), key="db", paper_effect=4.0, unit="R@1 points"),
            Claim("a property", beats("A"), kind="check", unit="x", key="p"),
        ),
    )
    b = _artifact("pnpp_table2", (Claim("A beats B again", beats("A"), key="ab2", unit="R@1 points"),))
    frame = multiplicity.claims_frame(
        [a, b], {a.id: _rows(), b.id: _rows()}, "quick", reference=pd.DataFrame()
    )
    return frame, {a.id: a.label, b.id: b.label}


def test_claim_lines_show_every_class_and_the_paper_effect():
    frame, labels = _frame()
    lines = {c["key"]: c for c in summary.claim_lines(frame, labels)}
    assert lines["ab"]["verdict"] == "yes" and lines["ab"]["paper_effect"] == "+12" and lines["ab"]["primary"]
    assert lines["cb"]["verdict"] == "not testable" and "no converged model" in lines["cb"]["why"]
    assert lines["cb"]["effect"] == "+5"  # shown though not testable
    assert lines["ba"]["verdict"] == "no"
    assert lines["db"]["verdict"] == "equivalent"  # +0.03 [-0.48, 0.55] inside +-1 point (pre-registered)
    assert lines["ab"]["shared"] == "1 other claim read the same comparison (runs, metric, condition)"
    assert "Table 2 (ab2)" in lines["ab"]["shared_names"] and "Table 1 (ab)" in lines["ab2"]["shared_names"]
    assert lines["ab2"]["counted"] and lines["ba"]["shared"] == ""  # "B beats A": the same runs, other sides
    assert [c["claim"] for c in summary.check_lines(frame)] == ["a property"]
    counts = summary.count_lines(frame)
    # every statement counts, adjusted: ab, ab2 yes; ba no; db equivalent (BH keeps it); cb not testable
    assert counts[0]["classes"] == [2, 1, 1, 0, 0, 1] and counts[-1]["paper"] == ""


def test_forest_rows_sit_at_their_effects():
    frame, labels = _frame()
    plot = forest(frame, labels)
    (panel,) = plot.panels
    rows = {r.title.split(": ")[1].split(" (")[0]: r for r in panel.rows}
    a = rows["A beats B"]
    assert a.x_low == a.x_mean == a.x_high < a.x_paper  # +10 on every seed, against the paper's +12
    assert panel.zero == pytest.approx(rows["D beats B"].x_mean, abs=2)  # an effect of 0.03 sits at 0
    assert rows["B beats A"].x_high < panel.zero and rows["A beats B again"].counted
    assert a.colour != rows["B beats A"].colour != rows["D beats B"].colour


def test_a_study_without_claims_builds_its_report(tmp_path, monkeypatch):
    """Rows of artifacts that declare no claim: an empty claims frame, no counts table, a report all the same."""
    frame = multiplicity.claims_frame([], {}, "quick", reference=pd.DataFrame())
    assert summary.count_lines(frame) == [] and summary.claim_lines(frame, {}) == []
    monkeypatch.setattr(registry, "all_artifacts", lambda: [registry.get("pnpp_appd_googlenet")])
    results = tmp_path / "res"
    results.mkdir()
    src = repo_root() / "results" / "pnpp_appd_googlenet.csv"
    (results / src.name).write_text(src.read_text())
    text = build_report("quick", results=results, figures=tmp_path, out=tmp_path / "r.html").read_text()
    assert "No claim has quick rows yet" in text and 'id="pnpp_appd_googlenet"' in text


def test_the_template_escapes_what_it_shows():
    page = render(
        {
            "profile": "<quick>",
            "provenance": [],
            "done": 0,
            "total": 0,
            "verdict_classes": verdicts.VERDICTS,
            "legend": [],
            "counts": [],
            "papers": [],
            "profile_note": "",
            "trains": "",
            "regime": "",
            "power_note": "",
            "q": 0.05,
            "delta": 1.0,
        }
    )
    assert "&lt;quick&gt;" in page and "<quick>" not in page


def test_device_column_only_where_rows_come_from_several():
    rows = _rows().assign(dataset="synthetic", device="cpu")
    assert "device" not in numbers_table(rows)["columns"]
    both = pd.concat([rows, rows.assign(device="cuda", value=rows["value"] + 0.5)])
    table = numbers_table(both)
    assert "device" in table["columns"] and any("cuda" in row for row in table["rows"])


def test_a_sweeps_flags_mark_the_rows_they_tag_in_words():
    from dmllab.experiments.pnpp._common import SWEEP_TAGS

    rows = _rows().assign(dataset="synthetic", param_t=1.0, param_preset=False, param_below=False)
    rows.loc[rows["variant"] == "B", "param_preset"] = True
    rows.loc[rows["variant"] == "C", "param_below"] = True
    table = numbers_table(rows)
    assert "preset" not in table["columns"] and "below" not in table["columns"]
    assert [r[0] for r in table["rows"]] == ["A", "B (preset)", "C (below)", "D"]
    assert SWEEP_TAGS["preset"] in table["notes"][-1] and SWEEP_TAGS["below"] in table["notes"][-1]
