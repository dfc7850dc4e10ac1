"""What the plotting notebooks (``notebooks/plots_<paper>.ipynb``) call: every figure of a paper's artifacts,
drawn from the CSVs only, in the execution's :func:`dmllab.paths.destination` and, in a notebook, shown under its
artifact's title."""

from __future__ import annotations

from dmllab import paths
from dmllab.experiments import registry
from dmllab.pipeline.notebook import draw_figures, ipython_shell
from dmllab.profiles import resolve_device
from dmllab.results import read_artifact_rows


def draw_paper(
    paper: str, profile: str = "quick", device: str = "auto", *, show: bool | None = None
) -> dict[str, str]:
    """Draw and save every figure of ``paper``'s artifacts that has rows of ``profile`` on ``device`` (with ``show``,
    default in a notebook, each under its artifact's title); returns ``{id: "N figure(s) in <folder>/" | "no rows
    yet"}``. A failing figure stops no other: the failures are raised together at the end."""
    import matplotlib.pyplot as plt

    show = (
        getattr(ipython_shell(), "kernel", None) is not None if show is None else show
    )  # inline in a kernel
    device = resolve_device(device)
    where = paths.destination(profile, device)
    if not where.tracked:
        print(f"plots of {paper} ({profile}, {device}): {where.note()}")
    out: dict[str, str] = {}
    for artifact in registry.all_artifacts():
        if artifact.paper != paper or not artifact.figures:
            continue
        if read_artifact_rows(artifact.id, profile, folder=where.results).empty:
            out[artifact.id] = "no rows yet"
            continue
        try:
            figs = draw_figures(artifact, profile, save=True, device=device)
        except Exception as err:  # reported in the notebook and by the study, never fatal to the others
            out[artifact.id] = f"error: {type(err).__name__}: {err}"
            continue
        if show:
            from IPython.display import Markdown, display

            display(Markdown(f"### {artifact.label}: {artifact.title}"))
            for fig, figure in zip(figs, artifact.figures):
                display(fig)
                if figure.caption:
                    display(Markdown(f"*{figure.caption}*"))
        for fig in figs:
            plt.close(fig)
        out[artifact.id] = f"{len(figs)} figure(s) in {where.figures.name}/"
    failed = {k: v for k, v in out.items() if v.startswith("error")}
    if failed:  # after drawing all the others, so one broken figure costs only itself
        raise RuntimeError("figures failed: " + "; ".join(f"{k}: {v}" for k, v in failed.items()))
    return out
