"""One validation layer for every value a user gives dmllab: the command line, the config, notebook parameters,
environment variables and the public API.

Every rate, count and size has its range here, once; each entry point calls the function for its kind of value:

* :func:`check_value` for a config key (``"section.field"``, factory keywords such as ``loss.temperature``
  included): :func:`dmllab.training.config.validate` runs it over a whole config, :func:`apply_overrides` and the
  trainer call that.
* :func:`check_parameter` for a notebook or artifact parameter (``seeds``, ``epochs``, ``proxy_lrs``, ...), list
  parameters element by element: :func:`dmllab.experiments.params.resolve_parameters` runs it over every value of
  a notebook's setup cell and of every artifact the study or the command line runs.
* :func:`check_environment` for the ``DMLLAB_*`` environment variables (the command line checks them first).
* :func:`check_number`, :func:`check_int`, :func:`check_choice`, :func:`check_path` for keyword arguments of the
  public API (loss constructors, datasets, metrics).

A value outside its range raises :class:`InvalidValueError` (a ``ValueError``) naming the value, what it must be
and what was given: one line, never a traceback from deep inside torch. NaN is never accepted where a number is
expected, and ``True``/``False`` never count as numbers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class InvalidValueError(ValueError):
    """A user-facing value outside its range; the message names the value, its range and what was given."""


class ConfigValueError(InvalidValueError):
    """A config value that cannot work (non-positive epochs, NaN temperature, negative seed, ...)."""


def is_int(v: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    import numpy as np

    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def is_real(v: Any) -> bool:
    """A real number (Python or numpy int or float), not a bool."""
    import numpy as np

    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_)


def _finite(v: Any) -> bool:
    return is_real(v) and math.isfinite(v)


@dataclass(frozen=True)
class Rule:
    """What a value must be (``what``, as the error states it) and the test (``ok``)."""

    what: str
    ok: Callable[[Any], bool]

    def __call__(self, v: Any) -> bool:
        return self.ok(v)


#: The largest integer dmllab accepts anywhere (seeds included): torch, numpy and the CSV reader hold 64-bit ones.
MAX_INT = 2**63 - 1
#: The largest batch size or embedding size: a larger one asks for memory no machine has, so it is refused before
#: anything is allocated.
MAX_SIZE = 1 << 16

POSITIVE_INT = Rule("a positive integer", lambda v: is_int(v) and 0 < v <= MAX_INT)
NON_NEGATIVE_INT = Rule("an integer >= 0", lambda v: is_int(v) and 0 <= v <= MAX_INT)
SIZE = Rule(f"a positive integer <= {MAX_SIZE}", lambda v: is_int(v) and 0 < v <= MAX_SIZE)
POSITIVE = Rule("a finite number > 0", lambda v: _finite(v) and v > 0)
NON_NEGATIVE = Rule("a finite number >= 0", lambda v: _finite(v) and v >= 0)
FRACTION = Rule("a number in [0, 1]", lambda v: _finite(v) and 0 <= v <= 1)
BELOW_ONE = Rule("a number in [0, 1)", lambda v: _finite(v) and 0 <= v < 1)
OPEN_FRACTION = Rule("a number in (0, 1)", lambda v: _finite(v) and 0 < v < 1)
BOOL = Rule("true or false", lambda v: isinstance(v, bool))
TEXT = Rule("a non-empty string", lambda v: isinstance(v, str) and v.strip() != "")
PATH = Rule("a folder path (a string)", lambda v: isinstance(v, str | os.PathLike) and str(v).strip() != "")


def optional(rule: Rule) -> Rule:
    """``rule`` or None."""
    return Rule(f"None or {rule.what}", lambda v: v is None or rule(v))


def each(rule: Rule, *, increasing: bool = False, empty: bool = False) -> Rule:
    """A list or tuple whose every element satisfies ``rule`` (non-empty unless ``empty``; strictly increasing
    with ``increasing``)."""

    def ok(v: Any) -> bool:
        if not isinstance(v, list | tuple) or (not v and not empty) or not all(rule(x) for x in v):
            return False
        return not increasing or all(a < b for a, b in zip(v, v[1:]))

    words = ([] if empty else ["non-empty"]) + (["increasing"] if increasing else []) + ["list"]
    article = "an" if words[0][0] in "aeiou" else "a"
    return Rule(f"{article} {' '.join(words)}, each {rule.what}", ok)


def one_or_each(rule: Rule) -> Rule:
    """A single value or a non-empty list of values that satisfy ``rule``."""
    many = each(rule)
    return Rule(f"{rule.what} or a list of them", lambda v: rule(v) or many(v))


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where that is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


#: Worker processes (``data.num_workers``): ``auto`` or at most one per usable core (read when dmllab is imported).
CORES_OR_AUTO = Rule(
    f"'auto' or an integer in 0..{usable_cores()} (the CPU cores this process may use)",
    lambda v, cores=usable_cores(): v == "auto" or (NON_NEGATIVE_INT(v) and v <= cores),
)


# --------------------------------------------------------------------------------------------------- config
def _images_per_class(v: Any) -> bool:
    if POSITIVE_INT(v):
        return True
    return isinstance(v, list | tuple) and len(v) == 2 and all(POSITIVE_INT(x) for x in v) and v[0] <= v[1]


#: The synthetic benchmark's ``images_per_class``: a count or an inclusive (low, high) range of counts.
IMAGES_PER_CLASS = Rule("a positive integer or a (low, high) pair of them", _images_per_class)


#: What each config field must be, by "section.field". A component's keyword arguments (``loss.temperature``,
#: ``model.backbone.width``, ...) are not listed: each component's constructor checks its own
#: (:func:`dmllab.training.build.check`).
VALUE_RULES: dict[str, Rule] = {
    # data
    "data.root": optional(PATH),
    "data.batch_size": SIZE,
    "data.eval_batch_size": SIZE,
    "data.num_workers": CORES_OR_AUTO,
    "data.in_memory": BOOL,
    "data.feature_views": NON_NEGATIVE_INT,
    # model
    "model.embedding_dim": SIZE,
    "model.frozen_blocks": NON_NEGATIVE_INT,
    "model.pretrained": BOOL,
    "model.l2_normalize": BOOL,
    "model.freeze_bn": BOOL,
    "model.freeze_bn_affine": optional(BOOL),
    # optim
    "optim.lr": NON_NEGATIVE,
    "optim.lr_embedding": optional(NON_NEGATIVE),
    "optim.lr_proxies": optional(NON_NEGATIVE),
    "optim.eps": POSITIVE,
    "optim.weight_decay": NON_NEGATIVE,
    "optim.momentum": BELOW_ONE,
    "optim.grad_clip_value": optional(POSITIVE),
    "optim.clip_proxies": BOOL,
    "optim.fresh_after_warmup": BOOL,
    # schedule
    "schedule.epochs": POSITIVE_INT,
    "schedule.warmup_epochs": NON_NEGATIVE_INT,
    "schedule.patience": NON_NEGATIVE_INT,
    "schedule.factor": OPEN_FRACTION,
    "schedule.milestones": each(NON_NEGATIVE_INT, empty=True),
    "schedule.step_size": POSITIVE_INT,
    "schedule.gamma": POSITIVE,
    "schedule.stage2_drop_lag": NON_NEGATIVE_INT,
    # run
    "run.seed": NON_NEGATIVE_INT,
    "run.threads": POSITIVE_INT,
    "run.eval_every": POSITIVE_INT,
    "run.fast_dev_run": NON_NEGATIVE_INT,
    "run.two_stage": BOOL,
    "run.ks": each(POSITIVE_INT),
    "run.nmi_l2": BOOL,
    "run.keep_best": BOOL,
    "run.checkpoint_minutes": NON_NEGATIVE,
    # finetune
    "finetune.epochs": NON_NEGATIVE_INT,
    "finetune.alpha_factor": POSITIVE,
    "finetune.lr_factor": POSITIVE,
}


def refuse_huge(name: str, value: Any) -> None:
    """An integer beyond 64 bits (in ``value`` or one of its elements) named as such: it would surface as an
    OverflowError or torch's internal error far from where it was given."""
    for v in value if isinstance(value, list | tuple) else (value,):
        if is_int(v) and abs(v) > MAX_INT:
            raise InvalidValueError(
                f"{name} is an integer of {int(v).bit_length()} bits; dmllab's integers are at most 2**63 - 1"
            )


