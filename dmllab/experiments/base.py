"""What an artifact is: a paper's table or figure declared as data and a few small functions.

An :class:`Artifact` names what it reproduces (``id``, ``paper``, ``label``, ``title``), its parameters per
profile, the training runs it needs (:class:`Run`: a composed config plus a seed, so a study can plan, de-duplicate
and train them before any notebook runs), how its tidy rows are derived (from the stored runs, or computed for
toy models that train no image network), its claims (:class:`Claim`, judged over seeds by
:mod:`dmllab.experiments.stats`), which printed cells of the paper its rows correspond to, and its figures, drawn
from the tidy CSVs only. One module per artifact under ``dmllab/experiments/<paper>/`` defines ``ARTIFACT`` (or
``ARTIFACTS``, a tuple, for a group sharing runs); :mod:`dmllab.experiments.registry` discovers them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dmllab.profiles import PROFILES

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure as MplFigure

    from dmllab.training.config import ExperimentConfig
    from dmllab.training.protocol import RunResult

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
# Parameters every notebook has; ``None`` means "the profile's default".
STANDARD_PARAMETERS: tuple[str, ...] = ("profile", "seeds", "device", "data_root")


@dataclass(frozen=True)
class Run:
    """One training run an artifact needs: a composed config, a seed, and the name its rows use.

    Two artifacts that need the same (config, seed) share one stored run: the study trains it once. ``variant``
    and ``tags`` only label the run for the artifact's rows; they are not part of its identity.
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


@dataclass(frozen=True)
class Params:
    """The resolved parameters of one artifact execution (profile defaults filled in)."""

    values: Mapping[str, Any]

    @property
    def profile(self) -> str:
        return self.values["profile"]

    @property
    def seeds(self) -> list[int]:
        return list(self.values["seeds"])

    @property
    def device(self) -> str:
        return self.values["device"]

    @property
    def data_root(self) -> str | None:
        return self.values.get("data_root")

    def __getitem__(self, key: str) -> Any:
        try:
            return self.values[key]
        except KeyError:
            raise KeyError(f"no parameter {key!r}; parameters: {sorted(self.values)}") from None

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


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
    """

    text: str
    effect: Callable[[pd.DataFrame], pd.Series | None]
    unit: str = ""
    paper_says: str = "yes"


@dataclass(frozen=True)
class Figure:
    """A figure of the artifact: ``draw(tables) -> matplotlib Figure`` from the tidy CSVs only.

    ``tables`` maps ``"rows"`` to the artifact's rows (this profile) and every extra table name (see
    :attr:`Artifact.tables`) to its CSV. The file is ``figures/<artifact id><suffix>.png`` (and ``.pdf``).
    """

    draw: Callable[[Mapping[str, pd.DataFrame]], MplFigure]
    suffix: str = ""
    caption: str = ""


Derive = Callable[[Params, "RunLookup"], "list[dict[str, Any]] | tuple[list[dict[str, Any]], dict[str, Any]]"]


class RunLookup:
    """What ``rows`` receives: the stored result of each run (training it only where allowed)."""

    def __init__(self, train_missing: bool = False, progress: bool = False) -> None:
        self.train_missing = train_missing
        self.progress = progress

    def result(self, run: Run) -> RunResult:
        """The stored :class:`RunResult` of ``run``; trains it when missing and allowed, else raises
        :class:`MissingRunError` (:class:`dmllab.training.DivergedRunError` for a run the store records as diverged)."""
        from dmllab.training.store import DivergedRunError, RunStore
        from dmllab.training.store import run as train

        store = RunStore()
        stored = store.load(run.config, run.seed)
        if stored is not None:
            return stored
        record = store.diverged(run.config, run.seed)
        if record is not None:
            raise DivergedRunError(
                f"run {run.key} ({run.variant or 'no variant'}) diverged: {record.get('error')}", record
            )
        if not self.train_missing:
            raise MissingRunError(
                f"run {run.key} ({run.config.method} on {run.config.dataset}, {run.variant or 'no variant'}) "
                "is not stored; train the artifact's runs first with `dmllab study --only <artifact>`"
            )
        return train(run.config, seed=run.seed, progress=self.progress)


class MissingRunError(RuntimeError):
    """A run an artifact needs is not in the run store (and training was not allowed)."""


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
        rows: ``rows(params, lookup) -> rows`` or ``(rows, tables)``: tidy rows (``variant, dataset, seed,
            metric, value`` and ``param_*``; see :func:`dmllab.results.tidy`) and, optionally, extra tables
            (``{name: DataFrame}``, written as ``results/<id>.<name>.csv``) that a figure needs beyond the rows.
        claims: judged over seeds.
        reference: maps an aggregated row (``variant, dataset, metric`` and ``param_*``) to the printed cell
            ``(artifact label, row, column)`` of ``results/reference``; ``None`` where the paper prints none.
        figures: drawn from the CSVs only.
        tables: names of the extra tables ``rows`` returns.
        parameter_help: one line per artifact parameter, shown in the parameters cell.
        not_reproduced: rows of the paper that dmllab cannot reproduce, with the reason (listed in the report).
    """

    id: str
    paper: str
    label: str
    title: str
    description: str
    parameters: Mapping[str, Mapping[str, Any]]
    rows: Derive
    runs: Callable[[Params], Sequence[Run]] = lambda params: ()
    claims: tuple[Claim, ...] = ()
    reference: Callable[[Mapping[str, Any]], tuple[str, str, str] | None] | None = None
    figures: tuple[Figure, ...] = ()
    tables: tuple[str, ...] = ()
    parameter_help: Mapping[str, str] = field(default_factory=dict)
    not_reproduced: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.paper not in PAPERS:
            raise ValueError(f"artifact {self.id!r}: unknown paper {self.paper!r}; valid papers: {PAPERS}")
        prefix = ID_PREFIX.get(self.paper)
        if prefix and not re.fullmatch(rf"{prefix}_(table|fig|sec|app)[0-9a-z_]+", self.id):
            raise ValueError(
                f"artifact id {self.id!r} must read {prefix}_<table|fig|sec|app><n>_<topic> (paper {self.paper})"
            )
        if set(self.parameters) != set(PROFILES):
            raise ValueError(
                f"artifact {self.id!r}: parameters must give every profile {PROFILES}, got {sorted(self.parameters)}"
            )
        keys = [set(self.parameters[p]) for p in PROFILES]
        if any(k != keys[0] for k in keys):
            raise ValueError(f"artifact {self.id!r}: the profiles declare different parameter keys: {keys}")
        clash = keys[0] & {"profile", "device", "data_root"}
        if clash:
            raise ValueError(
                f"artifact {self.id!r}: {sorted(clash)} are standard parameters, not per profile"
            )

    # Compatibility with the report and notebook code, which call an artifact's stem its name.
    @property
    def name(self) -> str:
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
        from dmllab.pipeline.notebook import resolve_parameters

        return Params(
            resolve_parameters(self, {"profile": profile, "device": device, "data_root": data_root, **given})
        )

    def planned_runs(self, params: Params) -> list[Run]:
        """``runs(params)`` placed on the parameters' device and data root (neither changes a run's identity
        beyond what the run store keys on), so the study and the notebook see the same runs."""
        out = []
        for run in self.runs(params):
            cfg = run.config.replace("run.device", params.device)
            if params.data_root is not None:
                cfg = cfg.replace("data.root", params.data_root)
            out.append(Run(cfg, run.seed, run.variant, run.tags))
        return out
