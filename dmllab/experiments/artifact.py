"""What an artifact is (a paper's table or figure declared as data and a few small functions).

An :class:`Artifact` names what it reproduces, its parameters per profile, the training runs it needs (:class:`Run`:
a config plus a seed, so that a study plans and trains them before any notebook runs), how its tidy rows are derived
(by default the test metrics of its runs), its claims (:class:`Claim`, judged over seeds), the printed cells of the
paper its rows face, and its figures, drawn from the tidy CSVs only. One module per artifact under
``dmllab/experiments/<package>/`` defines ``ARTIFACT`` (or ``ARTIFACTS``); :mod:`dmllab.experiments.registry` finds
them. Its parameters are resolved into :class:`~dmllab.experiments.params.Params` by
:func:`dmllab.experiments.params.resolve_parameters`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dmllab.experiments.params import EXECUTION_PARAMETERS, STANDARD_PARAMETERS, Params, resolve_parameters
from dmllab.profiles import PROFILES

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure as MplFigure

    from dmllab.experiments.lookup import Lookup
    from dmllab.training.config import ExperimentConfig

# Papers in report order; "dmllab" holds the package's own artifacts (the offline benchmark).
PAPERS: tuple[str, ...] = ("pnpp", "proxy_anchor", "heated", "proxy_synthesis", "dmllab")
PAPER_TITLES: dict[str, str] = {
    "pnpp": "ProxyNCA++ (Teh, DeVries, Taylor, ECCV 2020)",
    "proxy_anchor": "Proxy Anchor Loss (Kim, Kim, Cho, Kwak, CVPR 2020)",
    "heated": "Heated-up Softmax Embedding (Zhang, Lan, Wang, Chen, 2018)",
    "proxy_synthesis": "Proxy Synthesis (Gu, Ko, Kim, AAAI 2021)",
    "dmllab": "dmllab (this package)",
}
# ``paper`` as spelled in results/reference/*.csv.
REFERENCE_PAPER: dict[str, str] = {
    "pnpp": "pnpp",
    "proxy_anchor": "proxy_anchor",
    "heated": "heated_softmax",
    "proxy_synthesis": "proxy_synthesis",
}
# Artifact ids start with the paper's prefix: ``<prefix>_<table|fig|sec|app><n>_<topic>`` (pnpp_fig3_two_moons).
ID_PREFIX: dict[str, str] = {
    "pnpp": "pnpp",
    "proxy_anchor": "pa",
    "heated": "heated",
    "proxy_synthesis": "ps",
}
# How much a paper's argument rests on an artifact, most first: its headline results table, the ablations its claims
# rest on, the supporting figures and sweeps, the appendix and supplement. A study under a GPU-hour budget trains
# them in this order (dmllab.experiments.registry.by_importance).
TIERS: tuple[str, ...] = ("headline", "ablation", "supporting", "appendix")
# The offline benchmark stands in for the fine-grained datasets; its rows face the paper's CUB cells.
STAND_IN_DATASET: dict[str, str] = {"synthetic": "cub", "digits": "cub"}


@dataclass(frozen=True)
class Run:
    """One training run an artifact needs: a composed config, a seed, and the name its rows use.

    Two artifacts that need the same (config, seed) share one stored run. ``variant`` and ``tags`` only label the
    run's rows. Where it runs (device, data root) is set by :func:`dmllab.experiments.lookup.place`.
    """

    config: ExperimentConfig
    seed: int
    variant: str = ""
    tags: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        """``<run key>/seed<k>``: the run store's identity of this run (config hash + implicit inputs)."""
        from dmllab.training.store import run_key

        return f"{run_key(self.config)}/seed{self.seed}"

    @property
    def tag(self) -> dict[str, Any]:
        return dict(self.tags)


CLAIM_KINDS: tuple[str, ...] = ("verdict", "check")


