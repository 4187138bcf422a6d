"""North-south: the edge's listeners with their virtual hosts (HTTP, HTTPS) or L4 routes (TLS, TCP, UDP), and the
status of the edge's Gateways.

Each domain of a listener gets one virtual host holding the rules of every route that serves that host, in
precedence order: a route for `a.example.com` before one for `*.example.com` before one without hostnames. A
domain belongs to one listener per port: the one with the most specific hostname (then the oldest Gateway) claims
it, so Envoy never sees a domain twice on a port.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from typing import Any

import attrs

from aether.core.gateway import ir
from aether.core.gateway.attach import Attached, Resolved
from aether.core.gateway.contract import (
    EDGE_CONTROLLER,
    EdgeListener,
    L4Route,
    ObjectStatus,
)
from aether.core.gateway.entries import Entry, sent_services
from aether.core.gateway.hostnames import ANY_HOST, covers, specificity
from aether.core.gateway.ir import forward_selector_keys
from aether.core.gateway.l4 import claim, weighted_backends
from aether.core.gateway.listeners import ListenerState
from aether.core.gateway.memo import Memo
from aether.core.gateway.model.gateways import Gateway
from aether.core.gateway.model.routes import GRPC_ROUTE, HTTP_ROUTE, TLS_ROUTE, UDP_ROUTE, Route
from aether.core.gateway.ordered import Ordered, route_order
from aether.core.gateway.precedence import entry_key, shadow_note
from aether.core.gateway.status import ACCEPTED, PROGRAMMED, condition

_ListenerKey = tuple[str, str]
"""`(gateway key, listener name)`."""
_SCHEMES = {"HTTP": "http", "HTTPS": "https"}
"""The URL scheme an L7 listener serves (what a redirect without a scheme keeps)."""


@attrs.frozen(kw_only=True)
class EdgeResult:
    """The edge's listeners and what the routes' and Gateways' status needs from building them."""

    listeners: tuple[EdgeListener, ...]
    shadowed: dict[str, list[str]]
    backend_services: frozenset[str]
    backend_clusters: frozenset[str]
    backend_selectors: Mapping[str, ir.SelectorKeys]
    """Per cluster the edge's routes send a selected share to, the key sets of those selectors."""
    attached: dict[_ListenerKey, int]
    """Routes attached per listener."""


def _key(state: ListenerState) -> _ListenerKey:
    return (state.gateway.meta.key, state.listener.name)


def _domain_order(domain: str) -> tuple[int, int, str]:
    characters, wildcard_characters = specificity(domain)
    return (-characters, -wildcard_characters, domain)


def _route_host(route: Route, domain: str) -> str:
    """Return the route's own hostname that serves `domain`, the most specific; empty for a route without any."""
    candidates = [name for name in route.hostnames if covers(name, domain)]
    return min(candidates, key=_domain_order) if candidates else ""


@attrs.frozen(kw_only=True)
class _Domain:
    """One virtual host of a listener and what building it found."""

    vhost: ir.VirtualHost
    notes: tuple[tuple[str, str], ...]
    services: frozenset[str]
    clusters: frozenset[str]
    selectors: Mapping[str, ir.SelectorKeys]


@attrs.frozen(kw_only=True, eq=False)
class _Piece:
    """One entry of a virtual host, translated once (what rebuilding the virtual host reads)."""

    key: tuple[object, ...]
    """Its place in the virtual host: gRPC first, then by precedence (`entry_key`)."""
    entry: Entry
    routes: tuple[ir.HTTPRoute, ...]
    services: frozenset[str]
    clusters: frozenset[str]
    selectors: tuple[tuple[str, tuple[str, ...]], ...]
    """`(cluster, selector keys)` of its routes' selected shares."""


_KIND_RANK = {GRPC_ROUTE: 0, HTTP_ROUTE: 1}
"""gRPC matches come first in a virtual host, and are never merged with HTTP ones."""


def _piece_key(piece: _Piece) -> tuple[object, ...]:
    return piece.key


