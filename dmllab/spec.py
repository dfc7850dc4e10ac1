"""A component's specification: a registered name, its keyword arguments and, for a wrapper, what it wraps.

Every swappable part of a run (the dataset, the batch sampler, the backbone, the pooling, the loss, a trainer
callback) is a :class:`Spec`: ``Spec("proxy_anchor", {"alpha": 32.0, "delta": 0.1})``. A wrapper nests the spec
of the component it wraps: Proxy Synthesis over Norm-softmax is
``Spec("proxy_synthesis", {"alpha": 0.4, "mu": 1.0}, wraps=Spec("normsoftmax", {"temperature": 1 / 23}))``, so
the wrapper's ``alpha`` and a wrapped Proxy Anchor's ``alpha`` never collide.

The name is looked up in the family's :class:`dmllab.registry.Registry`; the keyword arguments go to the
registered constructor, which checks them (:mod:`dmllab.training.build`). A spec is immutable and hashable
(keyword arguments as sorted ``(key, value)`` pairs, lists as tuples) and JSON-able (:meth:`Spec.to_dict`), so it
can be part of a run key. This module imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

# A frozen mapping: sorted (key, value) pairs, hashable and JSON-able as an object.
Pairs = tuple[tuple[str, Any], ...]


def freeze(value: Any) -> Any:
    """Lists (and nested lists) as tuples, so that a value can sit in a frozen config."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def pairs(mapping: Mapping[str, Any] | None = None, **kw: Any) -> Pairs:
    """A frozen, sorted ``(key, value)`` tuple from a mapping and/or keywords (lists become tuples)."""
    merged = {**(dict(mapping) if mapping else {}), **kw}
    return tuple(sorted((str(k), freeze(v)) for k, v in merged.items()))


@dataclass(frozen=True)
class Spec:
    """A component: its registered ``name``, its keyword arguments and the spec it ``wraps`` (None for a leaf).

    ``Spec(name, kwargs)`` accepts a mapping or pairs for ``kwargs`` and stores sorted pairs."""

    name: str
    kwargs: Pairs = ()
    wraps: Spec | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a component's name must be a non-empty string, got {self.name!r}")
        kw = self.kwargs
        object.__setattr__(self, "kwargs", pairs(dict(kw) if isinstance(kw, Mapping) else dict(kw)))

    # ------------------------------------------------------------------------------------------ reading
    @property
    def kw(self) -> dict[str, Any]:
        """The keyword arguments as a dict."""
        return dict(self.kwargs)

    def get(self, key: str, default: Any = None) -> Any:
        """One keyword argument (``default`` when absent)."""
        return self.kw.get(key, default)

    def chain(self) -> Iterator[Spec]:
        """This spec, then the spec it wraps, and so on down to the leaf."""
        spec: Spec | None = self
        while spec is not None:
            yield spec
            spec = spec.wraps

    @property
    def leaf(self) -> Spec:
        """The innermost spec (the wrapped component itself: the base loss under Proxy Synthesis)."""
        return list(self.chain())[-1]

    def find(self, name: str) -> Spec | None:
        """The first spec named ``name`` in :meth:`chain`, or None."""
        return next((s for s in self.chain() if s.name == name), None)

    # ------------------------------------------------------------------------------------------ changing
    def with_kw(self, **kw: Any) -> Spec:
        """A copy with these keyword arguments set (others kept)."""
        return replace(self, kwargs=pairs({**self.kw, **kw}))

    def without(self, *keys: str) -> Spec:
        """A copy without these keyword arguments."""
        return replace(self, kwargs=pairs({k: v for k, v in self.kwargs if k not in keys}))

    def with_leaf(self, leaf: Spec) -> Spec:
        """A copy whose innermost spec is ``leaf`` (the wrappers kept)."""
        return leaf if self.wraps is None else replace(self, wraps=self.wraps.with_leaf(leaf))

    # ------------------------------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """``{"name", "kwargs"[, "wraps"]}`` with JSON values (tuples as lists)."""
        out: dict[str, Any] = {"name": self.name, "kwargs": {k: _jsonable(v) for k, v in self.kwargs}}
        if self.wraps is not None:
            out["wraps"] = self.wraps.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | str) -> Spec:
        """Inverse of :meth:`to_dict`; a bare string is a spec without keyword arguments. Unknown keys raise."""
        if isinstance(d, str):
            return cls(d)
        if isinstance(d, Spec):
            return d
        unknown = sorted(set(d) - {"name", "kwargs", "wraps"})
        if unknown:
            raise ValueError(f"unknown key(s) {unknown} in a component spec; valid keys: kwargs, name, wraps")
        wraps = d.get("wraps")
        return cls(d["name"], pairs(d.get("kwargs") or {}), None if wraps is None else cls.from_dict(wraps))

    def __str__(self) -> str:
        args = ",".join(f"{k}={_short(v)}" for k, v in self.kwargs)
        inner = f"[{self.wraps}]" if self.wraps is not None else ""
        return f"{self.name}({args}){inner}"


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