def check_value(key: str, value: Any) -> None:
    """Check one config value (``key`` = "section.field") against :data:`VALUE_RULES` (a NaN float is never
    accepted).

    Raises ConfigValueError: naming the key, the value and what it must be."""
    rule = VALUE_RULES.get(key)
    refuse_huge(key, value)
    if rule is not None and not rule(value):
        raise ConfigValueError(f"{key} must be {rule.what}, got {value!r}")
    if isinstance(value, float) and math.isnan(value):
        raise ConfigValueError(f"{key} is NaN; give a number")


# Config fields that only act in some modes: (key, does it act?, the mode it needs). An override of such a key
# in a config where it does nothing is an error (dmllab.training.config.apply_overrides).
MODE_RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("schedule.patience", lambda c: c.schedule.scheduler == "plateau", "schedule.scheduler=plateau"),
    (
        "schedule.factor",
        lambda c: c.schedule.scheduler in ("plateau", "multistep"),
        "schedule.scheduler=plateau or multistep",
    ),
    ("schedule.milestones", lambda c: c.schedule.scheduler == "multistep", "schedule.scheduler=multistep"),
    ("schedule.step_size", lambda c: c.schedule.scheduler == "step", "schedule.scheduler=step"),
    ("schedule.gamma", lambda c: c.schedule.scheduler == "step", "schedule.scheduler=step"),
    ("optim.momentum", lambda c: c.optim.name in ("sgd", "rmsprop"), "optim.name=sgd or rmsprop"),
    ("data.feature_views", lambda c: c.model.frozen_blocks > 0, "model.frozen_blocks > 0"),
    ("finetune.alpha_factor", lambda c: c.finetune.epochs > 0, "finetune.epochs > 0"),
    ("finetune.lr_factor", lambda c: c.finetune.epochs > 0, "finetune.epochs > 0"),
    ("finetune.parent_method", lambda c: c.finetune.epochs > 0, "finetune.epochs > 0"),
)


