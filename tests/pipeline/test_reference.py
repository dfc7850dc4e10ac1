"""dmllab.reference.load_reference against the schema of results/reference/*.csv."""

from __future__ import annotations

import pytest

from dmllab.reference import REFERENCE_COLUMNS, REFERENCE_PAPERS, load_reference, reference_dir

HEADER = ",".join(REFERENCE_COLUMNS)


def test_loads_and_filters(tmp_path):
    (tmp_path / "a.csv").write_text(HEADER + "\npnpp,Table 2,ProxyNCA++,R@1,cub,R@1,64.7,\n")
    (tmp_path / "b.csv").write_text(
        HEADER + '\nproxy_anchor,Table 1,"Proxy-Anchor, 512",R@1,cub,R@1,68.4,bn-inception\n'
    )
    df = load_reference(directory=tmp_path)
    assert list(df.columns) == list(REFERENCE_COLUMNS) + ["source"]
    assert df["value"].tolist() == [64.7, 68.4]
    only = load_reference("proxy_anchor", directory=tmp_path)
    assert only["row"].tolist() == ["Proxy-Anchor, 512"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("paper,artifact,row,column,dataset,metric,value\npnpp,T,r,c,cub,R@1,1\n", "missing \\['note'\\]"),
        (HEADER + "\nmypaper,T,r,c,cub,R@1,1,\n", "unknown or empty paper"),
        (HEADER + "\npnpp,T,r,c,cub,R@1,sixty,\n", "non-numeric value"),
    ],
)
def test_bad_files(tmp_path, text, message):
    (tmp_path / "x.csv").write_text(text)
    with pytest.raises(ValueError, match=message):
        load_reference(directory=tmp_path)


def test_unknown_paper_and_empty_dir(tmp_path):
    with pytest.raises(ValueError, match="valid papers"):
        load_reference("pnpp2", directory=tmp_path)
    assert load_reference(directory=tmp_path).empty


def test_committed_reference_files_load():
    if not list(reference_dir().glob("*.csv")):
        pytest.skip(f"no transcribed reference files in {reference_dir()} yet")
    df = load_reference()
    assert set(df["paper"]) <= set(REFERENCE_PAPERS)
    assert df["value"].notna().all()
