from __future__ import annotations

import pandas as pd
import pytest

from dmllab.pipeline import notebook as nb
from dmllab.pipeline.artifacts import ARTIFACTS
from dmllab.toys import artifacts as ta

NAMES = [
    "pnpp_fig3_two_moons",
    "ps_fig2_gaussian",
    "heated_fig1_gradients",
    "heated_fig2_digits",
    "pnpp_sec36_proxy_gradients",
]


def test_all_five_registered_with_cells_and_claims():
    assert [a.name for a in ta.ALL] == NAMES
    for name in NAMES:
        art = ARTIFACTS.get(name)
        assert art.cells and art.claims


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_matches_the_artifact(name):
    path = nb.notebooks_dir() / f"{name}.ipynb"
    assert path.exists(), f"regenerate with dmllab.pipeline.notebook.write_notebook({name!r})"
    import nbformat

    committed = nbformat.read(path, as_version=4)
    want = nb.make_notebook(ARTIFACTS.get(name))
    assert [(c.cell_type, c.source) for c in committed.cells] == [(c.cell_type, c.source) for c in want.cells]
    assert all(not c.get("outputs") for c in committed.cells if c.cell_type == "code")
    params_cell = committed.cells[1]
    assert params_cell.metadata["tags"] == ["parameters"]
    declared = [line.split(" = ")[0] for line in params_cell.source.splitlines()[1:]]
    assert declared == list(ARTIFACTS.get(name).parameter_names)


def test_run_seeds_keeps_first_plot_data():
    def fn(seed, k):
        return [{"seed": seed, "k": k}], {"seed": seed}

    rows, plot = ta.run_seeds(fn, [3, 4], k=1)
    assert rows == [{"seed": 3, "k": 1}, {"seed": 4, "k": 1}] and plot == {"seed": 3}


def test_alpha_grid():
    g = ta.alpha_grid(0.01, 100.0, 5)
    assert g == pytest.approx([0.01, 0.1, 1.0, 10.0, 100.0])


def _frame(records):
    return pd.DataFrame.from_records(records)


def _claim(name, index):
    return ARTIFACTS.get(name).claims[index].check


def test_two_moons_claims():
    def rows(lengths):
        return _frame(
            [{"variant": f"T={t}", "metric": "boundary_length", "param_temperature": t, "value": v}
             for t, v in lengths.items()]
        )  # fmt: skip

    check = _claim("pnpp_fig3_two_moons", 0)
    assert check(rows({1.0: 5.0, 0.5: 6.0, 0.0625: 9.0})) is True
    assert check(rows({1.0: 9.0, 0.0625: 5.0})) is False
    assert check(rows({1.0: 9.0})) is None


def test_ps_claims():
    def rows(ns, ps):
        return _frame(
            [
                {"variant": "normsoftmax", "metric": "mean_conf_unseen", "value": ns},
                {"variant": "ps+normsoftmax", "metric": "mean_conf_unseen", "value": ps},
                {"variant": "normsoftmax", "metric": "input_transition_fraction", "value": ns},
                {"variant": "ps+normsoftmax", "metric": "input_transition_fraction", "value": ps},
            ]
        )

    lower, wider = _claim("ps_fig2_gaussian", 0), _claim("ps_fig2_gaussian", 1)
    assert lower(rows(0.99, 0.9)) is True and lower(rows(0.9, 0.99)) is False
    assert wider(rows(0.01, 0.05)) is True and wider(rows(0.05, 0.01)) is False
    assert _claim("ps_fig2_gaussian", 2)(rows(0.1, 0.2)) is None  # no embedding metric


def test_heated_fig1_claims():
    alphas = [0.01, 1.0, 10.0, 100.0]
    curves = {
        "centroid": [0.01, 1.0, 0.001, 0.0],
        "boundary": [0.01, 0.9, 3.0, 0.001],
        "incorrect": [0.01, 0.95, 10.0, 100.0],
    }
    df = _frame(
        [{"variant": g, "metric": "grad_norm", "param_alpha": a, "value": v}
         for g, vals in curves.items() for a, v in zip(alphas, vals)]
    )  # fmt: skip
    p1, p2c, p2i, peak = (_claim("heated_fig1_gradients", i) for i in range(4))
    assert p1(df) is True and p2c(df) is True and p2i(df) is True and peak(df) is True
    flipped = df.copy()
    flipped.loc[flipped["variant"] == "incorrect", "value"] = [0.01, 0.95, 10.0, 5.0]
    assert p2i(flipped) is False
    assert p1(df.iloc[:0]) is None


def test_heated_fig2_and_proxy_gradient_claims():
    df = _frame(
        [
            {"variant": "SM", "metric": "intra_inter_ratio", "value": 0.2},
            {"variant": "LN alpha=4", "metric": "intra_inter_ratio", "value": 0.1},
        ]
    )
    assert _claim("heated_fig2_digits", 0)(df) is True
    assert _claim("heated_fig2_digits", 1)(df) is None
    pg = _frame(
        [{"variant": "-fast", "metric": "ratio_proxies_embedding", "value": v} for v in (1e-3, 2e-3, 0.5)]
    )
    assert _claim("pnpp_sec36_proxy_gradients", 0)(pg) is True
    pg["value"] = [0.5, 0.6, 0.7]
    assert _claim("pnpp_sec36_proxy_gradients", 0)(pg) is False