@functools.lru_cache(
    maxsize=4096
)  # a pure function of values; routes to the same backends share their Forward
def _targets(
    forwards: tuple[ir.Forward, ...],
) -> tuple[frozenset[str], tuple[tuple[str, tuple[str, ...]], ...]]:
    """Return the clusters that the routes whose forwarding actions are `forwards` send or mirror to, and the
    `(cluster, selector keys)` of their selected shares (sorted, distinct)."""
    return (
        frozenset(cluster for forward in forwards for cluster in forward.clusters),
        tuple(
            (cluster, selected)
            for cluster, found in forward_selector_keys(forwards).items()
            for selected in found
        ),
    )


def _count(counts: dict[Any, int], items: Iterable[Any], by: int) -> None:
    for item in items:
        count = counts.get(item, 0) + by
        if count:
            counts[item] = count
        else:
            del counts[item]


class _VirtualHost:
    """The entries of the routes serving one domain of a listener, in precedence order, kept per route.

    Precedence's claim rule (`aether.core.gateway.precedence.ordered`: of the entries with one route hostname and
    match, the first claims it and the others lose to it) is kept per claim: a change moves only the entries of
    its claims between kept and lost, so rebuilding the virtual host joins what is kept without deciding again.
    """

    def __init__(self, *, state: ListenerState, domain: str, memo: Memo) -> None:
        gateway, listener = state.gateway.meta, state.listener.name
        self._name = f"{gateway.namespace}/{gateway.name}/{listener}/{domain}"
        self._scope = f"Gateway {gateway.namespace}/{gateway.name} listener {listener!r} host {domain!r}"
        self._domain = domain
        self._port = state.listener.port
        self._scheme = _SCHEMES[state.listener.protocol]
        self._memo = memo
        self._claims: dict[tuple[str, object], _Piece | list[_Piece]] = {}
        """Per claim identity (route hostname, match), its entry, or its entries in precedence order when several
        (the first is kept): most claims have one entry, held without a list (fewer objects for the collector)."""
        self._kept: Ordered[tuple[ir.HTTPRoute, ...]] = Ordered()
        """The routes of the kept entries, by precedence key."""
        self._lost: Ordered[tuple[str, str] | None] = Ordered()
        """The lost entries by precedence key, with their note (None: lost to an earlier rule of their own route)."""
        self._services: dict[str, int] = {}
        self._clusters: dict[str, int] = {}
        self._selectors: dict[tuple[str, tuple[str, ...]], int] = {}
        self._keys: dict[str, list[_Piece]] = {}
        self._built: _Domain | None = None

    def add(self, item: Resolved) -> None:
        """Add the entries of `item` (a route serving the domain)."""
        host = _route_host(item.route, self._domain)
        keys = self._keys.setdefault(item.route.key, [])
        rank = _KIND_RANK[item.route.kind]
        for entry in item.entries(host=host, listener_port=self._port, listener_scheme=self._scheme):
            routes = self._memo.entry_routes(entry)
            clusters, selectors = _targets(
                tuple([route.action for route in routes if type(route.action) is ir.Forward])
            )
            piece = _Piece(
                key=(rank, *entry_key(entry)),
                entry=entry,
                routes=routes,
                services=sent_services(entry),
                clusters=clusters,
                selectors=selectors,
            )
            identity = (entry.host, entry.match)
            keys.append(piece)
            held = self._claims.get(identity)
            if held is None:
                self._claims[identity] = piece
                self._keep(piece, 1)
                continue
            group = held if isinstance(held, list) else [held]
            self._claims[identity] = group
            winner = group[0]
            group.append(piece)
            group.sort(key=_piece_key)  # a claim's entries are few
            if group[0] is piece:
                self._keep(winner, -1)
                self._keep(piece, 1)
                self._relose(group)
            else:
                self._lose(piece, winner)
        self._built = None

    def remove(self, route: str) -> None:
        """Remove the entries of route `route`."""
        for piece in self._keys.pop(route, ()):
            key, identity = piece.key, (piece.entry.host, piece.entry.match)
            held = self._claims[identity]
            if not isinstance(held, list):
                del self._claims[identity]
                self._keep(piece, -1)
                continue
            group = held
            at = group.index(piece)
            del group[at]
            if not at:
                self._keep(piece, -1)
                if group:
                    winner = group[0]
                    self._lost.remove(winner.key)
                    self._keep(winner, 1)
                    self._relose(group)
            else:
                self._lost.remove(key)
            if not group:
                del self._claims[identity]
        self._built = None

    def _keep(self, piece: _Piece, by: int) -> None:
        if by > 0:
            self._kept.add(piece.key, piece.routes)
        else:
            self._kept.remove(piece.key)
        _count(self._services, piece.services, by)
        _count(self._clusters, piece.clusters, by)
        _count(self._selectors, piece.selectors, by)

    def _lose(self, piece: _Piece, winner: _Piece) -> None:
        same = winner.entry.route.key == piece.entry.route.key
        note = None if same else (piece.entry.route.key, shadow_note(self._scope, piece.entry, winner.entry))
        self._lost.add(piece.key, note)

    def _relose(self, group: list[_Piece]) -> None:
        """The first entry of `group` is newly kept: the others lose to it now (their notes name it)."""
        winner, *losers = group
        for piece in losers:
            if piece.key in self._lost:
                self._lost.remove(piece.key)
            self._lose(piece, winner)

    def build(self) -> _Domain:
        """Return the virtual host (rebuilt only after a change)."""
        if self._built is not None:
            return self._built
        selectors: dict[str, list[tuple[str, ...]]] = {}
        for cluster, selected in self._selectors:
            selectors.setdefault(cluster, []).append(selected)
        self._memo.built += 1
        self._built = _Domain(
            vhost=ir.VirtualHost(
                name=self._name,
                domains=(self._domain,),
                routes=tuple(chain.from_iterable(self._kept.values())),
            ),
            notes=tuple(note for note in self._lost.values() if note is not None),
            services=frozenset(self._services),
            clusters=frozenset(self._clusters),
            selectors={cluster: tuple(sorted(keys)) for cluster, keys in sorted(selectors.items())},
        )
        return self._built


