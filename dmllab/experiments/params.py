"""How an artifact's parameters are resolved: :func:`resolve_parameters` turns what a notebook or the study gives
(``None``: the profile's default) into :class:`Params`: the one place where parameter names and kinds are checked,
and where every value goes through the validation layer's ranges (:func:`dmllab.validation.check_parameter`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dmllab.experiments.execution import Execution
from dmllab.profiles import PROFILES
from dmllab.validation import InvalidValueError, check_parameter

# Parameters every notebook has; ``None`` means "the profile's default" (``execution``: the text of an Execution,
# :meth:`Execution.parse`; None: on ``auto``).
STANDARD_PARAMETERS: tuple[str, ...] = ("profile", "seeds", "execution")
# The seeds of a profile where an artifact declares none: five on quick and paper, two on smoke (which only checks
# that every notebook runs). ``dmllab study --seeds`` replaces them (a list, or N for 0..N-1).
DEFAULT_SEEDS: dict[str, tuple[int, ...]] = {
    "smoke": (0, 1),
    "quick": (0, 1, 2, 3, 4),
    "paper": (0, 1, 2, 3, 4),
}
# The parameter of every artifact that trains runs: which draw of the offline benchmark run seed k trains on.
# "per_seed": draw k (other classes, other images, its own pre-trained trunk), so an interval over seeds covers a
# new draw of the data; "fixed": every seed on draw 0, so seeds vary only the initialisation and the batch order.
# The paper profile's real datasets have one draw ("fixed").
DATA_SEED = "data_seed"
DATA_SEED_MODES: tuple[str, ...] = ("per_seed", "fixed")
DEFAULT_DATA_SEED: dict[str, str] = {"smoke": "per_seed", "quick": "per_seed", "paper": "fixed"}
# Parameters of a notebook that are not the artifact's (:func:`dmllab.pipeline.notebook.setup` reads them):
# ``manifest`` (the study's placed runs, read instead of placed again) and ``train_missing``.
NOTEBOOK_PARAMETERS: tuple[str, ...] = ("manifest", "train_missing")
# List parameters whose elements may repeat (the widths of a network's layers); in every other list each element is
# one measured setting (a seed, a dataset, a temperature), so a repeated one would measure it twice and its CSV
# would hold duplicate measurements the reader refuses.
REPEATABLE_PARAMETERS: tuple[str, ...] = ("hidden",)


@dataclass(frozen=True)
class Params:
    """The resolved parameters of one artifact execution (profile defaults filled in) and its
    :class:`~dmllab.experiments.execution.Execution` (its device resolved): the one the study placed its runs in,
    passed on as it is, or the one a notebook's ``execution`` parameter names, parsed and resolved once."""

    values: Mapping[str, Any]
    execution: Execution

    @property
    def profile(self) -> str:
        return self.values["profile"]

    @property
    def seeds(self) -> list[int]:
        return list(self.values["seeds"])

    @property
    def device(self) -> str:
        return self.execution.device

    @property
    def data_seed(self) -> str:
        """``"per_seed"`` (seed k trains on draw k of the benchmark) or ``"fixed"`` (every seed on draw 0); "fixed"
        for an artifact that trains no runs."""
        return self.values.get(DATA_SEED) or "fixed"

    @property
    def data_root(self) -> str | None:
        return self.execution.data_root

    def __getitem__(self, key: str) -> Any:
        try:
            return self.values[key]
        except KeyError:
            raise KeyError(f"no parameter {key!r}; parameters: {sorted(self.values)}") from None

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


def _as_seeds(value: Any, name: str) -> list[int]:
    seeds = [value] if isinstance(value, int) else value
    if isinstance(seeds, (list, tuple)) and seeds and all(_kind(s) == "int" for s in seeds):
        return list(seeds)
    raise ValueError(f"notebook {name}: seeds must be an int or a non-empty list of ints, got {value!r}")


