"""What an artifact is: a paper's table or figure declared as data and a few small functions (:class:`Artifact`):
its parameters per profile, the training runs it needs (:class:`Run`), how its tidy rows are derived, its claims
(:class:`Claim`, judged over seeds), the printed cells its rows face, and its figures, drawn from the tidy CSVs only.
One module per artifact under ``dmllab/experiments/<package>/`` defines ``ARTIFACT`` (or ``ARTIFACTS``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dmllab.experiments.params import (
    DATA_SEED,
    DEFAULT_DATA_SEED,
    DEFAULT_SEEDS,
    NOTEBOOK_PARAMETERS,
    STANDARD_PARAMETERS,
    Params,
    resolve_parameters,
)
from dmllab.profiles import PROFILES
from dmllab.reference import PAPER_TABLE

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure as MplFigure

    from dmllab.experiments.execution import Execution
    from dmllab.training.config import ExperimentConfig

# Views of the one table of papers (dmllab.reference.PAPER_TABLE): keys in report order, titles, the spelling in
# results/reference/*.csv, the artifact id prefixes.
PAPERS: tuple[str, ...] = tuple(p.key for p in PAPER_TABLE)
PAPER_TITLES: dict[str, str] = {p.key: p.title for p in PAPER_TABLE}
REFERENCE_PAPER: dict[str, str] = {p.key: p.reference for p in PAPER_TABLE if p.reference}
ID_PREFIX: dict[str, str] = {p.key: p.prefix for p in PAPER_TABLE if p.prefix}
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
    run's rows. Where it runs (the benchmark draw, device, data root) is set by
    :func:`dmllab.experiments.lookup.place`; ``draw`` pins the draw of the benchmark (None: the one the
    execution's ``data_seed`` gives the seed, :func:`dmllab.experiments.kit.draw_of`).
    """

    config: ExperimentConfig
    seed: int
    variant: str = ""
    tags: tuple[tuple[str, Any], ...] = ()
    draw: int | None = None

    @property
    def key(self) -> str:
        """``<run key>/seed<k>``: the run store's identity of this run (config hash + implicit inputs)."""
        from dmllab.training.store import run_key

        return f"{run_key(self.config)}/seed{self.seed}"

    @property
    def tag(self) -> dict[str, Any]:
        return dict(self.tags)

    @property
    def labels(self) -> dict[str, Any]:  # the columns that name the run in its rows
        return {"variant": self.variant, "dataset": self.config.dataset, "seed": self.seed}


CLAIM_KINDS: tuple[str, ...] = ("verdict", "check")


@dataclass(frozen=True)
class Printed:
    """A paper's effect read from its printed cells in ``results/reference/<paper>.csv``: ``better`` minus
    ``worse`` (each ``(artifact label, row, column, dataset)``; the mean of the cells where a side lists several),
    so the number a claim faces is the transcribed one. ``worse`` empty: ``better`` itself."""

    better: tuple[tuple[str, str, str, str], ...]
    worse: tuple[tuple[str, str, str, str], ...] = ()

    def cells(self) -> tuple[tuple[str, str, str, str], ...]:
        return self.better + self.worse


@dataclass(frozen=True)
class Smallest:
    """The smallest of several printed effects: what a claim about every member of a set faces."""

    options: tuple[Printed, ...]

    def cells(self) -> tuple[tuple[str, str, str, str], ...]:
        return tuple(c for o in self.options for c in o.cells())


# A paper's effect: a number its text states, its printed cells, the smallest of several, or one per profile
# where the profiles compare different settings (``{profile: effect}``); None where the paper prints none.
PaperEffect = float | Printed | Smallest | Mapping[str, Any] | None
Cell = tuple[str, str, str, str]