class _Listener:
    """What the routes attached to one usable listener build: virtual hosts per domain (L7) or members (L4)."""

    def __init__(self, state: ListenerState, *, memo: Memo) -> None:
        self.state = state
        self.l7 = state.listener.protocol in ("HTTP", "HTTPS")
        self._memo = memo
        self.members: Ordered[tuple[Resolved, Attached]] = Ordered()
        self._hosts: dict[str, int] = {}
        """How many members name each host: the listener's domains."""
        self.vhosts: dict[str, _VirtualHost] = {}
        self._domains: list[str] | None = None

    def _serves(self, attached: Attached, domain: str) -> bool:
        return any(covers(name, domain) for name in attached.hosts)

    def _served(self, attached: Attached) -> list[str]:
        if any(name.startswith("*") for name in attached.hosts):
            return [domain for domain in self.vhosts if self._serves(attached, domain)]
        return [name for name in attached.hosts if name in self.vhosts]

    def add(self, item: Resolved, attached: Attached) -> None:
        self.members.add(route_order(item.route), (item, attached))
        if not self.l7:
            return
        for domain in self._served(attached):
            self.vhosts[domain].add(item)
        for name in attached.hosts:
            self._hosts[name] = self._hosts.get(name, 0) + 1
            if name not in self.vhosts:
                self._domains = None
                vhost = self.vhosts[name] = _VirtualHost(state=self.state, domain=name, memo=self._memo)
                for member, held in self.members.values():
                    if self._serves(held, name):
                        vhost.add(member)

    def remove(self, item: Resolved, attached: Attached) -> None:
        self.members.remove(route_order(item.route))
        if not self.l7:
            return
        for domain in self._served(attached):
            self.vhosts[domain].remove(item.route.key)
        for name in attached.hosts:
            self._hosts[name] -= 1
            if not self._hosts[name]:
                del self._hosts[name]
                del self.vhosts[name]
                self._domains = None

    def domains(self) -> list[str]:
        """The listener's domains, most specific first."""
        if self._domains is None:
            self._domains = sorted(self.vhosts, key=_domain_order)
        return self._domains