def _kind(value: Any) -> str:
    """The parameter kind of a default value: bool, int, float, str, list or dict (``type`` name otherwise)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _fits(kind: str, kinds: set[str]) -> bool:  # an int is accepted where floats are
    return kind in kinds or (kind == "int" and "float" in kinds)


def _check_kind(artifact: Any, key: str, value: Any) -> None:
    """Raise ValueError when ``value`` (or, for a list, one of its elements) has another kind than the non-None
    defaults of ``key`` (or their elements); an int is accepted for a float. ``papermill -p temperatures 0.1``,
    ``-p steps 100.5`` or ``-y 'temperatures: [a, b]'`` therefore fail in the setup cell, not deep inside."""
    defaults = [artifact.parameters[p][key] for p in PROFILES if artifact.parameters[p][key] is not None]
    kinds = {_kind(d) for d in defaults}
    if not kinds:
        return
    kind = _kind(value)
    example = defaults[0]
    if not _fits(kind, kinds):
        raise ValueError(
            f"notebook {artifact.name}: parameter {key!r} must be of type {' or '.join(sorted(kinds))} "
            f"(e.g. {example!r}), got {value!r} ({type(value).__name__}). Lists are passed with papermill -y, "
            "e.g. -y 'temperatures: [1.0, 0.5]'."
        )
    element_kinds = {_kind(e) for d in defaults if _kind(d) == "list" for e in d if e is not None}
    if kind != "list" or not element_kinds:
        return
    for element in value:
        if element is not None and not _fits(_kind(element), element_kinds):
            raise ValueError(
                f"notebook {artifact.name}: parameter {key!r} must be a list of "
                f"{' or '.join(sorted(element_kinds))} (e.g. {example!r}), got {value!r}: element {element!r} "
                f"is {type(element).__name__}"
            )


def _check(artifact_id: str, name: str, value: Any) -> None:
    """:func:`dmllab.validation.check_parameter`, its message prefixed by the notebook's name."""
    try:
        check_parameter(name, value)
    except InvalidValueError as err:
        raise InvalidValueError(f"notebook {artifact_id}: {err}") from None


def _check_distinct(artifact_id: str, key: str, value: Any) -> None:
    """A list parameter (but :data:`REPEATABLE_PARAMETERS`) that names one element twice raises ValueError naming
    it, before anything trains."""
    if key in REPEATABLE_PARAMETERS or not isinstance(value, list | tuple):
        return
    twice = [e for i, e in enumerate(value) if e in value[:i]]
    if twice:
        raise InvalidValueError(
            f"notebook {artifact_id}: parameter {key} names {twice[0]!r} twice ({value!r}); each element is "
            "one measured setting: give each once"
        )


def check_train_missing(artifact_id: str, value: Any) -> bool:
    """The notebook parameter ``train_missing`` as a bool (``None``: True, a notebook run by hand trains what is
    missing); anything but None, True or False raises ValueError naming the parameter."""
    _check(artifact_id, "train_missing", value)
    return value is not False


def resolve_parameters(artifact: Any, given: Mapping[str, Any]) -> Params:
    """Check ``given`` against the artifact's parameters (names, kinds, then every value's range) and fill the
    profile's defaults for ``None`` values. ``given["execution"]``: an :class:`Execution` (the study's: kept as it
    is, its torch threads included), its text or None (the default); its device is resolved here when "auto".

    Raises:
        ValueError: an unknown parameter name (listing the valid ones), an unknown profile, an artifact
            parameter whose type differs from its defaults' (a scalar for a list, a float for an int, a list
            element of another type), a value out of its range (a negative seed), or an execution text that
            :meth:`Execution.parse` refuses.
    """
    valid = artifact.parameter_names
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown parameter {unknown[0]!r} for notebook {artifact.id}; valid parameters: "
            f"{', '.join(valid + NOTEBOOK_PARAMETERS)}"
            + (f" (also unknown: {', '.join(unknown[1:])})" if len(unknown) > 1 else "")
            + ". Interactively: restart the kernel before running the setup cell again."
        )
    profile = given.get("profile") or "quick"
    if profile not in PROFILES:
        raise ValueError(
            f"notebook {artifact.id}: unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}"
        )
    defaults = artifact.defaults(profile)
    params: dict[str, Any] = {"profile": profile}
    for key in valid[1:]:
        value = given.get(key)
        if value is not None and key in artifact.specific_parameters:
            _check_kind(artifact, key, value)
        params[key] = defaults.get(key) if value is None else value
    execution = params.pop("execution")
    params["seeds"] = _as_seeds(params["seeds"], artifact.id)
    for key, value in params.items():
        if value is not None:
            _check(artifact.id, key, value)
            _check_distinct(artifact.id, key, value)
    if DATA_SEED in params and params[DATA_SEED] not in DATA_SEED_MODES:
        raise ValueError(
            f"notebook {artifact.id}: data_seed must be one of {', '.join(map(repr, DATA_SEED_MODES))}, "
            f"got {params[DATA_SEED]!r}"
        )
    execution = execution if isinstance(execution, Execution) else Execution.parse(execution)
    return Params(params, execution.resolved())
