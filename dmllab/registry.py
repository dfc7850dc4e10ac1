"""One small registry used by every family (losses, backbones, poolings, datasets).

Unknown or duplicate names raise and list the valid ones, so a typo in a config or on the command line is
reported where it happens instead of deep inside a factory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> object mapping for one family of components.

    Args:
        kind: what the family holds ("loss", "backbone", ...); used in error messages.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
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