class EdgeBuilder:
    """The edge's listeners from the routes added to it, kept per listener, domain and route: adding or removing
    a route rebuilds only the virtual hosts it serves (and the L4 listeners, which are rebuilt whole)."""

    def __init__(self, states: Sequence[ListenerState], *, memo: Memo) -> None:
        self._memo = memo
        usable = [state for state in states if state.usable]
        self._listeners = {_key(state): _Listener(state, memo=memo) for state in usable}
        # Claiming order: the most specific listener hostname first, then the oldest Gateway, then listener order.
        self._claim_order = sorted(
            usable,
            key=lambda state: (
                _domain_order(state.listener.hostname or ANY_HOST)[:2],
                state.gateway.age,
                state.index,
            ),
        )
        self._output_order = [
            _key(state)
            for state in sorted(
                usable, key=lambda state: (state.listener.port, state.gateway.meta.key, state.index)
            )
        ]
        self._pairs: dict[str, list[tuple[_ListenerKey, Resolved, Attached]]] = {}
        self._attached: dict[_ListenerKey, int] = {}

    def add(self, item: Resolved) -> None:
        """Add a route (not held yet)."""
        if not item.working:
            return
        pairs: list[tuple[_ListenerKey, Resolved, Attached]] = []
        seen: set[_ListenerKey] = set()
        for result in item.parents:
            if not result.accepted or result.controller != EDGE_CONTROLLER:
                continue
            for attached in result.listeners:
                key = _key(attached.state)
                if key not in seen:
                    seen.add(key)
                    pairs.append((key, item, attached))
        if not pairs:
            return
        self._pairs[item.route.key] = pairs
        for key, _, attached in pairs:
            self._attached[key] = self._attached.get(key, 0) + 1
            listener = self._listeners.get(key)
            if listener is not None:
                listener.add(item, attached)

    def remove(self, route: str) -> None:
        """Remove the route `route` (a key; nothing when it is not held)."""
        for key, item, attached in self._pairs.pop(route, ()):
            self._attached[key] -= 1
            if not self._attached[key]:
                del self._attached[key]
            listener = self._listeners.get(key)
            if listener is not None:
                listener.remove(item, attached)

    def result(self) -> EdgeResult:
        """Return the edge's listeners built from the routes held."""
        builder = _Builder(memo=self._memo)
        selectors: dict[str, set[tuple[str, ...]]] = {}
        built: dict[_ListenerKey, EdgeListener] = {}
        for state in self._claim_order:
            held = self._listeners[_key(state)]
            listener = state.listener
            vhosts: tuple[ir.VirtualHost, ...] = ()
            if held.l7:
                claimed = builder.claimed.setdefault(listener.port, set())
                found = []
                for domain in held.domains():
                    if domain in claimed:
                        continue
                    claimed.add(domain)
                    vhost = held.vhosts[domain].build()
                    for route_key, note in vhost.notes:
                        builder.note(route_key, note)
                    builder.services.update(vhost.services)
                    builder.clusters.update(vhost.clusters)
                    for cluster, keys in vhost.selectors.items():
                        selectors.setdefault(cluster, set()).update(keys)
                    found.append(vhost.vhost)
                vhosts = tuple(found)
            built[_key(state)] = EdgeListener(
                gateway=state.gateway.meta.key,
                name=listener.name,
                port=listener.port,
                protocol=listener.protocol,
                hostname=listener.hostname,
                tls_mode=listener.tls_mode,
                certificates=state.certificates,
                virtual_hosts=vhosts,
                l4_routes=() if held.l7 else builder.l4_routes(state, held.members.values()),
            )
        return EdgeResult(
            listeners=tuple(built[key] for key in self._output_order),
            shadowed=builder.shadowed,
            backend_services=frozenset(builder.services),
            backend_clusters=frozenset(builder.clusters),
            backend_selectors={cluster: tuple(sorted(keys)) for cluster, keys in sorted(selectors.items())},
            attached=dict(self._attached),
        )


