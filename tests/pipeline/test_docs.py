"""The generated documentation (``dmllab docs``) is up to date, the README stays a short guide, and the links of
the README and ``docs/`` resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dmllab.cli import main
from dmllab.paths import repo_root
from dmllab.pipeline import docs, docs_benchmarks

ROOT = repo_root()
README_MAX_LINES = 250


def test_generated_docs_are_up_to_date():
    from dmllab.cli import build_parser

    stale = [str(p.relative_to(ROOT)) for p in docs.stale_files(ROOT, build_parser())]
    assert not stale, f"out of date: {stale}; run `dmllab docs` and commit the result"


def test_readme_is_a_short_guide():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"
    head = "\n".join(lines[:12])
    assert "make study" in head and "make test" in head, "the quickstart must open the README"


def test_every_benchmark_csv_is_described():
    csvs = {p.stem for p in (ROOT / "results" / "benchmarks").glob("*.csv")}
    described = docs_benchmarks.descriptions(ROOT / "results" / "benchmarks")
    missing = sorted(csvs - set(described))
    assert not missing, f"add these to results/benchmarks/{docs_benchmarks.DESCRIPTIONS}: {missing}"
    assert not set(docs_benchmarks.VIEWS) - csvs
    for name, spec in described.items():
        assert (ROOT / "benchmarks" / spec.script).exists(), (name, spec.script)
        assert spec.script in spec.command, (name, spec.command)


def test_verdict_counts():
    assert docs.verdict_counts([]) == "no claims"
    got = docs.verdict_counts(["inconclusive", "yes", "not testable", "yes", "no"])
    assert got == "2 yes, 1 no, 1 inconclusive, 1 not testable"
    assert docs.verdict_counts(["maybe", "yes"]) == "1 yes, 1 maybe"


def test_replace_between_needs_both_markers():
    text = "a\n<b>\nold\n<e>\nz"
    assert docs.replace_between(text, "<b>", "<e>", "new") == "a\n<b>\nnew\n<e>\nz"
    with pytest.raises(ValueError, match="markers"):
        docs.replace_between("no markers here", "<b>", "<e>", "new")


def test_compact_and_pivot():
    header, rows, notes = docs_benchmarks.compact(["k", "v", "same"], [["a", "1", "x"], ["b", "2", "x"]])
    assert header == ["k", "v"] and rows == [["a", "1"], ["b", "2"]]
    assert "`same` = x" in notes[0]
    header, rows, _ = docs_benchmarks.pivot(
        ["m", "metric", "value", "unit"],
        [["a", "t", "1", "s"], ["a", "r", "0.5", ""], ["b", "t", "2", "s"]],
        ("m",),
        "metric",
        "value",
        unit="unit",
    )
    assert header == ["m", "t (s)", "r"] and rows == [["a", "1", "0.5"], ["b", "2", ""]]


def test_check_fails_then_write_fixes(tmp_path, capsys):
    """``--check`` on a checkout whose generated parts are stale exits 1 and names them; ``dmllab docs`` writes
    them and ``--check`` passes."""
    (tmp_path / "README.md").write_text(f"# x\n\n{docs.TABLE_BEGIN}\nstale\n{docs.TABLE_END}\n")
    gpu = tmp_path / "docs" / "guide" / "gpu.md"
    gpu.parent.mkdir(parents=True)
    gpu.write_text(f"# GPU\n\n{docs.COST_BEGIN}\nstale\n{docs.COST_END}\n")
    (tmp_path / "results").symlink_to(ROOT / "results")
    assert main(["docs", "--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "README.md" in err and "docs/benchmarks.md" in err and "docs/guide/cli.md" in err
    assert "docs/guide/gpu.md" in err
    assert main(["docs", "--root", str(tmp_path)]) == 0
    assert main(["docs", "--check", "--root", str(tmp_path)]) == 0
    readme = (tmp_path / "README.md").read_text()
    assert "`dmllab study --only pnpp_table3_6_sota`" in readme and "stale" not in readme
    assert "| the whole paper study (each run once) |" in gpu.read_text() and "stale" not in gpu.read_text()


# ------------------------------------------------------------------------------------------------- links

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("", path.read_text()).splitlines():
        if line.startswith("#"):
            slug = _slug(line.lstrip("#"))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in _LINK.findall(_FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"
