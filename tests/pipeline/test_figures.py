"""A figure is a function of its CSV: drawing it twice gives the same picture whatever the process drew before."""

from __future__ import annotations

import shutil

import numpy as np

from dmllab import paths
from dmllab.experiments import registry
from dmllab.pipeline.notebook import draw_figures


def _pixels(fig) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


def test_strip_plot_jitter_does_not_depend_on_the_global_random_state(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.setenv("DMLLAB_RESULTS", str(tmp_path))
    monkeypatch.setenv(paths.STUDY_ENV, "1")  # the committed quick rows, as a study reads them
    aid = "heated_table4_classification"  # bars and per-seed dots (seaborn's stripplot jitter)
    shutil.copy(paths.repo_root() / "results" / f"{aid}.csv", tmp_path / f"{aid}.csv")
    artifact = registry.get(aid)
    pictures = []
    for seed in (1, 2):
        np.random.seed(seed)
        (fig,) = draw_figures(artifact, "quick")
        pictures.append(_pixels(fig))
        plt.close(fig)
    assert np.array_equal(*pictures)
    np.random.seed(3)
    draw_figures(artifact, "quick")
    assert np.random.rand() == np.random.RandomState(3).rand()  # the caller's state is left as it was
    plt.close("all")
