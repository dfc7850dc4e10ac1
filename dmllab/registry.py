"""One small registry used by every family (losses, backbones, poolings, datasets).

Unknown or duplicate names raise and list the valid ones, so a typo in a config or on the command line is
reported where it happens instead of deep inside a factory.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> object mapping for one family of components.

    Args:
        kind: what the family holds ("loss", "backbone", ...); used in error messages.
        supplied: the constructor arguments the builder supplies (a loss's ``num_classes``, a dataset's
            ``root`` and ``split``): not keyword arguments a config may set (:meth:`keywords`).
    """

    #: :meth:`keywords`' entry meaning "the constructor forwards any keyword" (``**kwargs``).
    ANY = "**"

    def __init__(self, kind: str, *, supplied: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.supplied = frozenset(supplied) | {"self"}
        self._items: dict[str, T] = {}

    def register(self, name: str, obj: T | None = None) -> Callable[[T], T] | T:
        """Register ``obj`` under ``name``; without ``obj`` return a decorator."""

        def _add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"duplicate {self.kind} name {name!r}; already registered: {self.names()}")
            self._items[name] = item
            return item

        return _add if obj is None else _add(obj)

    def get(self, name: str) -> T:
        """Return the object registered as ``name``; an unknown name raises a KeyError listing the valid ones."""
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(
                f"unknown {self.kind} {name!r}; valid {self.kind} names: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        """All registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def keywords(self, name: str) -> dict[str, Any]:
        """The keyword arguments a config may give ``name``'s constructor: ``parameter -> default``
        (``inspect.Parameter.empty`` when required), without :attr:`supplied`; :attr:`ANY` when it forwards any
        keyword. Unknown names raise a KeyError listing the valid ones."""
        factory = self.get(name)
        try:
            sig = inspect.signature(factory)
        except (TypeError, ValueError):
            return {self.ANY: None}
        out: dict[str, Any] = {}
        for p in sig.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                out[self.ANY] = None
            elif p.kind is not p.VAR_POSITIONAL and p.name not in self.supplied:
                out[p.name] = p.default
        return out

    def check_keywords(self, name: str, given: Any, where: str) -> None:
        """Raise ValueError for a keyword of ``given`` that ``name``'s constructor does not take, naming
        ``where`` (the config key) and the valid keywords."""
        valid = self.keywords(name)
        if self.ANY in valid:
            return
        unknown = sorted(set(given) - set(valid))
        if unknown:
            raise ValueError(
                f"{self.kind} {name!r} takes no keyword {', '.join(map(repr, unknown))} ({where}); valid: "
                f"{', '.join(sorted(valid)) or 'none'}"
            )