def check_modes(cfg: Any, keys: Iterable[str]) -> None:
    """Raise ConfigValueError for a key of ``keys`` (the overridden ones) that does nothing in ``cfg``
    (:data:`MODE_RULES`) and is set to another value than its default (the default turns nothing on)."""
    import dataclasses

    given = set(keys)
    for key, acts, mode in MODE_RULES:
        if key not in given or acts(cfg):
            continue
        section, name = key.split(".")
        sub = getattr(cfg, section)
        default = {f.name: f.default for f in dataclasses.fields(sub)}.get(name, dataclasses.MISSING)
        if getattr(sub, name) != default:  # the field's default (e.g. feature_views=0) turns nothing on
            raise ConfigValueError(
                f"{key} does nothing in this config: it acts only with {mode}; drop it or set that"
            )


# ---------------------------------------------------------------------------------------- notebook parameters
#: What a notebook / artifact parameter must be, by name. Names not listed fall back on :data:`PARAMETER_SUFFIXES`.
PARAMETER_RULES: dict[str, Rule] = {
    "seeds": each(NON_NEGATIVE_INT),
    "epochs": optional(one_or_each(POSITIVE_INT)),
    "full_epochs": optional(POSITIVE_INT),
    "mlrc_folds": NON_NEGATIVE_INT,
    "mlrc_repetitions": POSITIVE_INT,
    "mlrc_run_folds": optional(each(NON_NEGATIVE_INT)),
    "lambdas": each(FRACTION),
    "static_lambdas": each(FRACTION),
    "heatmap_lambda": FRACTION,
    "group_quantile": FRACTION,
    "deltas": each(NON_NEGATIVE),
    "mus": each(NON_NEGATIVE),
    "ps_mu": NON_NEGATIVE,
    "query_seed": NON_NEGATIVE_INT,
    "paper_batch_per_batch": POSITIVE,
    "hidden": one_or_each(POSITIVE_INT),
    "grid": BOOL,
    "inception": BOOL,
    "rescale_blur": BOOL,
    "tables_8_10": TEXT,
    "data_seed": TEXT,
    "train_missing": optional(BOOL),
    "profile": TEXT,
}
# By the end of the name: counts and sizes are positive integers, rates and scales positive numbers.
PARAMETER_SUFFIXES: tuple[tuple[str, Rule], ...] = (
    ("_dims", each(SIZE)),
    ("dims", each(SIZE)),
    ("_dim", SIZE),
    ("dim", SIZE),
    ("batch_sizes_large", each(SIZE)),
    ("batch_sizes", each(SIZE)),
    ("batch", SIZE),
    ("ks", each(POSITIVE_INT)),
    *(
        (suffix, POSITIVE_INT)
        for suffix in (
            "classes per_class steps points repeats queries bins every samples pairs per_pair resolution map_size "
            "num_alphas k"
        ).split()
    ),
    ("lrs", each(POSITIVE)),
    ("lr", POSITIVE),
    ("temperatures", each(POSITIVE)),
    ("temperature", POSITIVE),
    ("alphas", each(POSITIVE)),
    *((suffix, POSITIVE) for suffix in "alpha_max alpha_min alpha scale std separation perplexity".split()),
)