def printed(better: Cell | Sequence[Cell], worse: Cell | Sequence[Cell] = ()) -> Printed:
    """:class:`Printed` from one cell or a list of cells per side (a side's cells are averaged)."""

    def side(cells: Cell | Sequence[Cell]) -> tuple[Cell, ...]:
        if cells and isinstance(cells[0], str):
            return (tuple(cells),)  # type: ignore[return-value]
        return tuple(tuple(c) for c in cells)  # type: ignore[misc]

    return Printed(side(better), side(worse))


@dataclass(frozen=True)
class Claim:
    """A statement of the paper, judged over seeds.

    ``effect(rows)`` returns the effect per seed (a ``pd.Series`` indexed by seed, e.g. R@1 with a component
    minus R@1 without it, paired on the seed), signed so that the claim says ``effect > 0``; ``None`` or an empty
    series when the rows cannot decide. A statement about every member of a set ("beats MS at every embedding
    size") returns a ``pd.DataFrame`` with one column per member: it is an intersection-union test, judged "yes"
    only when every column is on its own (:mod:`dmllab.experiments.verdicts`).

    Args:
        text: the statement, e.g. "+max improves R@1".
        effect: rows -> per-seed effect (positive = the claim holds), a Series or one column per member.
        unit: the effect's unit, shown in the report ("R@1 points", "%", "").
        paper_says: what the paper reports: "yes" unless the paper itself contradicts the statement.
        paper_effect: the paper's own effect in the claim's unit and sign (:data:`PaperEffect`): its printed cells
            (:class:`Printed`, :class:`Smallest` for a set), a number the paper states in its text, ``{profile:
            effect}``, or None where it prints none.
        margin: the equivalence margin of a claim that states an equivalence ("stable within 1 point"), on every
            profile; None: the verdict layer's default (:func:`dmllab.experiments.verdicts.margin`).
        primary: the claim the artifact exists to test (Holm within the paper); the others are secondary
            (Benjamini-Hochberg).
        differs: one line, what differs from the paper in this comparison on a profile: a string for the quick
            and smoke profiles (the analogue), or ``{profile: line}``.
        arms: the methods the claim says are better (or equal), by their labels in the offline benchmark's
            "trains" rows (e.g. ``"proxynca++"``, ``"proxy_synthesis:normsoftmax"``): on a profile where one of
            them does not learn, the claim is "not testable" (docs/preregistration.md).
        worse_arms: the methods the claim says are worse: never gated (one that does not learn is what the claim
            says), shown in the claim's learning caveat.
        member_arms: ``{member: method label}`` of an effect over members that the claim says are better (one
            column per member, or a mean over members, :func:`dmllab.experiments.compare.averaged` with names): a
            member whose method does not learn is left out of the set or the mean (and said so) instead of making
            the claim untestable.
        not_testable: ``{profile: why}``: profiles on which the paper's procedure cannot be kept, so the claim is
            "not testable" there whatever the rows say.
        kind: "verdict" (judged over seeds) or "check" (an analytic property of a toy, or a design target of the
            offline benchmark: shown as a pass/fail check, not counted among the verdicts).
        key: a short identifier, unique within the artifact.
        training_fit: a regulariser's claim: the report shows each arm's training R@1 (``train_R@1``) beside the
            effect, so a reader sees whether the model under- or over-fits; on a profile outside the papers'
            regime (:func:`dmllab.experiments.gate.regime`) it is not testable (optimisation-limited).
    """

    text: str
    effect: Callable[[pd.DataFrame], pd.Series | pd.DataFrame | None]
    unit: str = ""
    paper_says: str = "yes"
    paper_effect: PaperEffect = None
    margin: float | None = None
    primary: bool = False
    differs: str | Mapping[str, str] = ""
    arms: tuple[str, ...] = ()
    worse_arms: tuple[str, ...] = ()
    member_arms: Mapping[str, str] = field(default_factory=dict)
    not_testable: Mapping[str, str] = field(default_factory=dict)
    kind: str = "verdict"
    key: str = ""
    training_fit: bool = False

    def __post_init__(self) -> None:
        if self.kind not in CLAIM_KINDS:
            raise ValueError(
                f"claim {self.text!r}: unknown kind {self.kind!r}; valid: {', '.join(CLAIM_KINDS)}"
            )
        bad = sorted(set(self.not_testable) - set(PROFILES))
        if bad or (isinstance(self.differs, Mapping) and set(self.differs) - set(PROFILES)):
            raise ValueError(f"claim {self.text!r}: profiles must be among {PROFILES}")
        if self.kind == "check" and (self.primary or self.paper_effect is not None):
            raise ValueError(f"claim {self.text!r}: a check is neither primary nor faces a paper effect")

    def differs_on(self, profile: str) -> str:
        """What differs from the paper on ``profile`` ("" when nothing is stated)."""
        if isinstance(self.differs, Mapping):
            return self.differs.get(profile, "")
        return self.differs if profile in ("quick", "smoke") else ""


