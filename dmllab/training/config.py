"""Experiment configuration: small frozen dataclasses composed into one :class:`ExperimentConfig`.

Every run is described by one ``ExperimentConfig`` (data, model, loss, optimiser, schedule, run; a fine-tune of
another run also ``finetune``, :class:`FinetuneConfig`, whose parent is derived from the config). Configs are
immutable; variations are made with :func:`apply_overrides` (``"section.field=value"`` strings, as on the
command line) or :meth:`ExperimentConfig.replace`. An unknown section or field is an error listing the valid
keys, never silently dropped.

Keyword arguments that belong to a component factory (the loss constructor, the backbone constructor,
the dataset class) live in frozen mappings (``LossConfig.kwargs``, ``ModelConfig.backbone_kwargs``,
``DataConfig.dataset_kwargs``): ``loss.temperature=0.05`` sets ``kwargs["temperature"]``. Keys for those
mappings are validated against the signature of the component that will receive them (see
:func:`valid_keys`), so a typo fails before any training starts.

:func:`config_hash` is the sha256 of the canonical (sorted-keys) JSON of the config without the fields that
cannot change a result: ``data.root`` (where the same images live on this machine), ``data.num_workers``
(loader processes; every random draw is seeded per epoch, not per worker) and ``run.seed`` (the run store
keys runs by hash *and* seed). ``run.device`` stays in the hash: cpu and cuda runs differ numerically. Fields added
after runs were stored are left out at their default (``_HASH_OMIT_AT_DEFAULT``; the ``finetune`` section when unused),
so existing keys stay valid; a fine-tune's hash covers every field of its parent's config.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from dmllab.validation import VALUE_RULES, ConfigValueError, check_modes, check_value, is_int  # noqa: F401

# A frozen mapping: sorted (key, value) pairs, hashable and JSON-able as an object.
Pairs = tuple[tuple[str, Any], ...]


def pairs(mapping: Mapping[str, Any] | None = None, **kw: Any) -> Pairs:
    """Build a frozen, sorted ``(key, value)`` tuple from a mapping and/or keywords (lists become tuples)."""
    merged = {**(dict(mapping) if mapping else {}), **kw}
    return tuple(sorted((str(k), _freeze(v)) for k, v in merged.items()))


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _set_pair(items: Pairs, key: str, value: Any) -> Pairs:
    out = dict(items)
    out[key] = value
    return pairs(out)


@dataclass(frozen=True)
class DataConfig:
    """Which images, which splits and how they are batched.

    ``per_class`` = images per class in a class-balanced batch (``batch_size // per_class`` classes,
    ProxyNCA++ "+cbs"); ``None`` = plain random batches. ``val_split=None`` means no validation set
    (In-Shop, trained on trainval only). ``query_split``/``gallery_split`` replace the test split for
    query-vs-gallery evaluation (In-Shop).

    ``in_memory``: the tensor data path (``dmllab.data.tensor``): the split's uint8 images held as one tensor and
    augmented a batch at a time with torch (quick/smoke/none presets, datasets with an ``images`` array such as
    the synthetic benchmark) instead of per-image PIL transforms. ``feature_views``: with ``model.frozen_blocks``
    > 0, cache the frozen blocks' output for this many augmented views per training image (plus the test view)
    on disk, shared by every run with the same frozen weights, dataset, preset and view count; 0 = no cache (the
    frozen blocks run every step). Needs ``in_memory``.
    """

    dataset: str = "synthetic"
    root: str | None = None
    train_split: str = "train"
    val_split: str | None = "val"
    trainval_split: str = "trainval"
    test_split: str | None = "test"
    query_split: str | None = None
    gallery_split: str | None = None
    batch_size: int = 32
    per_class: int | None = 4
    transform: str = "proxynca++"
    num_workers: int | str = 0
    eval_batch_size: int = 128
    in_memory: bool = False
    feature_views: int = 0
    dataset_kwargs: Pairs = ()


@dataclass(frozen=True)
class ModelConfig:
    """The embedding network (``dmllab.models.build_model``): backbone -> pooling -> [norm] -> Linear -> [L2].

    ``pretrained`` means the weights of the backbone's weights source (:mod:`dmllab.models.weights`): for
    ``smallcnn`` the weights pre-trained on the synthetic pre-training pool (``dmllab pretrain``), for torchvision
    backbones ImageNet.
    ``freeze_bn`` freezes the running statistics of every BatchNorm of the backbone (eval mode; Proxy Anchor and
    Proxy Synthesis on CUB/Cars); ``freeze_bn_affine`` keeps their affine parameters (weight, bias) without
    gradient too: None = as ``freeze_bn`` (both frozen or neither), False = the affine parameters train whenever
    the trunk trains (after the warm-up: the Proxy Anchor release sets ``requires_grad = True`` on every trunk
    parameter at ``epoch == args.warm``; the Proxy Synthesis release's ``--freeze_BN`` only calls ``m.eval()``),
    True = frozen for the whole run (see :class:`dmllab.models.EmbeddingNet`). ``frozen_blocks``: the
    first n conv blocks of the trunk stay fixed at their initial (pre-trained) weights, BatchNorm included
    (eval mode): only the later blocks and the head train (SmallCNN has 6 blocks; 0 = train the whole trunk).
    """

    backbone: str = "resnet50"
    pretrained: bool = True
    weights_path: str | None = None
    embedding_dim: int = 2048
    pooling: str = "avg"
    k: int | None = None
    norm: str = "none"
    norm_position: str = "pre"
    l2_normalize: bool = False
    head_init: str = "default"
    freeze_bn: bool = False
    freeze_bn_affine: bool | None = None
    frozen_blocks: int = 0
    backbone_kwargs: Pairs = ()


@dataclass(frozen=True)
class LossConfig:
    """A registered loss (``dmllab.losses.build_loss``) and its keyword arguments.

    ``synthesis`` wraps the loss in Proxy Synthesis (PS paper Eq. 2-4) with ``ps_alpha`` (Beta shape) and
    ``ps_mu`` (synthetics per batch as a fraction of the batch size); ``ps_lambda`` a static lambda instead
    of Beta(alpha, alpha) (PS Table 2a); ``ps_pairing`` "sorted" or "random" partners; ``ps_embeddings`` /
    ``ps_proxies`` the PS Table 1 composition ("original", "synthetic", "both"; see
    :class:`dmllab.losses.ProxySynthesis`). ``regularizer``: "none", "input_mixup" or "manifold_mixup"
    (PS Table 5, :class:`dmllab.losses.Mixup`) with lambda ~ Beta(``mixup_alpha``, ``mixup_alpha``).
    """

    name: str = "proxynca"
    kwargs: Pairs = ()
    synthesis: bool = False
    ps_alpha: float = 0.4
    ps_mu: float = 1.0
    ps_lambda: float | None = None
    ps_pairing: str = "sorted"
    ps_embeddings: str = "both"
    ps_proxies: str = "both"
    regularizer: str = "none"
    mixup_alpha: float = 0.5


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
    "multistep" (``milestones``), "step" (``step_size``, ``gamma``), "none". ``heat_epoch`` (Heated-up
    softmax): from that schedule epoch on the loss ``alpha`` is multiplied by ``heat_alpha_factor`` and every
    lr by ``heat_lr_factor``.

    ``monitor``: the validation value the plateau rule steps on and the stage-1 best epoch is chosen by:
    "R@1" (default; the ProxyNCA++ paper text, Sec. 4.1), "hmean_r1" = ``2 * R@1 / (1 + R@1)``, what the authors'
    code (train.py ``chmean``) computes in its train mode, where NMI is not evaluated and set to 1
    (:func:`dmllab.training.schedules.hmean_r1`), or "hmean_nmi_r1", the harmonic mean
    ``2 * NMI * R@1 / (NMI + R@1)`` with the validation NMI (the authors' code with ``--eval_nmi``); with it NMI is
    computed on the validation split every epoch. ``stage2_drop_lag``: stage 2 replays the stage-1 plateau drops ``d`` as
    MultiStepLR milestones ``d + stage2_drop_lag``: 0 = the paper's description (the same epochs as in
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
    heat_epoch: int | None = None
    heat_alpha_factor: float = 0.25
    heat_lr_factor: float = 0.1
    monitor: str = "R@1"
    stage2_drop_lag: int = 0


@dataclass(frozen=True)
class RunConfig:
    """How a run executes and is evaluated.

    ``amp``: "auto" (bf16 autocast on CUDA when supported, else off), "off", "bf16", "fp16" (with a
    GradScaler); always off on CPU. ``channels_last``: "auto" (on for CUDA), "on", "off".
    ``metrics``/``ks``/``distance`` are passed to ``dmllab.metrics.evaluate`` for the test evaluation; the
    per-epoch validation computes recall only (cheap). ``seed`` is excluded from :func:`config_hash`.
    ``nmi_l2``: NMI clusters the L2-normalised embeddings (Heated-up Softmax Sec. 5.2: "all the features are
    l2-normalized before calculating the evaluation metric"); False = the raw embeddings (ProxyNCA++ code).
    ``nmi_average``: the normalisation of NMI, "geometric" (the ProxyNCA++ authors' code: sqrt(H(Y) H(C)), the
    default) or "arithmetic" (the ProxyNCA++ paper text and scikit-learn's default), "min", "max".
    ``keep_best``: single stage with a validation split (e.g. an MLRC fold, :mod:`dmllab.training.mlrc`): the
    weights (model and loss) of the epoch with the best monitored validation value (``schedule.monitor``,
    warm-up epochs excluded) are tested and saved as the final model, instead of the last epoch's (MLRC's early
    stopping on validation); ``best_epoch`` of the result is that epoch.
    ``fast_dev_run``: 0 (a real run) or N > 0, a fast dev run that checks the run's code path in seconds (PyTorch
    Lightning's name; ``dmllab study --fast-dev-run``): N training batches per epoch, at most one warm-up and
    one schedule epoch per stage, N batches per evaluation, and the batch shrunk to fit a dataset smaller than
    one class-balanced batch (:func:`dmllab.training.protocol.training_config`, :class:`dmllab.training.Trainer`).
    It is part of the run key: a fast dev run is never taken for a real one.
    """

    seed: int = 0
    device: str = "auto"
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

    ``epochs=0`` (default): not a fine-tune; the section is then left out of :func:`config_hash`.
    """

    epochs: int = 0
    parent_method: str = ""
    alpha_factor: float = 0.25
    lr_factor: float = 0.1


ANY_KEYWORD = "**"
SECTIONS = ("data", "model", "loss", "optim", "schedule", "run", "finetune")
# Fields of sections that do not change results: kept out of the hash (see module docstring).
_HASH_EXCLUDED = {("data", "root"), ("data", "num_workers"), ("run", "seed")}
# Fields added after runs were stored: left out of the hash at their default, so existing run keys stay valid.
_HASH_OMIT_AT_DEFAULT = {
    ("data", "in_memory"): False,
    ("data", "feature_views"): 0,
    ("model", "frozen_blocks"): 0,
    ("model", "freeze_bn_affine"): None,
    ("run", "nmi_l2"): False,
    ("run", "nmi_average"): "geometric",
    ("run", "keep_best"): False,
    ("run", "fast_dev_run"): 0,
}
_HASH_OMIT_AT_DEFAULT.update(
    {
        ("loss", "ps_lambda"): None,
        ("loss", "ps_pairing"): "sorted",
        ("loss", "ps_embeddings"): "both",
        ("loss", "ps_proxies"): "both",
        ("loss", "regularizer"): "none",
        ("loss", "mixup_alpha"): 0.5,
    }
)
_CHOICES = {
    ("optim", "name"): ("adam", "adamw", "sgd", "rmsprop"),
    ("schedule", "scheduler"): ("plateau", "multistep", "step", "none"),
    ("schedule", "monitor"): ("R@1", "hmean_r1", "hmean_nmi_r1"),
    ("run", "device"): ("auto", "cpu", "cuda", "mps"),
    ("run", "amp"): ("auto", "off", "bf16", "fp16"),
    ("run", "channels_last"): ("auto", "on", "off"),
    ("run", "distance"): ("euclidean", "cosine"),
    ("run", "nmi_average"): ("geometric", "arithmetic", "min", "max"),
    ("model", "norm_position"): ("pre", "post"),
    ("loss", "ps_pairing"): ("sorted", "random"),
    ("loss", "ps_embeddings"): ("original", "synthetic", "both"),
    ("loss", "ps_proxies"): ("original", "synthetic", "both"),
    ("loss", "regularizer"): ("none", "input_mixup", "manifold_mixup"),
}
# Mapping-valued fields: a key that is not a dataclass field goes into this mapping.
_KWARGS_FIELD = {"loss": "kwargs", "model": "backbone_kwargs", "data": "dataset_kwargs"}


@dataclass(frozen=True)
class ExperimentConfig:
    """One training run: the method/dataset/profile it was made for plus the six component configs."""

    method: str = "proxynca++"
    dataset: str = "synthetic"
    profile: str = "smoke"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    run: RunConfig = field(default_factory=RunConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)

    def replace(self, key: str, value: Any) -> ExperimentConfig:
        """Return a copy with ``key`` ("section.field" or a top-level field) set to ``value`` (no coercion)."""
        return _set(self, key, value, coerce=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able nested dict (frozen mappings become objects, tuples lists)."""
        return _to_jsonable(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExperimentConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ValueError listing the valid ones."""
        top = {f.name: f for f in fields(cls)}
        _check_keys(d, top, "experiment config")
        kw: dict[str, Any] = {}
        for name, value in d.items():
            sub = _SECTION_TYPES.get(name)
            kw[name] = _section_from_dict(sub, name, value) if sub else value
        return cls(**kw)


_SECTION_TYPES: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "loss": LossConfig,
    "optim": OptimConfig,
    "schedule": ScheduleConfig,
    "run": RunConfig,
    "finetune": FinetuneConfig,
}


def _check_keys(d: Mapping[str, Any], valid: Iterable[str], what: str) -> None:
    unknown = sorted(set(d) - set(valid))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {what}; valid keys: {', '.join(sorted(valid))}")


def _section_from_dict(cls: type, name: str, d: Mapping[str, Any]) -> Any:
    fmap = {f.name: f for f in fields(cls)}
    _check_keys(d, fmap, f"section {name!r}")
    kw = {}
    for key, value in d.items():
        if key == _KWARGS_FIELD.get(name):
            kw[key] = pairs(value)
        else:
            kw[key] = _freeze(value)
    return cls(**kw)


def _to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in fields(obj):
            value = getattr(obj, f.name)
            if f.name in _KWARGS_FIELD.values():
                out[f.name] = {k: _to_jsonable(v) for k, v in value}
            else:
                out[f.name] = _to_jsonable(value)
        return out
    if isinstance(obj, tuple | list):
        return [_to_jsonable(v) for v in obj]
    return obj


def config_hash(cfg: ExperimentConfig, length: int = 16) -> str:
    """Stable identifier of a config: sha256 of canonical JSON without result-neutral fields (module doc).

    The same on every process and machine (no ``hash()``, sorted keys, ``repr``-exact floats via JSON).
    """
    d = cfg.to_dict()
    if cfg.finetune == FinetuneConfig():  # a section added after runs were stored: absent when unused
        del d["finetune"]
    for section, name in _HASH_EXCLUDED:
        d[section].pop(name, None)
    for (section, name), default in _HASH_OMIT_AT_DEFAULT.items():
        if d[section].get(name, default) == default:
            d[section].pop(name, None)
    text = json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


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


# ----------------------------------------------------------------------------------------------- overrides
def _field_type(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


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
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"cannot parse {text!r} as an int for {key}") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"cannot parse {text!r} as a float for {key}") from None
    if tp is str or tp is Any:
        return text
    raise ValueError(f"cannot parse {text!r} for {key} (type {tp})")


def _coerce_like(text: str, default: Any, key: str) -> Any:
    """Coerce a string for a factory keyword whose type is only known from its default value."""
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


def factory_keywords(section: str, cfg: ExperimentConfig) -> dict[str, Any]:
    """Keyword parameters (name -> default) accepted by the factory that receives ``section``'s mapping:
    the loss class for ``loss``, the backbone for ``model``, the dataset class for ``data``.

    Empty when the owning package is not importable (then keys are not validated against it).
    """
    try:
        if section == "loss":
            from dmllab import losses

            cls = losses.LOSSES.get(cfg.loss.name)
            skip = {"num_classes", "embedding_dim", "self"}
        elif section == "model":
            from dmllab import models

            cls = models.BACKBONES.get(cfg.model.backbone)
            skip = {"self", "pretrained", "weights_path"}
        else:
            from dmllab import data

            cls = data.DATASETS.get(cfg.data.dataset)
            skip = {
                "self",
                "root",
                "split",
                "transform",
                "progress",
            }  # progress: display only, set by the trainer
    except (ImportError, AttributeError):
        return {}
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return {}
    out = {}
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            out[ANY_KEYWORD] = None  # the factory forwards keywords (e.g. margin-softmax presets): any key
            continue
        if p.name in skip or p.kind is p.VAR_POSITIONAL:
            continue
        out[p.name] = p.default
    return out


def valid_keys(cfg: ExperimentConfig) -> list[str]:
    """Every ``section.field`` key accepted by :func:`apply_overrides` for this config."""
    keys = ["method", "dataset", "profile"]
    for section in SECTIONS:
        keys += [f"{section}.{f.name}" for f in fields(_SECTION_TYPES[section])]
        if section in _KWARGS_FIELD:
            keys += [f"{section}.{k}" for k in factory_keywords(section, cfg) if k != ANY_KEYWORD]
    return sorted(set(keys))


def _set(cfg: ExperimentConfig, key: str, value: Any, *, coerce: bool) -> ExperimentConfig:
    parts = key.split(".")
    if len(parts) == 1:
        if key not in ("method", "dataset", "profile"):
            raise ValueError(f"unknown config key {key!r}; valid keys: {', '.join(valid_keys(cfg))}")
        return dataclasses.replace(cfg, **{key: value})
    if len(parts) != 2 or parts[0] not in SECTIONS:
        raise ValueError(
            f"unknown config key {key!r}; sections are {', '.join(SECTIONS)}; valid keys: {', '.join(valid_keys(cfg))}"
        )
    section, name = parts
    sub = getattr(cfg, section)
    cls = type(sub)
    fnames = {f.name for f in fields(cls)}
    if name in fnames:
        if coerce and isinstance(value, str):
            value = _coerce(value, _field_type(cls, name), key)
        value = _freeze(value)
        choices = _CHOICES.get((section, name))
        if choices and value not in choices:
            raise ValueError(f"invalid value {value!r} for {key}; valid: {', '.join(choices)}")
        return dataclasses.replace(cfg, **{section: dataclasses.replace(sub, **{name: value})})
    mapping_field = _KWARGS_FIELD.get(section)
    accepted = factory_keywords(section, cfg) if mapping_field else {}
    current = dict(getattr(sub, mapping_field)) if mapping_field else {}
    if mapping_field and (name in accepted or name in current or ANY_KEYWORD in accepted):
        if coerce and isinstance(value, str):
            default = current.get(name, accepted.get(name))
            value = _coerce_like(value, default, key)
        new_sub = dataclasses.replace(
            sub, **{mapping_field: _set_pair(getattr(sub, mapping_field), name, value)}
        )
        return dataclasses.replace(cfg, **{section: new_sub})
    raise ValueError(f"unknown config key {key!r}; valid keys: {', '.join(valid_keys(cfg))}")


def apply_overrides(cfg: ExperimentConfig, overrides: Iterable[str]) -> ExperimentConfig:
    """Apply ``"section.field=value"`` strings in order, coercing each value to the field's type.

    >>> apply_overrides(cfg, ["loss.temperature=0.05", "optim.lr_proxies=400", "run.ks=1,2,4,8"])

    Unknown sections/fields raise ValueError listing the valid keys; ``loss.<name>`` is valid when the
    configured loss constructor takes a keyword ``<name>`` (likewise backbone and dataset keywords). A value out
    of its range, or an override of a field that does nothing in the resulting config (``schedule.patience``
    without the plateau scheduler, ``loss.ps_alpha`` without Proxy Synthesis, ...:
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
# The rules live in dmllab.validation (one layer for every entry point); VALUE_RULES, ConfigValueError and
# check_value stay importable from here.
# dmllab.metrics.METRICS (not imported here: the config module stays free of torch)
_RUN_METRICS = ("recall", "nmi", "precision_at_1", "r_precision", "map_at_r", "mlrc")


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """Reject at once a config that cannot work (every field and factory keyword through
    :func:`check_value`); returns ``cfg``. Called by :func:`apply_overrides`, the trainer and the run store.

    Raises:
        ConfigValueError: the first bad value, naming its key.
    """
    for section in SECTIONS:
        sub = getattr(cfg, section)
        for f in fields(sub):
            value = getattr(sub, f.name)
            if f.name == _KWARGS_FIELD.get(section):
                for k, v in value:
                    check_value(f"{section}.{k}", v)
            else:
                check_value(f"{section}.{f.name}", value)
    if cfg.loss.regularizer == "input_mixup" and cfg.data.feature_views:
        raise ConfigValueError(
            "loss.regularizer=input_mixup mixes images, but data.feature_views > 0 feeds cached frozen-block "
            "features to the loss; set data.feature_views=0 (the frozen prefix then runs on the mixed images)"
        )
    d = cfg.data
    if (
        d.per_class is not None
        and is_int(d.per_class)
        and is_int(d.batch_size)
        and d.batch_size % d.per_class
    ):
        raise ConfigValueError(
            f"data.batch_size ({d.batch_size}) must be a multiple of data.per_class ({d.per_class}): a class-balanced "
            "batch holds batch_size // per_class classes of per_class images"
        )
    unknown = sorted(set(cfg.run.metrics) - set(_RUN_METRICS))
    if not cfg.run.metrics or unknown:
        raise ConfigValueError(
            f"run.metrics must be a non-empty list of {', '.join(_RUN_METRICS)}; got {cfg.run.metrics!r}"
        )
    if cfg.run.keep_best and cfg.run.two_stage:
        raise ConfigValueError(
            "run.keep_best=true keeps the best validation epoch of a single stage; the two-stage protocol already "
            "stops stage 2 after stage 1's best epoch: set run.two_stage=false or run.keep_best=false"
        )
    return cfg
