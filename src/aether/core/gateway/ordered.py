"""A collection kept in the order of unique sort keys, changed by bisection: what the incremental Gateway view keeps
per listener, virtual host and mesh service, so that one route's change costs a search, not a sort."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Generic, TypeVar

from aether.core.gateway.model.routes import Route

V = TypeVar("V")


class Ordered(Generic[V]):
    """Values in the order of their keys (unique, comparable with each other)."""

    def __init__(self) -> None:
        self._keys: list[Any] = []
        self._values: list[V] = []

    def add(self, key: Any, value: V) -> None:
        """Insert `value` under `key` (not held yet)."""
        keys = self._keys
        if not keys or keys[-1] < key:  # taken in order (a view from scratch): no search
            keys.append(key)
            self._values.append(value)
            return
        at = bisect_left(keys, key)
        # Invariant: keys are unique (a route's age and kind; an entry's precedence key).
        assert at == len(self._keys) or self._keys[at] != key, f"{key!r} is held twice; this is a bug"
        self._keys.insert(at, key)
        self._values.insert(at, value)

    def remove(self, key: Any) -> None:
        """Remove the value held under `key`."""
        at = bisect_left(self._keys, key)
        assert at < len(self._keys), f"{key!r} is not held; this is a bug"
        assert self._keys[at] == key, f"{key!r} is not held; this is a bug"
        del self._keys[at]
        del self._values[at]

    def get(self, key: Any) -> V:
        """Return the value held under `key`."""
        at = bisect_left(self._keys, key)
        assert at < len(self._keys), f"{key!r} is not held; this is a bug"
        assert self._keys[at] == key, f"{key!r} is not held; this is a bug"
        return self._values[at]

    def first(self) -> V:
        """Return the value of the smallest key (there is one)."""
        return self._values[0]

    def __contains__(self, key: object) -> bool:
        at = bisect_left(self._keys, key)
        return at < len(self._keys) and self._keys[at] == key

    def values(self) -> list[V]:
        """The values in key order (the list itself: do not change it)."""
        return self._values

    def __len__(self) -> int:
        return len(self._keys)


RouteOrder = tuple[tuple[str, str, str], str]
"""A route's place among routes: oldest first (`Route.age`), then its kind."""


def route_order(route: Route) -> RouteOrder:
    """Return the key routes are taken in (oldest first)."""
    return (route.age, route.kind)