class _Builder:
    def __init__(self, *, memo: Memo) -> None:
        self.memo = memo
        self.mesh_domain = memo.mesh_domain
        self.shadowed: dict[str, list[str]] = {}
        self.services: set[str] = set()
        self.clusters: set[str] = set()
        self.claimed: dict[int, set[str]] = {}

    def note(self, route: str, message: str) -> None:
        self.shadowed.setdefault(route, []).append(message)

    def l4_routes(
        self, state: ListenerState, pairs: Sequence[tuple[Resolved, Attached]]
    ) -> tuple[L4Route, ...]:
        claimed = self.claimed.setdefault(
            -state.listener.port if state.listener.protocol == "UDP" else state.listener.port, set()
        )
        routes: list[L4Route] = []
        where = f"Gateway {state.gateway.meta.namespace}/{state.gateway.meta.name} listener {state.listener.name!r}"
        for item, attached in pairs:
            route = item.route
            free, taken = claim(route.kind, attached.hosts, claimed)
            if route.kind == TLS_ROUTE and taken:
                self.note(route.key, f"{where}: SNI {list(taken)} already routed by an older TLSRoute")
            elif taken:
                self.note(route.key, f"{where}: the listener already routes to an older {route.kind}")
            if free is None:
                continue
            backends = weighted_backends(item, mesh_domain=self.mesh_domain)
            for backend in backends:
                if backend.service:
                    self.services.add(backend.service)
                    if route.kind != UDP_ROUTE:  # a UDPRoute forwards through its own weighted cluster
                        self.clusters.add(backend.cluster)
            routes.append(L4Route(route=route.key, hostnames=free, backends=backends))
        return tuple(routes)


def edge_listeners(
    resolved: Sequence[Resolved], states: Sequence[ListenerState], *, memo: Memo
) -> EdgeResult:
    """Return the edge's listeners built from `resolved` routes (oldest first) and the listener `states`."""
    builder = EdgeBuilder(states, memo=memo)
    for item in resolved:
        builder.add(item)
    return builder.result()


def gateway_statuses(
    gateways: Sequence[Gateway], states: Sequence[ListenerState], attached: dict[_ListenerKey, int]
) -> dict[str, ObjectStatus]:
    """Return the status of each edge Gateway: Accepted and Programmed, and each listener's."""
    by_gateway: dict[str, list[ListenerState]] = {}
    for state in states:
        by_gateway.setdefault(state.gateway.meta.key, []).append(state)
    statuses: dict[str, ObjectStatus] = {}
    for gateway in gateways:
        meta = gateway.meta
        listeners = by_gateway.get(meta.key, [])
        bad = [state.listener.name for state in listeners if not state.usable]
        message = f"listeners {bad} are not valid" if bad else ""
        if len(bad) == len(listeners):
            conditions = (
                condition(
                    ACCEPTED,
                    ok=False,
                    reason="ListenersNotValid",
                    message=message,
                    generation=meta.generation,
                ),
                condition(
                    PROGRAMMED, ok=False, reason="Invalid", message=message, generation=meta.generation
                ),
            )
        else:
            conditions = (
                condition(
                    ACCEPTED,
                    ok=True,
                    reason="ListenersNotValid" if bad else "",
                    message=message,
                    generation=meta.generation,
                ),
                condition(PROGRAMMED, ok=True, generation=meta.generation),
            )
        statuses[meta.key] = ObjectStatus(
            kind=meta.kind,
            namespace=meta.namespace,
            name=meta.name,
            generation=meta.generation,
            conditions=conditions,
            listeners=tuple(state.status(attached.get(_key(state), 0)) for state in listeners),
        )
    return statuses
