"""Experiment configuration: small frozen dataclasses that compose the components of one run.

A run is one :class:`ExperimentConfig`: the data (``data``: which dataset, splits, batches), the network
(``model``), the loss (``loss``), the optimiser (``optim``), the schedule (``schedule``), how it runs (``run``),
an optional fine-tune of a parent run (``finetune``) and the trainer callbacks it switches on (``callbacks``).

Every swappable component is a :class:`~dmllab.spec.Spec` (a registered name, its keyword arguments and, for a
wrapper, the spec it wraps): ``data.dataset``, ``data.sampler``, ``model.backbone``, ``model.pooling``, ``loss``
(Proxy Synthesis and mixup wrap the loss they regularise) and each entry of ``callbacks``. The config knows no
component's parameters: a spec's keyword arguments are checked against its registered constructor's signature
here (:func:`validate`) and by the constructor itself when :mod:`dmllab.training.build` builds it.

Configs are immutable; variations are made with :func:`apply_overrides` (``"path=value"`` strings, as on the
command line) or :meth:`ExperimentConfig.replace`. Paths: ``section.field`` for a field
(``optim.lr=1e-3``); a spec's keyword by its spec's path (``loss.temperature=0.05``, ``model.pooling.k=4``,
``data.sampler.per_class=3``), the wrapped spec's through ``wraps`` (``loss.wraps.alpha=16`` under Proxy
Synthesis, whose own ``loss.alpha`` is the Beta shape), a spec's name by its path alone (``model.pooling=max``,
``loss.name=proxy_anchor``), a callback's keyword by its name (``callbacks.heating.epoch=62``). An unknown path
is an error listing the valid ones, never silently dropped. (OmegaConf's dotlist does not fit: a component's
keywords are typed by its constructor's defaults, which a structured config cannot declare.)

:func:`config_hash` is the sha256 of the canonical JSON of the config's result-relevant fields plus
:data:`SCHEMA_VERSION`; fields that cannot change a result (``data.root``, ``data.num_workers``, ``run.seed``)
declare themselves with ``metadata=NOT_IN_KEY``. Every component spec enters the key complete, its constructor's
defaults filled in (:func:`complete`): a changed default re-keys exactly the runs it changes. A change of the
config's layout bumps the schema version (every run key changes once).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from dmllab.spec import Spec, freeze
from dmllab.validation import (  # noqa: F401
    VALUE_RULES,
    ConfigValueError,
    check_modes,
    check_value,
    is_int,
    refuse_huge,
)

#: The layout version of :class:`ExperimentConfig`, part of every run key (:func:`config_hash`).
SCHEMA_VERSION = 3
#: ``field(metadata=NOT_IN_KEY)``: a field that cannot change a result, left out of :func:`config_hash`.
NOT_IN_KEY = {"key": False}


@dataclass(frozen=True)
class DataConfig:
    """Which images, which splits and how they are batched.

    ``dataset``: the registered dataset class (:data:`dmllab.data.DATASETS`) and its keyword arguments (the
    synthetic benchmark's draw ``seed``, image size, ...). ``sampler``: the training batches
    (:data:`dmllab.data.SAMPLERS`): ``class_balanced`` with ``per_class`` images per class
    (``batch_size // per_class`` classes, ProxyNCA++ "+cbs") or ``random``. ``val_split=None`` means no
    validation set (In-Shop, trained on trainval only). ``query_split``/``gallery_split`` replace the test split
    for query-vs-gallery evaluation (In-Shop).

    ``in_memory``: the tensor data path (``dmllab.data.tensor``): the split's uint8 images held as one tensor and
    augmented a batch at a time with torch (quick/smoke presets, datasets with an ``images`` array such as the
    synthetic benchmark) instead of per-image PIL transforms. ``feature_views``: with ``model.frozen_blocks``
    > 0, cache the frozen blocks' output for this many augmented views per training image (plus the test view)
    on disk, shared by every run with the same frozen weights, dataset, preset and view count; 0 = no cache (the
    frozen blocks run every step). Needs ``in_memory``.
    """

    dataset: Spec = Spec("synthetic")
    root: str | None = field(default=None, metadata=NOT_IN_KEY)
    train_split: str = "train"
    val_split: str | None = "val"
    trainval_split: str = "trainval"
    test_split: str | None = "test"
    query_split: str | None = None
    gallery_split: str | None = None
    batch_size: int = 32
    sampler: Spec = Spec("class_balanced", (("per_class", 4),))
    transform: str = "proxynca++"
    num_workers: int | str = field(default=0, metadata=NOT_IN_KEY)
    eval_batch_size: int = 128
    in_memory: bool = False
    feature_views: int = 0

    @property
    def per_class(self) -> int | None:
        """Images per class of a class-balanced batch, None for random batches."""
        return self.sampler.get("per_class") if self.sampler.name == "class_balanced" else None


@dataclass(frozen=True)
class ModelConfig:
    """The embedding network (:func:`dmllab.models.build_model`): backbone -> pooling -> [norm] -> Linear -> [L2].

    ``backbone``: the registered backbone (:data:`dmllab.models.BACKBONES`) and its keyword arguments (the
    SmallCNN's ``width``, ...); ``pooling``: the registered global pooling (:data:`dmllab.models.POOLINGS`,
    ``kmax`` with its ``k``). ``pretrained`` means the weights of the backbone's weights source
    (:mod:`dmllab.models.weights`): for ``smallcnn`` the weights pre-trained on the synthetic pre-training pool
    (``dmllab pretrain``), for torchvision backbones ImageNet.
    ``freeze_bn`` freezes the running statistics of every BatchNorm of the backbone (eval mode; Proxy Anchor and
    Proxy Synthesis on CUB/Cars); ``freeze_bn_affine`` keeps their affine parameters (weight, bias) without
    gradient too: None = as ``freeze_bn`` (both frozen or neither), False = the affine parameters train whenever
    the trunk trains (after the warm-up: the Proxy Anchor release sets ``requires_grad = True`` on every trunk
    parameter at ``epoch == args.warm``; the Proxy Synthesis release's ``--freeze_BN`` only calls ``m.eval()``),
    True = frozen for the whole run (see :class:`dmllab.models.EmbeddingNet`). ``frozen_blocks``: the
    first n conv blocks of the trunk stay fixed at their initial (pre-trained) weights, BatchNorm included
    (eval mode): only the later blocks and the head train (SmallCNN has 6 blocks; 0 = train the whole trunk).
    """

    backbone: Spec = Spec("resnet50")
    pretrained: bool = True
    weights_path: str | None = None
    embedding_dim: int = 2048
    pooling: Spec = Spec("avg")
    norm: str = "none"
    norm_position: str = "pre"
    l2_normalize: bool = False
    head_init: str = "default"
    freeze_bn: bool = False
    freeze_bn_affine: bool | None = None
    frozen_blocks: int = 0


@dataclass(frozen=True)
class OptimConfig:
    """Optimiser with three parameter groups: backbone (``lr``), embedding head (``lr_embedding`` or ``lr``),
    loss parameters / proxies (``lr_proxies`` or else the embedding head's lr; ProxyNCA++ "+fast" / "-fast",
    :mod:`dmllab.training.optim`).

    ``grad_clip_value`` clips gradients by value on the model parameters every step (ProxyNCA++ and Proxy
    Anchor code: 10); proxies are clipped too only when ``clip_proxies``.

    ``fresh_after_warmup``: the ProxyNCA++ authors' code (train.py) warms up with a *separate* optimiser
    (backbone lr 0) that is discarded, so the main Adam starts with empty moments at the first schedule
    epoch; True re-creates the optimiser there (authors' code). False (default) keeps one optimiser whose
    moments carry over from the warm-up (the paper only says "warm up ... with the backbone frozen").
    """

    name: str = "adam"
    lr: float = 4e-3
    lr_embedding: float | None = None
    lr_proxies: float | None = None
    eps: float = 1.0
    weight_decay: float = 0.0
    momentum: float = 0.0
    grad_clip_value: float | None = 10.0
    clip_proxies: bool = False
    fresh_after_warmup: bool = False


@dataclass(frozen=True)
class ScheduleConfig:
    """Epochs and the learning-rate schedule (pure functions in ``dmllab.training.schedules``).

    ``warmup_epochs`` extra epochs run first with the backbone frozen (lr 0); they are not counted in
    ``epochs`` nor by the scheduler. ``scheduler``: "plateau" (ReduceLROnPlateau on validation R@1, mode max),
    "multistep" (``milestones``), "step" (``step_size``, ``gamma``), "none". Events of a callback (the heating of
    :class:`dmllab.training.callbacks.Heating`) are the callback's own keyword arguments.

    ``monitor``: the validation value the plateau rule steps on and the stage-1 best epoch is chosen by:
    "R@1" (default; the ProxyNCA++ paper text, Sec. 4.1), "hmean_r1" = ``2 * R@1 / (1 + R@1)``, what the authors'
    code (train.py ``chmean``) computes in its train mode, where NMI is not evaluated and set to 1
    (:func:`dmllab.training.schedules.hmean_r1`), or "hmean_nmi_r1", the harmonic mean
    ``2 * NMI * R@1 / (NMI + R@1)`` with the validation NMI (the authors' code with ``--eval_nmi``); with it NMI is
    computed on the validation split every epoch. ``stage2_drop_lag``: stage 2 replays the stage-1 plateau drops
    ``d`` as MultiStepLR milestones ``d + stage2_drop_lag``: 0 = the paper's description (the same epochs as in
    stage 1), 1 = the authors' code (``MultiStepLR.step(e)`` at the end of epoch ``e`` with the milestones
    = the first stage-1 epochs at the lower lr, so each drop takes effect one epoch later in stage 2).
    """

    epochs: int = 40
    warmup_epochs: int = 5
    scheduler: str = "plateau"
    patience: int = 4
    factor: float = 0.1
    milestones: tuple[int, ...] = ()
    step_size: int = 10
    gamma: float = 0.5
    monitor: str = "R@1"
    stage2_drop_lag: int = 0


@dataclass(frozen=True)
class RunConfig:
    """How a run executes and is evaluated.

    ``amp``: "auto" (bf16 autocast on CUDA when supported, else off), "off", "bf16", "fp16" (with a
    GradScaler); always off on CPU. ``channels_last``: "auto" (on for CUDA), "on", "off".
    ``metrics``/``ks``/``distance`` are passed to ``dmllab.metrics.evaluate`` for the test evaluation; the
    per-epoch validation computes recall only (cheap). ``seed`` is not part of :func:`config_hash` (the run
    store keys runs by hash *and* seed).
    ``nmi_l2``: NMI clusters the L2-normalised embeddings (Heated-up Softmax Sec. 5.2: "all the features are
    l2-normalized before calculating the evaluation metric"); False = the raw embeddings (ProxyNCA++ code).
    ``nmi_average``: the normalisation of NMI, "geometric" (the ProxyNCA++ authors' code: sqrt(H(Y) H(C)), the
    default) or "arithmetic" (the ProxyNCA++ paper text and scikit-learn's default), "min", "max".
    ``keep_best``: a single stage with a validation split (an MLRC fold, :mod:`dmllab.training.mlrc`) tests and saves
    the weights of the best monitored validation epoch instead of the last (MLRC's early stopping; ``best_epoch``
    of the result; :class:`dmllab.training.callbacks.KeepBest`).
    ``fast_dev_run``: 0 (a real run) or N > 0 batches per epoch and evaluation, a run that checks its code path in
    seconds (PyTorch Lightning's name, :class:`dmllab.training.callbacks.FastDevRun`); part of the run key, so a
    fast dev run is never taken for a real one.
    ``checkpoint_minutes``: the interval of the epoch checkpoint, 0 = every epoch
    (:class:`dmllab.training.callbacks.EpochCheckpoint`); not part of the run key.
    ``threads``: the torch threads a CPU run trains on (:func:`run_threads`). CPU kernels reduce in a
    thread-count-dependent order, so 1 and 2 threads give different, equally valid runs: on the CPU it is part of
    the run key (:func:`threads_matter`); on an accelerator it is neither keyed nor applied.
    """

    seed: int = field(default=0, metadata=NOT_IN_KEY)
    device: str = "auto"
    threads: int = 1
    amp: str = "auto"
    channels_last: str = "auto"
    two_stage: bool = True
    metrics: tuple[str, ...] = ("recall", "nmi")
    ks: tuple[int, ...] = (1, 2, 4, 8)
    distance: str = "euclidean"
    nmi_l2: bool = False
    nmi_average: str = "geometric"
    eval_every: int = 1
    keep_best: bool = False
    fast_dev_run: int = 0
    checkpoint_minutes: float = field(default=10.0, metadata=NOT_IN_KEY)


@dataclass(frozen=True)
class FinetuneConfig:
    """A fine-tune: the run starts from the final model (and loss parameters) of a *parent* run and trains on.

    The parent is this config with ``method = parent_method`` and no fine-tune (:func:`parent_config`): every
    other section (data, model, loss, optimiser, schedule, run) describes the parent, so an override of the network
    or the data changes parent and fine-tune alike. The fine-tune itself trains ``epochs`` epochs on the split the
    parent's final model was trained on, without warm-up or validation, with every base lr x ``lr_factor`` and
    the loss's scale ``alpha`` x ``alpha_factor`` from its first epoch, and a fresh optimiser (see
    :func:`dmllab.training.protocol.training_config`). Heated-up Softmax heats up this way (Sec. 3.4 (ii), Sec. 5.2:
    "HLN: Heated-up model using alpha = 4 to fine-tune LN"): alpha x 1/4, lr x 0.1.

    ``epochs=0`` (default): not a fine-tune.
    """

    epochs: int = 0
    parent_method: str = ""
    alpha_factor: float = 0.25
    lr_factor: float = 0.1


SECTIONS = ("data", "model", "optim", "schedule", "run", "finetune")
_SECTION_TYPES: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "schedule": ScheduleConfig,
    "run": RunConfig,
    "finetune": FinetuneConfig,
}
# The values of a choice field the config owns; the other choice fields ask the component that owns the vocabulary
# (:func:`_choices`).
_OWN_CHOICES = {
    ("schedule", "scheduler"): ("plateau", "multistep", "step", "none"),
    ("run", "amp"): ("auto", "off", "bf16", "fp16"),
    ("run", "channels_last"): ("auto", "on", "off"),
}


@functools.lru_cache(maxsize=1)
def _choices() -> dict[tuple[str, str], tuple[str, ...]]:
    """``(section, field) -> valid values`` of every choice field: the config's own and its owners'."""
    from dmllab.metrics.clustering import NMI_AVERAGES
    from dmllab.metrics.evaluator import DISTANCES
    from dmllab.models.heads import NORM_POSITIONS
    from dmllab.profiles import DEVICES
    from dmllab.training.optimizers import OPTIMIZERS
    from dmllab.training.schedules import MONITORS

    return {
        **_OWN_CHOICES,
        ("optim", "name"): tuple(OPTIMIZERS.names()),
        ("schedule", "monitor"): MONITORS,
        ("run", "device"): DEVICES,
        ("run", "distance"): DISTANCES,
        ("run", "nmi_average"): NMI_AVERAGES,
        ("model", "norm_position"): NORM_POSITIONS,
    }


@dataclass(frozen=True)
class ExperimentConfig:
    """One training run: the method/dataset/profile it was made for plus its sections and components."""

    method: str = "proxynca++"
    dataset: str = "synthetic"
    profile: str = "smoke"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: Spec = Spec("proxynca")
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    run: RunConfig = field(default_factory=RunConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    callbacks: tuple[Spec, ...] = ()

    def replace(self, key: str, value: Any) -> ExperimentConfig:
        """A copy with ``key`` (a path, module docstring) set to ``value`` (no string parsing)."""
        return _set(self, key, value, coerce=False)

    def callback(self, name: str) -> Spec | None:
        """The callback spec named ``name``, or None when the config does not switch it on."""
        return next((c for c in self.callbacks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able nested dict (specs as ``{"name", "kwargs"[, "wraps"]}``, tuples as lists)."""
        return _to_jsonable(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExperimentConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ValueError listing the valid ones."""
        _check_keys(d, {f.name for f in fields(cls)}, "experiment config")
        kw: dict[str, Any] = {}
        for name, value in d.items():
            if name in _SECTION_TYPES:
                kw[name] = _section_from_dict(_SECTION_TYPES[name], name, value)
            elif name == "loss":
                kw[name] = Spec.from_dict(value)
            elif name == "callbacks":
                kw[name] = tuple(Spec.from_dict(v) for v in value)
            else:
                kw[name] = value
        return cls(**kw)


def _check_keys(d: Mapping[str, Any], valid: Iterable[str], what: str) -> None:
    unknown = sorted(set(d) - set(valid))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {what}; valid keys: {', '.join(sorted(valid))}")


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints`` of a config class (evaluated once: the string annotations never change)."""
    return typing.get_type_hints(cls)


def _is_spec_field(cls: type, name: str) -> bool:
    return _type_hints(cls).get(name) is Spec


def _section_from_dict(cls: type, name: str, d: Mapping[str, Any]) -> Any:
    _check_keys(d, {f.name for f in fields(cls)}, f"section {name!r}")
    return cls(**{k: Spec.from_dict(v) if _is_spec_field(cls, k) else freeze(v) for k, v in d.items()})


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, Spec):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj):
        return {f.name: _to_jsonable(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, tuple | list):
        return [_to_jsonable(v) for v in obj]
    return obj


def key_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """The result-relevant content of ``cfg``: :meth:`~ExperimentConfig.to_dict` of :func:`complete` ``cfg`` (every
    component keyword its constructor takes, its default filled in where not given, so that two spellings of one
    configuration share a key and a changed default re-keys the runs it changes), without the fields marked
    :data:`NOT_IN_KEY` and without ``run.threads`` off the CPU (:class:`RunConfig`), its numbers canonical
    (:func:`_canonical`), with :data:`SCHEMA_VERSION`."""
    d = complete(cfg).to_dict()
    for section in SECTIONS:
        for f in fields(_SECTION_TYPES[section]):
            if f.metadata.get("key", True) is False:
                del d[section][f.name]
    if not threads_matter(cfg):
        del d["run"]["threads"]
    return _canonical({"schema": SCHEMA_VERSION, **d})


def complete(cfg: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` with every component spec complete: each keyword its constructor takes with a default
    (:meth:`dmllab.registry.Registry.keywords`) set to that default where the spec does not give it. A component
    whose constructor forwards any keyword (``**kwargs``) keeps the keywords it is given."""
    for path, spec in spec_paths(cfg).items():
        defaults = registry_of(path).keywords(spec.name)
        missing = {
            k: freeze(v)
            for k, v in defaults.items()
            if k != "**" and k not in spec.kw and v is not inspect.Parameter.empty
        }
        if not missing:
            continue
        full = spec.with_kw(**missing)
        if path.startswith("callbacks."):
            cfg = dataclasses.replace(cfg, callbacks=tuple(full if c is spec else c for c in cfg.callbacks))
        else:
            cfg = _set(cfg, path, full, coerce=False)
    return cfg


def threads_matter(cfg: ExperimentConfig) -> bool:
    """Whether ``cfg``'s numbers depend on its torch thread count (``run.threads``, part of its key): on the CPU,
    whose kernels reduce in a thread-count-dependent order; not on an accelerator."""
    return str(cfg.run.device).split(":", 1)[0] in ("cpu", "auto")


def _canonical(value: Any) -> Any:
    """``value`` with numbers that compare equal spelled alike: a float with an integral value as that int
    (``-0.0`` and ``0.0`` as ``0``, ``1.0`` as ``1``); bools stay bools; dicts and lists element by element."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def config_hash(cfg: ExperimentConfig, length: int = 16) -> str:
    """Stable identifier of a config: sha256 of the canonical JSON of :func:`key_dict` (module docstring).

    The same on every process and machine (no ``hash()``, sorted keys, ``repr``-exact floats via JSON).
    """
    text = json.dumps(key_dict(cfg), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


@contextlib.contextmanager
def run_threads(cfg: ExperimentConfig) -> Iterator[None]:
    """Within the block torch runs on ``cfg.run.threads`` threads where they change the run's numbers
    (:func:`threads_matter`; on an accelerator the process keeps the threads its executor gave it); the count is
    restored after it. Everything that trains or evaluates a run (the store, pre-training, ...) holds it."""
    import torch

    before = torch.get_num_threads()
    if threads_matter(cfg):
        torch.set_num_threads(int(cfg.run.threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def is_finetune(cfg: ExperimentConfig) -> bool:
    """Whether ``cfg`` starts from a parent run's final model (``finetune.epochs > 0``, :class:`FinetuneConfig`)."""
    return cfg.finetune.epochs > 0


def parent_config(cfg: ExperimentConfig) -> ExperimentConfig | None:
    """The config of the run a fine-tune starts from: ``cfg`` with ``method = finetune.parent_method`` and no
    fine-tune section (:class:`FinetuneConfig`); None when ``cfg`` is not a fine-tune."""
    if not is_finetune(cfg):
        return None
    return dataclasses.replace(
        cfg, method=cfg.finetune.parent_method or cfg.method, finetune=FinetuneConfig()
    )


# ------------------------------------------------------------------------------------------- components
def registry_of(path: str) -> Any:
    """The registry whose names the spec at ``path`` takes (``"loss"``, ``"loss.wraps"``, ``"model.pooling"``,
    ``"callbacks"``, ...)."""
    head = path.split(".wraps")[0]
    if head == "loss":
        from dmllab.losses import LOSSES

        return LOSSES
    if head in ("model.backbone", "model.pooling"):
        from dmllab import models

        return models.BACKBONES if head == "model.backbone" else models.POOLINGS
    if head in ("data.dataset", "data.sampler"):
        from dmllab import data

        return data.DATASETS if head == "data.dataset" else data.SAMPLERS
    if head.split(".")[0] == "callbacks":
        from dmllab.training.callbacks import CALLBACKS

        return CALLBACKS
    raise KeyError(f"no component at {path!r}")


def spec_paths(cfg: ExperimentConfig) -> dict[str, Spec]:
    """``path -> spec`` of every component of ``cfg``, wrapped specs included (``loss.wraps``)."""
    out: dict[str, Spec] = {}
    for section in ("data", "model"):
        sub = getattr(cfg, section)
        for f in fields(sub):
            if _is_spec_field(type(sub), f.name):
                out[f"{section}.{f.name}"] = getattr(sub, f.name)
    path = "loss"
    for spec in cfg.loss.chain():
        out[path] = spec
        path += ".wraps"
    for spec in cfg.callbacks:
        out[f"callbacks.{spec.name}"] = spec
    return out


def check_components(cfg: ExperimentConfig) -> None:
    """Every spec's name is registered and its keyword arguments are keywords of its constructor (the values
    themselves are the constructor's to check, :func:`dmllab.training.build.check`).

    Raises ConfigValueError: naming the path, the keyword and the valid ones."""
    for path, spec in spec_paths(cfg).items():
        registry = registry_of(path)
        try:
            registry.check_keywords(spec.name, spec.kw, path)
        except (KeyError, ValueError) as err:
            raise ConfigValueError(str(err).strip('"')) from None
        wraps = getattr(registry.get(spec.name), "wraps", False)
        if bool(wraps) != (spec.wraps is not None):
            need = "wraps another spec (set its 'wraps')" if wraps else "wraps nothing"
            raise ConfigValueError(f"{registry.kind} {spec.name!r} at {path} {need}")


# ----------------------------------------------------------------------------------------------- overrides
def _coerce(text: str, tp: Any, key: str) -> Any:
    """Parse the command-line string ``text`` into the annotated type ``tp`` (bool, int, float, str,
    Optional[...] with "none"/"null", tuple[int, ...] as comma-separated values)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if text.strip().lower() in ("none", "null", ""):
            return None
        for arg in args:
            try:
                return _coerce(text, arg, key)
            except ValueError:
                continue
        raise ValueError(f"cannot parse {text!r} for {key} (expected {tp})")
    if origin is tuple:
        args = typing.get_args(tp)
        inner = args[0] if args else str
        parts = [p for p in text.replace("(", "").replace(")", "").split(",") if p.strip()]
        return tuple(_coerce(p.strip(), inner, key) for p in parts)
    if tp is bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"cannot parse {text!r} as a bool for {key} (use true/false)")
    if tp in (int, float):
        try:
            return tp(text)
        except ValueError:
            raise ValueError(
                f"cannot parse {text!r} as a{'n' if tp is int else ''} {tp.__name__} for {key}"
            ) from None
    if tp is str or tp is Any:
        return text
    raise ValueError(f"cannot parse {text!r} for {key} (type {tp})")


def _coerce_like(text: str, default: Any, key: str) -> Any:
    """Coerce a string for a constructor keyword whose type is only known from its default value."""
    if default is None or default is inspect.Parameter.empty:
        for tp in (int, float):
            try:
                return _coerce(text, tp, key)
            except ValueError:
                pass
        low = text.strip().lower()
        if low in ("true", "false"):
            return low == "true"
        if low in ("none", "null"):
            return None
        return text
    if isinstance(default, bool):
        return _coerce(text, bool, key)
    if isinstance(default, int):
        return _coerce(text, float if any(c in text for c in ".eE") else int, key)
    if isinstance(default, float):
        return _coerce(text, float, key)
    if isinstance(default, tuple | list):
        return tuple(_coerce_like(p.strip(), default[0] if default else None, key) for p in text.split(","))
    return text


def valid_keys(cfg: ExperimentConfig) -> list[str]:
    """Every path accepted by :func:`apply_overrides` for this config (module docstring)."""
    keys = ["method", "dataset", "profile", "loss.name"]
    for section in SECTIONS:
        keys += [f"{section}.{f.name}" for f in fields(_SECTION_TYPES[section])]
    for path, spec in spec_paths(cfg).items():
        try:
            kws = registry_of(path).keywords(spec.name)
        except KeyError:
            continue
        keys += [f"{path}.{k}" for k in kws if k != "**"]
    return sorted(set(keys))


def _unknown(cfg: ExperimentConfig, key: str) -> ValueError:
    return ValueError(f"unknown config key {key!r}; valid keys: {', '.join(valid_keys(cfg))}")


def _set_in_spec(spec: Spec, rest: list[str], value: Any, *, coerce: bool, path: str, key: str) -> Spec:
    """``spec`` with ``rest`` (``[]`` = the name, ``["name"]``, ``[keyword]``, ``["wraps", ...]``) set."""
    if not rest or rest == ["name"]:
        if isinstance(value, Spec):
            return value
        registry_of(path).get(str(value))  # an unknown name lists the valid ones
        return Spec(str(value), spec.kwargs if str(value) == spec.name else (), spec.wraps)
    if rest[0] == "wraps" and spec.wraps is not None:
        return dataclasses.replace(
            spec,
            wraps=_set_in_spec(spec.wraps, rest[1:], value, coerce=coerce, path=f"{path}.wraps", key=key),
        )
    if len(rest) != 1:
        raise KeyError(key)
    name = rest[0]
    registry = registry_of(path)
    accepted = registry.keywords(spec.name)
    if name not in accepted and name not in spec.kw and "**" not in accepted:
        inner = f"; the wrapped {registry.kind}'s keywords are {path}.wraps.<keyword>" if spec.wraps else ""
        valid = ", ".join(sorted(accepted)) or "none"
        raise ValueError(
            f"{registry.kind} {spec.name!r} takes no keyword {name!r} ({key}); valid: {valid}{inner}"
        )
    if coerce and isinstance(value, str):
        value = _coerce_like(value, spec.kw.get(name, accepted.get(name)), key)
    refuse_huge(key, value)  # the component checks its own range; no integer of dmllab exceeds 64 bits
    return spec.with_kw(**{name: freeze(value)})


def _set(cfg: ExperimentConfig, key: str, value: Any, *, coerce: bool) -> ExperimentConfig:
    parts = key.split(".")
    head = parts[0]
    if len(parts) == 1 and head in ("method", "dataset", "profile"):
        return dataclasses.replace(cfg, **{key: value})
    try:
        if head == "loss":
            return dataclasses.replace(
                cfg, loss=_set_in_spec(cfg.loss, parts[1:], value, coerce=coerce, path="loss", key=key)
            )
        if head == "callbacks" and len(parts) >= 2:
            name = parts[1]
            old = cfg.callback(name) or Spec(name)
            registry_of("callbacks").get(name)  # an unknown callback lists the valid ones
            new = _set_in_spec(
                old,
                parts[2:] or ["name"],
                value if len(parts) > 2 else name,
                coerce=coerce,
                path="callbacks",
                key=key,
            )
            others = tuple(c for c in cfg.callbacks if c.name != name)
            return dataclasses.replace(cfg, callbacks=tuple(sorted((*others, new), key=lambda c: c.name)))
        if head in SECTIONS and len(parts) >= 2:
            sub = getattr(cfg, head)
            cls, name = type(sub), parts[1]
            if name not in {f.name for f in fields(cls)}:
                raise KeyError(key)
            if _is_spec_field(cls, name):
                spec = _set_in_spec(
                    getattr(sub, name), parts[2:], value, coerce=coerce, path=f"{head}.{name}", key=key
                )
                return dataclasses.replace(cfg, **{head: dataclasses.replace(sub, **{name: spec})})
            if len(parts) != 2:
                raise KeyError(key)
            if coerce and isinstance(value, str):
                value = _coerce(value, _type_hints(cls)[name], key)
            value = freeze(value)
            choices = _choices().get((head, name))
            if choices and value not in choices:
                raise ValueError(f"invalid value {value!r} for {key}; valid: {', '.join(choices)}")
            return dataclasses.replace(cfg, **{head: dataclasses.replace(sub, **{name: value})})
    except KeyError as err:
        if err.args and err.args[0] != key:  # a registry's unknown name: its own message lists the valid ones
            raise ValueError(str(err.args[0])) from None
        raise _unknown(cfg, key) from None
    raise _unknown(cfg, key)


def apply_overrides(cfg: ExperimentConfig, overrides: Iterable[str]) -> ExperimentConfig:
    """Apply ``"path=value"`` strings in order, parsing each value as its field's (or keyword's) type.

    >>> apply_overrides(cfg, ["loss.temperature=0.05", "optim.lr_proxies=400", "run.ks=1,2,4,8"])

    Unknown paths raise ValueError listing the valid keys. A value out of its range, or an override of a field
    that does nothing in the resulting config (``schedule.patience`` without the plateau scheduler, ...:
    :data:`dmllab.validation.MODE_RULES`), raises ConfigValueError.
    """
    given = []
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not of the form key=value")
        key, text = item.split("=", 1)
        cfg = _set(cfg, key.strip(), text.strip(), coerce=True)
        given.append(key.strip())
    validate(cfg)
    check_modes(cfg, given)  # an override that does nothing in this config is an error
    return cfg


# ------------------------------------------------------------------------------------------------ validation
# The rules live in dmllab.validation (one layer for every entry point); a component's keyword values are its
# constructor's to check (dmllab.training.build.check).


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """Reject at once a config that cannot work: every section field through :func:`check_value`, every
    component's name and keywords (:func:`check_components`), and the rules that tie fields together;
    returns ``cfg``. Called by :func:`apply_overrides`, the trainer and the run store.

    Raises ConfigValueError: the first bad value, naming its key."""
    for section in SECTIONS:
        sub = getattr(cfg, section)
        for f in fields(sub):
            if not _is_spec_field(type(sub), f.name):
                check_value(f"{section}.{f.name}", getattr(sub, f.name))
    check_components(cfg)
    if cfg.loss.name == "input_mixup" and cfg.data.feature_views:
        raise ConfigValueError(
            "loss input_mixup mixes images, but data.feature_views > 0 feeds cached frozen-block features to the "
            "loss; set data.feature_views=0 (the frozen prefix then runs on the mixed images)"
        )
    d = cfg.data
    per_class = d.per_class
    if is_int(per_class) and per_class > 0 and is_int(d.batch_size) and d.batch_size % per_class:
        raise ConfigValueError(
            f"data.batch_size ({d.batch_size}) must be a multiple of data.sampler.per_class ({per_class}): a "
            "class-balanced batch holds batch_size // per_class classes of per_class images"
        )
    from dmllab.metrics import METRICS

    unknown = sorted(set(cfg.run.metrics) - set(METRICS))
    if not cfg.run.metrics or unknown:
        raise ConfigValueError(
            f"run.metrics must be a non-empty list of {', '.join(METRICS)}; got {cfg.run.metrics!r}"
        )
    if cfg.run.keep_best and cfg.run.two_stage:
        raise ConfigValueError(
            "run.keep_best=true keeps the best validation epoch of a single stage; the two-stage protocol already "
            "stops stage 2 after stage 1's best epoch: set run.two_stage=false or run.keep_best=false"
        )
    return cfg
