"""The registry of paper artifacts (a figure or a table), one per notebook.

An :class:`Artifact` says what a notebook reproduces, which parameters it takes (with defaults per profile),
which claims of the paper its numbers can confirm or contradict, and, optionally, how its rows map onto the
paper's transcribed numbers (``results/reference/*.csv``). The notebook of an artifact is generated from it
(:func:`dmllab.pipeline.notebook.write_notebook`), so name, parameters and cells stay in one place.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dmllab.registry import Registry

if TYPE_CHECKING:
    import pandas as pd

PROFILES: tuple[str, ...] = ("smoke", "quick", "paper")
# Parameters every notebook has; ``None`` means "the profile's default".
STANDARD_PARAMETERS: tuple[str, ...] = ("profile", "seeds", "device", "data_root")
# Papers in report order; "dmllab" holds the package's own artifacts (the offline benchmark demo).
PAPERS: tuple[str, ...] = ("pnpp", "proxy_anchor", "heated_softmax", "proxy_synthesis", "dmllab")
PAPER_TITLES: dict[str, str] = {
    "pnpp": "ProxyNCA++ (Teh, DeVries, Taylor, ECCV 2020)",
    "proxy_anchor": "Proxy Anchor Loss (Kim, Kim, Cho, Kwak, CVPR 2020)",
    "heated_softmax": "Heated-up Softmax Embedding (Zhang, Lan, Wang, Chen, 2018)",
    "proxy_synthesis": "Proxy Synthesis (Gu, Ko, Kim, AAAI 2021)",
    "dmllab": "dmllab (this package)",
}

# Modules whose import registers artifacts. Every one is imported by load_all(); a missing one is an error.
ARTIFACT_MODULES: tuple[str, ...] = ("dmllab.pipeline.demo", "dmllab.toys.artifacts")

Cell = tuple[str, str]  # ("markdown" | "code", source)


@dataclass(frozen=True)
class Claim:
    """A qualitative statement of the paper that a result file can confirm.

    Args:
        text: the statement, e.g. "lower temperature refines the decision boundary".
        check: ``check(rows) -> True | False | None`` on the artifact's tidy rows of one profile;
            ``None`` when the rows cannot decide (too few variants, a missing metric).
        paper_says: what the paper reports ("yes" unless the paper itself contradicts the statement).
    """

    text: str
    check: Callable[[pd.DataFrame], bool | None]
    paper_says: str = "yes"


@dataclass(frozen=True)
class Artifact:
    """One reproduced figure or table, and its notebook ``notebooks/<name>.ipynb``.

    Args:
        name: notebook stem, also the result CSV and figure prefix (``results/<name>.csv``, ``figures/<name>*``).
        paper: one of :data:`PAPERS`.
        artifact: the paper's label, e.g. ``"Fig. 3"`` or ``"Table 2"``.
        title: one-line title shown in the notebook and the report.
        description: what the artifact shows and how it is reproduced (markdown).
        parameters: ``{profile: {key: default}}`` for every profile in :data:`PROFILES`, same keys in each;
            may include ``"seeds"`` (default ``[0]``). The standard parameters (profile, seeds, device,
            data_root) are always accepted.
        claims: the paper's qualitative statements checked on the quick/smoke profiles.
        cells: the notebook's body cells after the setup cell (compute, write results, plot).
        reference_key: maps one aggregated result row (``variant, dataset, metric`` and the ``param_*``
            values) to ``(artifact, row, column)`` of ``results/reference``; ``None`` when not in the paper.
        parameter_help: a one-line comment per artifact-specific parameter, shown in the parameters cell.
    """

    name: str
    paper: str
    artifact: str
    title: str
    description: str
    parameters: Mapping[str, Mapping[str, Any]]
    claims: tuple[Claim, ...] = ()
    cells: tuple[Cell, ...] = ()
    reference_key: Callable[[Mapping[str, Any]], tuple[str, str, str] | None] | None = None
    parameter_help: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.paper not in PAPERS:
            raise ValueError(f"artifact {self.name!r}: unknown paper {self.paper!r}; valid papers: {PAPERS}")
        if set(self.parameters) != set(PROFILES):
            raise ValueError(
                f"artifact {self.name!r}: parameters must give every profile {PROFILES}, got {sorted(self.parameters)}"
            )
        keys = [set(self.parameters[p]) for p in PROFILES]
        if any(k != keys[0] for k in keys):
            raise ValueError(f"artifact {self.name!r}: the profiles declare different parameter keys: {keys}")
        clash = keys[0] & {"profile", "device", "data_root"}
        if clash:
            raise ValueError(
                f"artifact {self.name!r}: {sorted(clash)} are standard parameters, not per profile"
            )
        for kind, _ in self.cells:
            if kind not in ("markdown", "code"):
                raise ValueError(f"artifact {self.name!r}: cell kind must be markdown or code, got {kind!r}")

    @property
    def specific_parameters(self) -> tuple[str, ...]:
        """The artifact's own parameter names (beyond the standard ones), in declaration order."""
        return tuple(k for k in self.parameters[PROFILES[0]] if k != "seeds")

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """Every parameter the notebook accepts: the standard ones, then the artifact's own."""
        return STANDARD_PARAMETERS + self.specific_parameters

    def defaults(self, profile: str) -> dict[str, Any]:
        """The parameter values of ``profile`` (including ``seeds``)."""
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
        values = {"seeds": [0]}
        values.update(self.parameters[profile])
        return values


ARTIFACTS: Registry[Artifact] = Registry("artifact")


def register(artifact: Artifact) -> Artifact:
    """Add ``artifact`` to :data:`ARTIFACTS` (a duplicate name raises)."""
    ARTIFACTS.register(artifact.name, artifact)
    return artifact


def load_all() -> Registry[Artifact]:
    """Import every module of :data:`ARTIFACT_MODULES` (registering their artifacts) and return the registry."""
    for module in ARTIFACT_MODULES:
        importlib.import_module(module)
    return ARTIFACTS


def ordered() -> list[Artifact]:
    """All registered artifacts in report order: by paper (:data:`PAPERS`), then by name."""
    load_all()
    arts = [ARTIFACTS.get(n) for n in ARTIFACTS.names()]
    return sorted(arts, key=lambda a: (PAPERS.index(a.paper), a.name))