@dataclass(frozen=True)
class Figure:
    """A figure of the artifact: ``draw(tables) -> matplotlib Figure`` from the tidy CSVs only.

    ``tables`` maps ``"rows"`` to the artifact's rows (this profile), every extra table name (see
    :attr:`Artifact.tables`) to its CSV, and ``"paper"`` to the paper's printed value beside each summarised row
    that faces a cell (:func:`dmllab.experiments.compare.paper_values`). The file is ``figures/<artifact id><suffix>.png`` (and ``.pdf``).
    """

    draw: Callable[[Mapping[str, pd.DataFrame]], MplFigure]
    suffix: str = ""
    caption: str = ""


Rows = list[dict[str, Any]]
# (params, lookup) -> rows: ``lookup`` is the artifact's :class:`dmllab.experiments.lookup.Lookup` (which imports
# this module, so it is not named here).
Derive = Callable[[Params, Any], "Rows | tuple[Rows, dict[str, Any]]"]


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
            include ``seeds`` (default :data:`~dmllab.experiments.params.DEFAULT_SEEDS`) and, for an artifact
            that trains runs, ``data_seed`` (default :data:`~dmllab.experiments.params.DEFAULT_DATA_SEED`).
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
        untuned: methods (preset labels) the artifact trains on a profile with tuned recipes without one, on
            purpose; the study refuses any other untuned run (:func:`dmllab.pipeline.preflight.untuned_runs`).
        benchmark_on_paper: the paper profile trains on the offline benchmark (a stand-in dataset) on purpose;
            otherwise a paper profile naming one is an error here and such runs stop the study's preflight.

    Every rule of a declaration is checked here, each failure one line naming the artifact.
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
    untuned: tuple[str, ...] = ()
    benchmark_on_paper: bool = False

    def __post_init__(self) -> None:
        if self.paper not in PAPERS:
            raise self._error(f"unknown paper {self.paper!r}; valid papers: {PAPERS}")
        if self.tier not in TIERS:
            raise self._error(f"unknown tier {self.tier!r}; valid tiers: {', '.join(TIERS)}")
        prefix = ID_PREFIX.get(self.paper)
        if prefix and not re.fullmatch(rf"{prefix}_(table|fig|sec|app)[0-9a-z_]+", self.id):
            raise ValueError(
                f"artifact id {self.id!r} must read {prefix}_<table|fig|sec|app><n>_<topic> (paper {self.paper})"
            )
        if self.rows is None and self.runs is _no_runs:
            raise self._error("give its runs, its rows, or both")
        if set(self.parameters) != set(PROFILES):
            raise self._error(f"parameters must give every profile {PROFILES}, got {sorted(self.parameters)}")
        keys = [set(self.parameters[p]) - {"seeds", DATA_SEED} for p in PROFILES]
        if any(k != keys[0] for k in keys):
            raise self._error(f"the profiles declare different parameter keys: {keys}")
        clash = keys[0] & {*STANDARD_PARAMETERS, *NOTEBOOK_PARAMETERS}
        if clash:
            raise self._error(f"{sorted(clash)} are standard parameters, not per profile")
        if not self.trains and any(DATA_SEED in self.parameters[p] for p in PROFILES):
            raise self._error("data_seed is a parameter of artifacts that train runs")
        claim_keys = [c.key for c in self.claims if c.key]
        if len(claim_keys) != len(set(claim_keys)):
            raise self._error(f"claim keys must be unique, got {claim_keys}")
        self._check_runs()

    def _error(self, why: str) -> ValueError:
        return ValueError(f"artifact {self.id!r}: {why}")

    def _check_runs(self) -> None:
        """The rules on seeds and runs: claims are judged over at least 3 seeds on the quick profile; an artifact
        without a figure trains one setting (one number per metric is a table row, not a one-bar chart); a paper
        profile on the offline benchmark is declared (``benchmark_on_paper``)."""
        if self.claims and len(self.defaults("quick")["seeds"]) < 3:
            raise self._error("its claims are judged over at least 3 seeds on the quick profile")
        if not self.trains:
            return
        paper = self.parameters["paper"]
        named = [paper.get("dataset"), *(paper.get("datasets") or [])]
        stand_ins = sorted({d for d in named if isinstance(d, str) and d in STAND_IN_DATASET})
        if stand_ins and not self.benchmark_on_paper:
            raise self._error(
                f"its paper profile trains on {', '.join(stand_ins)}, a stand-in of the papers' datasets; name the "
                "paper's datasets there, or declare benchmark_on_paper=True"
            )
        if not self.figures:
            settings = {run.key.split("/")[0] for run in self.runs(self.params("quick", "device=cpu"))}
            if len(settings) > 1:
                raise self._error(
                    f"without a figure it trains one setting, its quick runs have {len(settings)}; give it a "
                    "Figure or train one config"
                )

    @property
    def name(self) -> str:  # the notebook stem
        return self.id

    @property
    def trains(self) -> bool:
        """Whether the artifact trains runs (a toy computes everything in its notebook)."""
        return self.runs is not _no_runs

    @property
    def specific_parameters(self) -> tuple[str, ...]:
        """The artifact's own parameter names (beyond the standard ones), in declaration order."""
        return tuple(k for k in self.parameters[PROFILES[0]] if k not in ("seeds", DATA_SEED))

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return STANDARD_PARAMETERS + ((DATA_SEED,) if self.trains else ()) + self.specific_parameters

    def defaults(self, profile: str) -> dict[str, Any]:
        """The parameter values of ``profile``: ``seeds`` (:data:`~dmllab.experiments.params.DEFAULT_SEEDS` where
        the artifact declares none), ``data_seed`` for an artifact that trains runs, and its own."""
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
        values: dict[str, Any] = {"seeds": list(DEFAULT_SEEDS[profile])}
        if self.trains:
            values[DATA_SEED] = DEFAULT_DATA_SEED[profile]
        values.update(self.parameters[profile])
        return values

    def params(self, profile: str, execution: Execution | str | None = None, **given: Any) -> Params:
        """The resolved :class:`Params` of ``profile`` (defaults, overridden by ``given``) in ``execution`` (an
        :class:`~dmllab.experiments.execution.Execution`, its text, or None: the default, on ``auto``;
        :func:`~dmllab.experiments.params.resolve_parameters`)."""
        return resolve_parameters(self, {"profile": profile, "execution": execution, **given})

    def derive(self, params: Params, lookup: Any) -> tuple[Rows, dict[str, Any]]:
        """``(rows, extra tables)`` of ``params``: :attr:`rows`, or the test metrics of every run."""
        out = self.rows(params, lookup) if self.rows is not None else lookup.rows(self.runs(params))
        rows, tables = out if isinstance(out, tuple) else (out, {})
        return rows, dict(tables)
