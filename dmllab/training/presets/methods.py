"""What a method family module declares, and the helpers the families share.

A family module (``proxynca.py``, ``heated.py``, ...) registers each of its methods where it defines the method's
build function, with :func:`method` (``@method("proxynca++", OVERLAYS, tuned=(...))``) into :data:`METHODS`. Each
method's ``build`` turns the paper base (:func:`dmllab.training.presets.profiles.paper_base`) into the method's
``paper`` config; the quick and smoke profiles are overlays on that config: first the profile's own (the
scale: backbone, image size, embedding, batch, epochs), then the method's ``overlays[profile]``, a dict of
``"section.field"`` values for what the method sets differently at that scale (e.g. the small CNN's learning
rates). The package imports every module it holds, so a new family is one new module.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dmllab.registry import Registry
from dmllab.spec import Spec
from dmllab.training.config import ExperimentConfig
from dmllab.training.presets.datasets import DatasetSpec

# "section.field" -> value, or a function of the config (as overlaid so far) giving the value.
Overlay = Mapping[str, Any]
# The loss keyword a method's tuning searches (None: none) and why.
Tuned = tuple[str | None, str]


@dataclass(frozen=True)
class Method:
    """One preset method.

    Args:
        name: the name :func:`dmllab.training.presets.get` takes.
        build: ``build(cfg, spec, **options) -> ExperimentConfig``: the method's ``paper`` config from the paper
            base ``cfg``; its keyword-only parameters are the method's options.
        overlays: profile -> :data:`Overlay` applied after that profile's own overlay.
        variant_option: the option that ``"name:value"`` sets (``heated_softmax:HBN`` sets ``variant``).
        default_variant: the value of ``variant_option`` when not given (used in the config's method label).
        profile_options: profile -> ``options -> defaults``: option values a profile uses unless the caller gives
            them (a procedure the profile keeps differently from the paper preset, e.g. Heated-up's heating by
            fine-tuning on the compressed quick schedule); the function sees the caller's options.
        tuned: the loss keyword ``dmllab tune`` searches for this method and why, ``(keyword or None, reason)``;
            per variant (a mapping ``variant -> (keyword, reason)``) where the variants differ
            (:meth:`tuned_param`).
    """

    name: str
    build: Callable[..., ExperimentConfig]
    overlays: Mapping[str, Overlay] = field(default_factory=dict)
    variant_option: str | None = None
    default_variant: str | None = None
    profile_options: Mapping[str, Callable[[Mapping[str, Any]], Mapping[str, Any]]] = field(
        default_factory=dict
    )
    tuned: Tuned | Mapping[str, Tuned] | None = None

    def tuned_param(self, label: str) -> Tuned:
        """``(loss keyword or None, reason)`` that ``dmllab tune`` searches for the preset ``label``
        (``name`` or ``name:variant``).

        Raises:
            KeyError: the method (or its variant) declares none, so a new method cannot go untuned unnoticed.
        """
        if isinstance(self.tuned, Mapping):
            variant = label.partition(":")[2] or self.default_variant
            if variant in self.tuned:
                return self.tuned[variant]
        elif self.tuned is not None:
            return self.tuned
        raise KeyError(
            f"method {label!r} declares no tuned loss hyper-parameter: give its Method(...) a tuned=(keyword or "
            "None, reason) in its presets module"
        )

    @property
    def options(self) -> list[str]:
        """The keyword options of ``build`` (sorted)."""
        params = inspect.signature(self.build).parameters.values()
        return sorted(p.name for p in params if p.kind is p.KEYWORD_ONLY)


#: Every preset method by name (:func:`method` registers them; :func:`dmllab.training.presets.get` reads them).
METHODS: Registry[Method] = Registry("method")


def method(
    name: str, overlays: Mapping[str, Overlay] | None = None, **fields: Any
) -> Callable[[Callable], Callable]:
    """Register the decorated build function as the preset method ``name``: ``Method(name, build, overlays,
    **fields)`` in :data:`METHODS` (a duplicate name raises). Returns the function unchanged."""

    def add(build: Callable[..., ExperimentConfig]) -> Callable[..., ExperimentConfig]:
        METHODS.register(name, Method(name, build, overlays or {}, **fields))
        return build

    return add


def apply_overlay(cfg: ExperimentConfig, overlay: Overlay) -> ExperimentConfig:
    """Set each ``"section.field"`` of ``overlay`` in order; a callable value is called with the config as
    overlaid so far. Unknown keys raise (``ExperimentConfig.replace``)."""
    for key, value in overlay.items():
        cfg = cfg.replace(key, value(cfg) if callable(value) else value)
    return cfg


def with_loss(cfg: ExperimentConfig, name: str, **kwargs: Any) -> ExperimentConfig:
    """``cfg`` with the loss ``name`` and its keyword arguments."""
    return replace(cfg, loss=Spec(name, kwargs))


def fixed_schedule(cfg: ExperimentConfig, spec: DatasetSpec, *, two_stage: bool) -> ExperimentConfig:
    """The protocol of Proxy Anchor, Heated-up and Proxy Synthesis: train on every training class
    (``trainval``) for the whole schedule and test the last model; these papers train a fixed number of epochs
    and select no epoch on a validation split.

    ``two_stage=True``: ProxyNCA++'s protocol instead (stage 1 on ``train`` with validation, stage 2 on
    ``trainval`` stopped after the stage-1 best epoch; lr drops after that epoch are skipped). Needs a
    validation split.
    """
    if two_stage and spec.val_split is None:
        raise ValueError(f"two_stage=True needs a validation split; dataset {spec.name!r} has none")
    return replace(
        cfg,
        data=replace(cfg.data, train_split="train" if two_stage else cfg.data.trainval_split),
        run=replace(cfg.run, two_stage=two_stage),
    )
