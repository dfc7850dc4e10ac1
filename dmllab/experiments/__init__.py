"""The experiment layer: every paper table and figure as one module declaring its runs, rows, claims,
reference cells and figures (:class:`Artifact`), discovered by :mod:`dmllab.experiments.registry`; the runs are
placed and read through :class:`Lookup` (:mod:`dmllab.experiments.lookup`), and what artifacts share is in
:mod:`dmllab.experiments.kit`, :mod:`dmllab.experiments.analogue` and :mod:`dmllab.experiments.figures`."""

from dmllab.experiments.artifact import (
    PAPER_TITLES,
    PAPERS,
    Artifact,
    Claim,
    Figure,
    Printed,
    Run,
    Smallest,
    printed,
)
from dmllab.experiments.lookup import Lookup, MissingRunError
from dmllab.experiments.params import Params
from dmllab.experiments.registry import all_artifacts, get, names, select

__all__ = ["PAPERS", "PAPER_TITLES", "Artifact", "Claim", "Figure", "Lookup", "MissingRunError", "Params"]
__all__ += ["Printed", "Run", "Smallest", "all_artifacts", "get", "names", "printed", "select"]
