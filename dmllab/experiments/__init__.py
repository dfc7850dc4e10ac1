"""The experiment layer: every paper table and figure as one module declaring its runs, rows, claims,
reference cells and figures (:class:`Artifact`), discovered by :mod:`dmllab.experiments.registry`."""

from dmllab.experiments.base import (
    PAPER_TITLES,
    PAPERS,
    Artifact,
    Claim,
    Figure,
    MissingRunError,
    Params,
    Run,
    RunLookup,
)
from dmllab.experiments.registry import all_artifacts, get, names, select

__all__ = [
    "PAPERS",
    "PAPER_TITLES",
    "Artifact",
    "Claim",
    "Figure",
    "MissingRunError",
    "Params",
    "Run",
    "RunLookup",
    "all_artifacts",
    "get",
    "names",
    "select",
]
