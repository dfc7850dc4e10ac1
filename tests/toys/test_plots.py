"""Every figure function of dmllab.plots.toys draws from tiny compute outputs and writes PNG + PDF."""

from __future__ import annotations

import matplotlib
import pandas as pd
import pytest

from dmllab.plots import save_figure
from dmllab.plots import toys as tp
from dmllab.toys import heated, ps_gaussian, two_moons
from dmllab.toys.proxy_gradients import records_to_rows

matplotlib.use("Agg")


def _saved(fig, tmp_path, name):
    import matplotlib.pyplot as plt

    paths = save_figure(fig, tmp_path / name)
    plt.close(fig)
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_two_moons_figures(tmp_path):
    rows, plot = two_moons.run_two_moons([1.0, 0.5], steps=3, grid_resolution=20)
    df = pd.DataFrame(rows)
    _saved(tp.plot_two_moons(plot, df), tmp_path, "moons")
    _saved(tp.plot_two_moons_metrics(df), tmp_path, "moons_metrics")


def test_ps_figure(tmp_path):
    rows, plot = ps_gaussian.run_ps_gaussian(n_per_class=20, steps=3, grid_resolution=12)
    _saved(tp.plot_ps_confidence(plot, pd.DataFrame(rows)), tmp_path, "ps")


def test_heated_figures(tmp_path, small_digits):
    rows, _ = heated.run_heated_gradients([0.1, 1.0, 10.0], steps=3, data=small_digits)
    _saved(tp.plot_heated_gradients(pd.DataFrame(rows), 16.0), tmp_path, "h1")
    rows, plot = heated.run_heated_embeddings(steps=3, hidden=[8], data=small_digits)
    _saved(tp.plot_heated_embeddings(plot, pd.DataFrame(rows)), tmp_path, "h2")


def test_proxy_gradient_figure(tmp_path):
    recs = [
        {
            "epoch": 1,
            "step": s,
            "global_step": s,
            "proxies": 1e-3 * s,
            "embedding": 1.0,
            "backbone": 2.0,
            "proxy_norm": 0.5 + s,
        }
        for s in range(1, 6)
    ]
    rows = records_to_rows(recs, variant="-fast", seed=0, dataset="synthetic", params={})
    rows += records_to_rows(recs, variant="+fast", seed=0, dataset="synthetic", params={})
    _saved(tp.plot_proxy_gradient_ratio(pd.DataFrame(rows)), tmp_path, "pg")


def test_fmt_temperature():
    assert [tp._fmt_t(t) for t in (1.0, 0.25, 0.3)] == ["1", "1/4", "0.3"]
    with pytest.raises(ZeroDivisionError):
        tp._fmt_t(0.0)