@dataclass(frozen=True)
class Claim:
    """A statement of the paper, judged over seeds.

    ``effect(rows)`` returns the effect per seed (a ``pd.Series`` indexed by seed, e.g. R@1 with a component
    minus R@1 without it, paired on the seed), signed so that the claim says ``effect > 0``; ``None`` or an empty
    series when the rows cannot decide. The verdict is "yes" only when the effect's 95% interval over seeds
    excludes zero on the positive side (:func:`dmllab.experiments.stats.verdict`).

    Args:
        text: the statement, e.g. "+max improves R@1".
        effect: rows -> per-seed effect (positive = the claim holds).
        unit: the effect's unit, shown in the report ("R@1 points", "%", "").
        paper_says: what the paper reports: "yes" unless the paper itself contradicts the statement.
        differs: one line, what differs from the paper in this comparison on a profile (the report prints it next
            to any verdict other than "yes"): a string for the quick and smoke profiles (the analogue), or
            ``{profile: line}``.
        arms: the methods the claim compares, by their labels in the offline benchmark's "trains" rows (e.g.
            ``"proxynca++"``, ``"proxy_synthesis:normsoftmax"``): on a profile where one of them does not train,
            the claim is "not testable".
        not_testable: ``{profile: why}``: profiles on which the paper's procedure cannot be kept, so the claim is
            "not testable" there whatever the rows say.
        kind: "verdict" (judged over seeds) or "check" (an analytic property of a toy: shown as a pass/fail check,
            not counted among the verdicts).
        key: a short identifier, unique within the artifact (``same_as`` refers to it).
        same_as: ``"<artifact id>:<claim key>"`` when this claim is the same comparison on the same runs as another
            artifact's claim: the summary counts it once.
    """

    text: str
    effect: Callable[[pd.DataFrame], pd.Series | None]
    unit: str = ""
    paper_says: str = "yes"
    differs: str | Mapping[str, str] = ""
    arms: tuple[str, ...] = ()
    not_testable: Mapping[str, str] = field(default_factory=dict)
    kind: str = "verdict"
    key: str = ""
    same_as: str = ""

    def __post_init__(self) -> None:
        if self.kind not in CLAIM_KINDS:
            raise ValueError(
                f"claim {self.text!r}: unknown kind {self.kind!r}; valid: {', '.join(CLAIM_KINDS)}"
            )
        bad = sorted(set(self.not_testable) - set(PROFILES))
        if bad or (isinstance(self.differs, Mapping) and set(self.differs) - set(PROFILES)):
            raise ValueError(f"claim {self.text!r}: profiles must be among {PROFILES}")

    def differs_on(self, profile: str) -> str:
        """What differs from the paper on ``profile`` ("" when nothing is stated)."""
        if isinstance(self.differs, Mapping):
            return self.differs.get(profile, "")
        return self.differs if profile in ("quick", "smoke") else ""


@dataclass(frozen=True)
class Figure:
    """A figure of the artifact: ``draw(tables) -> matplotlib Figure`` from the tidy CSVs only.

    ``tables`` maps ``"rows"`` to the artifact's rows (this profile) and every extra table name (see
    :attr:`Artifact.tables`) to its CSV. The file is ``figures/<artifact id><suffix>.png`` (and ``.pdf``).
    """

    draw: Callable[[Mapping[str, pd.DataFrame]], MplFigure]
    suffix: str = ""
    caption: str = ""


Rows = list[dict[str, Any]]
Derive = Callable[[Params, "Lookup"], "Rows | tuple[Rows, dict[str, Any]]"]


def _no_runs(params: Params) -> Sequence[Run]:
    return ()