def rule_for_parameter(name: str) -> Rule | None:
    """The rule of notebook parameter ``name`` (:data:`PARAMETER_RULES`, then :data:`PARAMETER_SUFFIXES`)."""
    if name in PARAMETER_RULES:
        return PARAMETER_RULES[name]
    for suffix, rule in PARAMETER_SUFFIXES:
        if name.endswith(suffix):
            return rule
    return None


def check_parameter(name: str, value: Any) -> None:
    """Check one notebook / artifact parameter: its range by name (:func:`rule_for_parameter`); for a name
    without a rule, that no number in it is NaN or infinite.

    Raises InvalidValueError: naming the parameter, the value and what it must be."""
    rule = rule_for_parameter(name)
    refuse_huge(f"parameter {name}", value)
    if rule is not None:
        if not rule(value):
            raise InvalidValueError(f"parameter {name} must be {rule.what}, got {value!r}")
        return
    for v in value if isinstance(value, list | tuple) else (value,):
        if is_real(v) and not math.isfinite(v):
            raise InvalidValueError(f"parameter {name} must hold finite numbers, got {value!r}")


# ---------------------------------------------------------------------------------------------- environment
#: dmllab's environment variables that hold a folder or a program: set, they must not be empty.
PATH_VARIABLES = ("DMLLAB_CACHE", "DMLLAB_RESULTS", "DMLLAB_FIGURES", "DMLLAB_CHROMIUM")


def check_environment(environ: Mapping[str, str] = os.environ) -> None:
    """Check dmllab's environment variables: ``DMLLAB_CPU_ISA`` (:func:`dmllab.numerics.cpu_isa_mode`) and the
    folder variables of :data:`PATH_VARIABLES` (set but empty would put caches or results in the working folder).

    Raises InvalidValueError: naming the variable, its value and what it must be."""
    from dmllab.numerics import cpu_isa_mode

    try:
        cpu_isa_mode(environ)
    except ValueError as err:
        raise InvalidValueError(str(err)) from None
    for name in PATH_VARIABLES:
        if name in environ and not environ[name].strip():
            raise InvalidValueError(f"{name} is set but empty; give a folder or unset it")


# --------------------------------------------------------------------------------------------------- the API
def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_none: bool = False,
) -> float | None:
    """``value`` as a float when it is a finite real number in the given range (bounds inclusive unless
    ``*_open``); None when ``allow_none`` and it is None.

    Raises InvalidValueError: naming ``name``, the range and the value."""
    if value is None and allow_none:
        return None
    lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
    hi = "" if high is None else f"{'<' if high_open else '<='} {high:g}"
    what = f"a finite number {' and '.join(b for b in (lo, hi) if b)}".rstrip()
    ok = _finite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        none = " or None" if allow_none else ""
        raise InvalidValueError(f"{name} must be {what}{none}; got {value!r}")
    return float(value)


def check_int(name: str, value: Any, *, low: int = 1, high: int | None = None, why: str = "") -> int:
    """``value`` as an int when it is an integer (not a bool) in ``low``..``high`` (``high`` None: no upper
    bound; ``why`` says where it comes from).

    Raises InvalidValueError: naming ``name``."""
    if not is_int(value) or value < low or (high is not None and value > high):
        if high is not None:
            what = f"an int in {low}..{high}" + (f" ({why})" if why else "")
        else:
            what = "a positive int" if low == 1 else f"an int >= {low}"
        raise InvalidValueError(f"{name} must be {what}; got {value!r}")
    return int(value)


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` when it is one of ``choices``.

    Raises InvalidValueError: listing the valid choices."""
    choices = tuple(choices)
    if value not in choices:
        raise InvalidValueError(f"invalid {name} {value!r}; valid: {', '.join(map(str, choices))}")
    return value


def check_path(name: str, value: Any, *, allow_none: bool = True) -> Path | None:
    """``value`` as a Path when it is a string or path-like (None passes with ``allow_none``).

    Raises InvalidValueError: for anything else (an int, a list, an empty string), naming ``name``."""
    if value is None and allow_none:
        return None
    if not PATH(value):
        raise InvalidValueError(
            f"{name} must be a folder path (a string), got {type(value).__name__} {value!r}"
        )
    return Path(value).expanduser()
