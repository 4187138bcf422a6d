"""The edge's route tables assembled from serialized parts, kept between projections (`EdgeTables`).

An edge route table holds every route of its listener port in one resource: ten thousand routes at ten thousand
HTTPRoutes. Protobuf's deterministic serialization writes fields in field-number order, so a table's bytes are
its fields before `virtual_hosts` (2), each virtual host's entry, and its fields after, joined; a virtual host's
bytes are likewise its name and domains, then each route's `routes` (3) entry. So each virtual host's entry is
kept, and each of its routes' entries: a virtual host the view gives as the same object costs nothing, one it
gives anew (one of its routes changed) is joined from its routes' entries, of which only the routes the view gives
anew are serialized. The bytes are those `edge.table_message` serializes to (a property test holds them equal).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from itertools import chain
from typing import Any

import attrs

from aether.core.gateway import ir
from aether.core.project.edge import TablePlan
from aether.core.project.edge_listeners import (
    MISDIRECTED_VHOST,
    misdirected_vhost,
    not_found_vhost,
    route_table_options,
    table_hosts,
)
from aether.core.project.gateway_routes import envoy_routes, envoy_virtual_host
from aether.core.project.routes import vhost_entry
from aether.core.protowire import varint
from aether.core.snapshot import ROUTE_TYPE, Resource

_VIRTUAL_HOSTS = 2
"""`RouteConfiguration.virtual_hosts`."""
_ROUTES = 3
"""`VirtualHost.routes`."""
_ROUTES_TAG = varint(_ROUTES << 3 | 2)
"""The tag of a `routes` entry: field 3, wire type 2 (length-delimited)."""
_VIRTUAL_HOSTS_TAG = varint(_VIRTUAL_HOSTS << 3 | 2)
_NOT_FOUND_ENTRY = vhost_entry(not_found_vhost())


def _around(message: Any, number: int) -> tuple[bytes, bytes]:
    """Return `message` serialized in two parts: its fields numbered below `number`, and those above (it has
    nothing in field `number`: the caller puts that field's entries between the two)."""
    head, tail = type(message)(), type(message)()
    head.CopyFrom(message)
    tail.CopyFrom(message)
    for descriptor, _ in message.ListFields():
        assert descriptor.number != number, f"field {descriptor.name!r} is set: this is a bug"
        (tail if descriptor.number < number else head).ClearField(descriptor.name)
    return head.SerializeToString(deterministic=True), tail.SerializeToString(deterministic=True)


def _route_entries(route: ir.HTTPRoute) -> bytes:
    """The `routes` entries of one route of the view (an edge route: see `gateway_routes.envoy_routes`)."""
    entries = []
    for message in envoy_routes(route, mesh=False):
        body = message.SerializeToString(deterministic=True)
        entries.append(_ROUTES_TAG + varint(len(body)) + body)
    return b"".join(entries)


class _Host:
    """One virtual host's entry in one table, and the entries of its routes."""

    __slots__ = ("domains", "entry", "routes", "vhost")

    def __init__(
        self, vhost: ir.VirtualHost, domains: tuple[str, ...], routes: list[bytes], entry: bytes
    ) -> None:
        self.vhost = vhost
        """The view's virtual host. It holds every route `routes` belongs to, so while this is kept no other live
        route has the id of one of them."""
        self.domains = domains
        """The domains the table keeps for it (`table_hosts`)."""
        self.routes = routes
        """The `routes` entries of each route of `vhost`, in its order."""
        self.entry = entry
        """Its `virtual_hosts` entry (tag, length, bytes)."""


def _route_entries_of(held: _Host | None, vhost: ir.VirtualHost) -> tuple[list[bytes], int]:
    """Return the `routes` entries of each route of `vhost`, reusing those of `held` (the entry built before)
    for the very same route objects; and how many routes were serialized.

    A change moves, adds or removes a few routes of thousands: the routes before the first and after the last
    that are not the same objects at the same place (found at C speed, `map(operator.is_, ...)`) keep their
    entries as they are, and only those between are looked up by identity.
    """
    routes = vhost.routes
    if held is None:
        return [_route_entries(route) for route in routes], len(routes)
    old, entries = held.vhost.routes, held.routes
    if old is routes:
        return entries, 0
    same = list(map(operator.is_, old, routes))  # as long as the shorter
    prefix = same.index(False) if False in same else len(same)
    same = list(map(operator.is_, reversed(old[prefix:]), reversed(routes[prefix:])))
    suffix = same.index(False) if False in same else len(same)
    # An id of `old` is that very route: `held.vhost` holds them all (no other live object has their ids).
    old_end, new_end = len(old) - suffix, len(routes) - suffix
    by_id = dict(zip(map(id, old[prefix:old_end]), entries[prefix:old_end], strict=True))
    middle: list[bytes | None] = list(map(by_id.get, map(id, routes[prefix:new_end])))
    serialized = 0
    at = -1
    while True:
        try:
            at = middle.index(None, at + 1)
        except ValueError:
            break
        middle[at] = _route_entries(routes[prefix + at])
        serialized += 1
    return [*entries[:prefix], *middle, *entries[old_end:]], serialized  # type: ignore[list-item]  # Invariant: no None left


@attrs.frozen(kw_only=True)
class EdgeTablesStatistics:
    """What the last `EdgeTables.resources` call did."""

    tables: int
    """Route tables whose bytes were assembled anew (the others were the same parts)."""
    virtual_hosts: int
    """Virtual host entries joined anew."""
    routes: int
    """Routes serialized (the others' entries were reused)."""


class EdgeTables:
    """Builds the edge's route tables from their plans, reusing the entries of the virtual hosts and routes the
    view gives as the same objects (see the module docstring); holds nothing else, so its tables equal
    `edge.table_message` of the same plans whatever it built before."""

    def __init__(self) -> None:
        self._hosts: dict[tuple[str, str], _Host] = {}
        """By (table name, virtual host name), the last entry built."""
        self._tables: dict[str, tuple[tuple[bytes, ...], Resource]] = {}
        self._misdirected: dict[tuple[str, ...], bytes] = {}
        self._statistics = EdgeTablesStatistics(tables=0, virtual_hosts=0, routes=0)

    def statistics(self) -> EdgeTablesStatistics:
        """Return what the last call did."""
        return self._statistics

    def resources(self, plans: Iterable[TablePlan]) -> list[Resource]:
        """Return the route table resources of `plans`, in order."""
        hosts: dict[tuple[str, str], _Host] = {}
        tables: dict[str, tuple[tuple[bytes, ...], Resource]] = {}
        misdirected: dict[tuple[str, ...], bytes] = {}
        built = joined = serialized = 0
        resources = []
        for plan in plans:
            vhosts = plan.vhosts
            named = chain(
                ((vhost.name, vhost.domains) for vhost in vhosts),
                ((MISDIRECTED_VHOST, plan.misdirected),) if plan.misdirected else (),
            )
            kept, not_found = table_hosts(named)
            held = self._tables.get(plan.name)
            head, tail = (
                (held[0][0], held[0][-1])
                if held is not None
                else _around(route_table_options(plan.name), _VIRTUAL_HOSTS)
            )
            parts = [head]
            for index, fresh in kept:
                if index == len(vhosts):  # `edge_misdirected`, last
                    domains = tuple(fresh)
                    entry = self._misdirected.get(domains) or vhost_entry(misdirected_vhost(domains))
                    misdirected[domains] = entry
                    parts.append(entry)
                    continue
                key = (plan.name, vhosts[index].name)
                previous = self._hosts.get(key)
                host, routes = self._host(previous, vhosts[index], tuple(fresh))
                joined += host is not previous
                serialized += routes
                hosts[key] = host
                parts.append(host.entry)
            if not_found:
                parts.append(_NOT_FOUND_ENTRY)
            parts.append(tail)
            parts_kept = tuple(parts)
            # The same entries: the same resource (kept entries compare by identity first, new ones mostly by
            # length).
            if held is not None and held[0] == parts_kept:
                parts_kept, resource = held
            else:
                resource = Resource.from_parts(ROUTE_TYPE, name=plan.name, parts=parts_kept)
                built += 1
            tables[plan.name] = (parts_kept, resource)
            resources.append(resource)
        self._hosts, self._tables, self._misdirected = hosts, tables, misdirected
        self._statistics = EdgeTablesStatistics(tables=built, virtual_hosts=joined, routes=serialized)
        return resources

    def _host(self, held: _Host | None, vhost: ir.VirtualHost, domains: tuple[str, ...]) -> tuple[_Host, int]:
        """Return the entry of `vhost` keeping `domains`, from `held` (its entry in the last tables) where it can;
        and how many routes it serialized."""
        if held is not None and held.vhost is vhost and held.domains == domains:
            return held, 0
        joined, serialized = _route_entries_of(held, vhost)
        head, tail = _around(envoy_virtual_host(attrs.evolve(vhost, domains=domains, routes=())), _ROUTES)
        size = len(head) + sum(map(len, joined)) + len(tail)
        entry = b"".join((_VIRTUAL_HOSTS_TAG, varint(size), head, *joined, tail))
        return _Host(vhost, domains, joined, entry), serialized