@dataclass(frozen=True)
class Artifact:
    """One reproduced table or figure of a paper (see the module docstring).

    Args:
        id: ``<paper>_<table|fig|sec><n>_<topic>``: notebook stem, CSV and figure prefix.
        paper: one of :data:`PAPERS`.
        label: the paper's label, "Table 7" or "Fig. 4b".
        title: one line.
        description: what the paper claims and what dmllab varies (markdown).
        parameters: ``{profile: {name: value}}`` for every profile in :data:`PROFILES` with the same keys; may
            include ``seeds``.
        runs: ``runs(params) -> list[Run]``; none for toy artifacts.
        rows: ``rows(params, lookup) -> rows`` or ``(rows, extra tables)``: tidy rows (:func:`dmllab.results.tidy`)
            and ``{name: DataFrame}`` written as ``results/<id>.<name>.csv``, from what the runs left
            (:class:`dmllab.experiments.lookup.Lookup`). Default: the test metrics of every run.
        claims: judged over seeds.
        reference: maps an aggregated row (``variant, dataset, metric`` and ``param_*``) to the printed cell
            ``(artifact label, row, column)`` of ``results/reference``; ``None`` where the paper prints none.
        figures: drawn from the CSVs only.
        tables: names of the extra tables ``rows`` returns.
        parameter_help: one line per artifact parameter, shown in the parameters cell.
        not_reproduced: rows of the paper that dmllab cannot reproduce, with the reason (listed in the report).
        tier: one of :data:`TIERS`, how much the paper's argument rests on it (a budgeted study's order).
    """

    id: str
    paper: str
    label: str
    title: str
    description: str
    parameters: Mapping[str, Mapping[str, Any]]
    rows: Derive | None = None
    runs: Callable[[Params], Sequence[Run]] = _no_runs
    claims: tuple[Claim, ...] = ()
    reference: Callable[[Mapping[str, Any]], tuple[str, str, str] | None] | None = None
    figures: tuple[Figure, ...] = ()
    tables: tuple[str, ...] = ()
    parameter_help: Mapping[str, str] = field(default_factory=dict)
    not_reproduced: Mapping[str, str] = field(default_factory=dict)
    tier: str = "supporting"

    def __post_init__(self) -> None:
        if self.paper not in PAPERS:
            raise ValueError(f"artifact {self.id!r}: unknown paper {self.paper!r}; valid papers: {PAPERS}")
        if self.tier not in TIERS:
            raise ValueError(
                f"artifact {self.id!r}: unknown tier {self.tier!r}; valid tiers: {', '.join(TIERS)}"
            )
        prefix = ID_PREFIX.get(self.paper)
        if prefix and not re.fullmatch(rf"{prefix}_(table|fig|sec|app)[0-9a-z_]+", self.id):
            raise ValueError(
                f"artifact id {self.id!r} must read {prefix}_<table|fig|sec|app><n>_<topic> (paper {self.paper})"
            )
        if self.rows is None and self.runs is _no_runs:
            raise ValueError(f"artifact {self.id!r}: give its runs, its rows, or both")
        if set(self.parameters) != set(PROFILES):
            raise ValueError(
                f"artifact {self.id!r}: parameters must give every profile {PROFILES}, got {sorted(self.parameters)}"
            )
        keys = [set(self.parameters[p]) for p in PROFILES]
        if any(k != keys[0] for k in keys):
            raise ValueError(f"artifact {self.id!r}: the profiles declare different parameter keys: {keys}")
        clash = keys[0] & {"profile", "device", "data_root", *EXECUTION_PARAMETERS}
        if clash:
            raise ValueError(
                f"artifact {self.id!r}: {sorted(clash)} are standard parameters, not per profile"
            )
        claim_keys = [c.key for c in self.claims if c.key]
        if len(claim_keys) != len(set(claim_keys)):
            raise ValueError(f"artifact {self.id!r}: claim keys must be unique, got {claim_keys}")

    @property
    def name(self) -> str:  # the notebook stem
        return self.id

    @property
    def specific_parameters(self) -> tuple[str, ...]:
        """The artifact's own parameter names (beyond the standard ones), in declaration order."""
        return tuple(k for k in self.parameters[PROFILES[0]] if k != "seeds")

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return STANDARD_PARAMETERS + self.specific_parameters

    def defaults(self, profile: str) -> dict[str, Any]:
        """The parameter values of ``profile`` (including ``seeds``)."""
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
        values: dict[str, Any] = {"seeds": [0]}
        values.update(self.parameters[profile])
        return values

    def params(
        self, profile: str, device: str = "auto", data_root: str | None = None, **given: Any
    ) -> Params:
        """The resolved :class:`Params` of ``profile`` (defaults, overridden by ``given``)."""
        return resolve_parameters(
            self, {"profile": profile, "device": device, "data_root": data_root, **given}
        )

    def derive(self, params: Params, lookup: Lookup) -> tuple[Rows, dict[str, Any]]:
        """``(rows, extra tables)`` of ``params``: :attr:`rows`, or the test metrics of every run."""
        out = self.rows(params, lookup) if self.rows is not None else lookup.rows(self.runs(params))
        rows, tables = out if isinstance(out, tuple) else (out, {})
        return rows, dict(tables)
