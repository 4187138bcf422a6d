"""What a `GatewayProjector` remembers between views: results keyed on the identity of the inputs they came from.

A hit is always what recomputing would give: an entry's routes are reused only for the very same parsed
route (its object is kept as long as its Kubernetes object is the same object) with equal resolved backends; a
virtual host or a mesh service's routing only when the same resolved routes, through the same hostnames, contribute.
Units a view did not use, and translations of routes that no longer exist, are forgotten at its end, so memory
follows the objects that exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aether.core.gateway import ir
from aether.core.gateway.entries import Entry, entry_routes

_RouteKey = tuple[str, int, int, int, str]
"""`(route key, rule index, match index, listener port, listener scheme)`: a redirect follows its listener."""


class Memo:
    """Caches of one projector (see the module docstring); `sweep` after each view."""

    def __init__(self, *, mesh_domain: str) -> None:
        self.mesh_domain = mesh_domain
        self._routes: dict[
            _RouteKey, tuple[object, tuple[object, ...], tuple[object, ...], tuple[ir.HTTPRoute, ...]]
        ] = {}
        self._units: dict[object, tuple[tuple[object, ...], Any]] = {}
        self._used_units: set[object] = set()
        self._by_route: dict[str, set[_RouteKey]] = {}
        self.translated = 0
        """Entries translated since the counters were last reset (the rest were reused)."""
        self.built = 0
        """Units (virtual hosts, mesh routings) built since the counters were last reset."""

    def entry_routes(self, entry: Entry) -> tuple[ir.HTTPRoute, ...]:
        """Return `entry_routes(entry)`, computed once per parsed route and resolved backends."""
        key = (
            entry.route.key,
            entry.rule.index,
            entry.match_index,
            entry.listener_port,
            entry.listener_scheme,
        )
        held = self._routes.get(key)
        if (
            held is not None
            and held[0] is entry.route
            and held[1] == entry.backends
            and held[2] == entry.mirrors
        ):
            return held[3]
        routes = entry_routes(entry, mesh_domain=self.mesh_domain)
        self.translated += 1
        self._routes[key] = (entry.route, entry.backends, entry.mirrors, routes)
        self._by_route.setdefault(key[0], set()).add(key)
        return routes

    def unit(self, key: object, signature: tuple[object, ...]) -> Any | None:
        """Return what was stored for `key` with the same `signature` (compared by identity), or None."""
        self._used_units.add(key)
        held = self._units.get(key)
        if held is None or len(held[0]) != len(signature):
            return None
        if all(a is b or (type(a) is str and a == b) for a, b in zip(held[0], signature, strict=True)):
            return held[1]
        return None

    def store(self, key: object, signature: tuple[object, ...], value: Any) -> Any:
        """Remember `value` for `key` and `signature`; return it."""
        self._units[key] = (signature, value)
        self.built += 1
        return value

    def sweep(self, routes: set[str]) -> None:
        """Forget the units the last view did not use, and the translations of routes that no longer exist."""
        self.forget([route for route in self._by_route if route not in routes])
        self.sweep_units()

    def forget(self, routes: Iterable[str]) -> None:
        """Forget the translations of `routes` (which no longer exist)."""
        for route in routes:
            for key in self._by_route.pop(route, ()):
                del self._routes[key]

    def sweep_units(self) -> None:
        """Forget the units the last view did not use."""
        for unit_key in set(self._units).difference(self._used_units):
            del self._units[unit_key]
        self._used_units.clear()

    def reset_counters(self) -> None:
        """Start counting anew (at the start of a view)."""
        self.translated = self.built = 0
