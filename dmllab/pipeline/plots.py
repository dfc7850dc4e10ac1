"""What the plotting notebooks (``notebooks/plots_<paper>.ipynb``) call: every figure of a paper's artifacts,
drawn from ``results/*.csv`` only and written to ``figures/`` (``figures/<profile>/`` for profiles other than quick)."""

from __future__ import annotations

from pathlib import Path

from dmllab import paths
from dmllab.experiments import registry
from dmllab.pipeline.notebook import draw_figures
from dmllab.results import read_artifact_rows


def draw_paper(paper: str, profile: str = "quick") -> dict[str, str]:
    """Draw and save every figure of ``paper``'s artifacts that has rows for ``profile``.

    Returns ``{artifact id: "N figure(s)" | "no rows yet"}``. An artifact whose figure fails does not stop the
    others; the failures are raised together at the end (so the study reports them).
    """
    import matplotlib.pyplot as plt

    out: dict[str, str] = {}
    for artifact in registry.all_artifacts():
        if artifact.paper != paper or not artifact.figures:
            continue
        if read_artifact_rows(artifact.id, profile).empty:
            out[artifact.id] = "no rows yet"
            continue
        try:
            figs = draw_figures(artifact, profile, save=True)
        except (
            Exception
        ) as err:  # reported in the notebook output and by the study, never fatal to the others
            out[artifact.id] = f"error: {type(err).__name__}: {err}"
            continue
        for fig in figs:
            plt.close(fig)
        out[artifact.id] = f"{len(figs)} figure(s) in {Path(paths.profile_figures_dir(profile)).name}/"
    failed = {k: v for k, v in out.items() if v.startswith("error")}
    if failed:  # after drawing all the others, so one broken figure costs only itself
        raise RuntimeError("figures failed: " + "; ".join(f"{k}: {v}" for k, v in failed.items()))
    return out
