"""The README's "Adding an artifact" example is real code: read from README.md, registered for the test beside the
real artifacts, it shares its runs with the artifact it shortens, gets its notebook, and on the smoke profile trains,
derives its rows, judges its claim and draws its figure."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from dmllab.experiments import registry
from dmllab.experiments.lookup import Lookup, planned_runs

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- the artifact example: tests/experiments/test_readme_example.py registers and runs it -->"
MODULE = "dmllab.experiments.pnpp.readme_example"


def readme_example() -> str:
    """The python block right after :data:`MARKER` in README.md."""
    text = README.read_text()
    assert MARKER in text, "README.md lost the artifact example's marker"
    found = re.match(r"\s*```python\n(.*?)```", text.split(MARKER, 1)[1], re.S)
    assert found, "the marker is not followed by a python block"
    return found.group(1)


@pytest.fixture
def example(monkeypatch):
    """The README's artifact, declared in a module of its own and registered until the test ends."""
    module = types.ModuleType(MODULE)
    exec(compile(readme_example(), "README.md", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, MODULE, module)
    artifact = module.ARTIFACT
    monkeypatch.setitem(registry._modules(), artifact.id, (artifact, MODULE))
    monkeypatch.setitem(registry._discover(), artifact.id, artifact)
    return artifact


def test_it_is_registered_and_gets_a_notebook(example):
    from dmllab.pipeline.template import make_notebook

    assert registry.select(example.id) == [example] and registry.get(example.id) is example
    assert registry.module_path(example.id) == "dmllab/experiments/pnpp/readme_example.py"
    source = "".join(cell.source for cell in make_notebook(example).cells)
    assert f'nb.setup(globals(), "{example.id}")' in source and "temperatures" in source


def test_it_shares_its_runs_with_the_artifact_it_shortens(example):
    """kit.config builds a config the one way: the README's T sweep is a subset of Fig. 4a's runs, and on the
    paper profile it trains on CUB, not on the offline benchmark."""
    fig4a = registry.get("pnpp_fig4a_temperature")
    keys = {r.key for r in planned_runs(example, example.params("quick", "device=cpu"))}
    assert len(keys) == 3 * 5  # three temperatures, five seeds
    assert keys <= {r.key for r in planned_runs(fig4a, fig4a.params("quick", "device=cpu"))}
    assert {r.config.dataset for r in example.runs(example.params("paper", "device=cpu"))} == {"cub"}


def test_it_trains_derives_judges_and_draws_on_smoke(example, tmp_path, monkeypatch):
    for key in ("DMLLAB_RESULTS", "DMLLAB_CACHE", "DMLLAB_FIGURES"):
        monkeypatch.setenv(key, str(tmp_path / key.lower()))
    params = example.params("smoke", "device=cpu")
    rows, tables = example.derive(params, Lookup(params, train_missing=True))
    df = pd.DataFrame(rows)
    assert tables == {} and set(df["seed"]) == {0, 1}
    effect = example.claims[0].effect(df)
    r1 = {
        (r["seed"], round(float(r["param_temperature"]), 6)): r["value"] for r in rows if r["metric"] == "R@1"
    }
    naive = {s: r1[(s, round(1 / 9, 6))] - r1[(s, 1.0)] for s in (0, 1)}  # R@1 at T = 1/9 minus at T = 1
    assert effect.to_dict() == pytest.approx(naive, abs=0, rel=1e-12)
    figure = example.figures[0].draw({"rows": df})
    (line,) = figure.axes[0].get_lines()
    assert list(line.get_xdata()) == pytest.approx([1 / 9, 1.0])
