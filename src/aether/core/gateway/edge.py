"""North-south: the edge's listeners with their virtual hosts (HTTP, HTTPS) or L4 routes (TLS, TCP, UDP), and the
status of the edge's Gateways.

Each domain of a listener gets one virtual host holding the rules of every route that serves that host, in
precedence order: a route for `a.example.com` before one for `*.example.com` before one without hostnames. A
domain belongs to one listener per port: the one with the most specific hostname (then the oldest Gateway) claims
it, so Envoy never sees a domain twice on a port.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from aether.core.gateway import ir
from aether.core.gateway.attach import Attached, Resolved
from aether.core.gateway.contract import (
    EDGE_CONTROLLER,
    EdgeListener,
    L4Route,
    ObjectStatus,
)
from aether.core.gateway.entries import Entry, translate
from aether.core.gateway.hostnames import ANY_HOST, covers, specificity
from aether.core.gateway.l4 import claim, weighted_backends
from aether.core.gateway.listeners import ListenerState
from aether.core.gateway.memo import Memo
from aether.core.gateway.model.gateways import Gateway, Listener
from aether.core.gateway.model.routes import GRPC_ROUTE, HTTP_ROUTE, TLS_ROUTE, UDP_ROUTE, Route
from aether.core.gateway.precedence import ordered, shadow_note
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


class _HostIndex:
    """Which routes of a listener serve a domain, without testing every route against every domain."""

    def __init__(self, hosts: Iterable[tuple[str, ...]]) -> None:
        self._exact: dict[str, list[int]] = {}
        self._wildcards: list[tuple[str, int]] = []
        for at, names in enumerate(hosts):
            for name in names:
                if name.startswith("*"):
                    self._wildcards.append((name, at))
                else:
                    self._exact.setdefault(name, []).append(at)

    def serving(self, domain: str) -> list[int]:
        """Return the positions of the routes with a hostname covering `domain`, in order."""
        found = set(self._exact.get(domain, ()))
        found.update(at for name, at in self._wildcards if covers(name, domain))
        return sorted(found)


@attrs.frozen(kw_only=True)
class _Domain:
    """One virtual host of a listener and what building it found."""

    vhost: ir.VirtualHost
    notes: tuple[tuple[str, str], ...]
    services: frozenset[str]
    clusters: frozenset[str]


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

    def virtual_hosts(
        self, state: ListenerState, pairs: Sequence[tuple[Resolved, Attached]]
    ) -> tuple[ir.VirtualHost, ...]:
        claimed = self.claimed.setdefault(state.listener.port, set())
        domains = sorted({host for _, attached in pairs for host in attached.hosts}, key=_domain_order)
        gateway, listener = state.gateway.meta, state.listener.name
        index = _HostIndex(pair[1].hosts for pair in pairs)
        vhosts = []
        for domain in domains:
            if domain in claimed:
                continue
            claimed.add(domain)
            serving = tuple(pairs[at][0] for at in index.serving(domain))
            key = ("vhost", gateway.key, listener, domain)
            # The hostname each route serves the domain through follows from the route: the routes are the key.
            built = self.memo.unit(key, serving)
            if built is None:
                contributors = [(item, _route_host(item.route, domain)) for item in serving]
                built = self.memo.store(
                    key,
                    serving,
                    self._domain(
                        name=f"{gateway.namespace}/{gateway.name}/{listener}/{domain}",
                        scope=f"Gateway {gateway.namespace}/{gateway.name} listener {listener!r} host {domain!r}",
                        domain=domain,
                        listener=state.listener,
                        contributors=contributors,
                    ),
                )
            for route_key, note in built.notes:
                self.note(route_key, note)
            self.services.update(built.services)
            self.clusters.update(built.clusters)
            vhosts.append(built.vhost)
        return tuple(vhosts)

    def _domain(
        self,
        *,
        name: str,
        scope: str,
        domain: str,
        listener: Listener,
        contributors: Sequence[tuple[Resolved, str]],
    ) -> _Domain:
        """Build the virtual host of `domain` on `listener` from the routes serving it (each through its own
        hostname)."""
        entries: dict[str, list[Entry]] = {HTTP_ROUTE: [], GRPC_ROUTE: []}
        scheme = _SCHEMES[listener.protocol]
        for item, host in contributors:
            entries[item.route.kind].extend(
                item.entries(host=host, listener_port=listener.port, listener_scheme=scheme)
            )
        routes: list[ir.HTTPRoute] = []
        notes: list[tuple[str, str]] = []
        services: set[str] = set()
        for kind in (GRPC_ROUTE, HTTP_ROUTE):
            kept, lost = ordered(entries[kind])
            notes.extend((loser.route.key, shadow_note(scope, loser, winner)) for loser, winner in lost)
            translated, targets = translate(kept, routes_of=self.memo.entry_routes)
            routes.extend(translated)
            services.update(targets)
        return _Domain(
            vhost=ir.VirtualHost(name=name, domains=(domain,), routes=tuple(routes)),
            notes=tuple(notes),
            services=frozenset(services),
            clusters=frozenset(cluster for route in routes for cluster in route.clusters),
        )

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
    pairs: dict[_ListenerKey, list[tuple[Resolved, Attached]]] = {}
    for item in resolved:
        if not item.working:
            continue
        seen: set[_ListenerKey] = set()
        for result in item.parents:
            if not result.accepted or result.controller != EDGE_CONTROLLER:
                continue
            for attached in result.listeners:
                key = _key(attached.state)
                if key not in seen:
                    seen.add(key)
                    pairs.setdefault(key, []).append((item, attached))
    builder = _Builder(memo=memo)
    usable = [state for state in states if state.usable]
    # Claiming order: the most specific listener hostname first, then the oldest Gateway, then listener order.
    claim_order = sorted(
        usable,
        key=lambda state: (
            _domain_order(state.listener.hostname or ANY_HOST)[:2],
            state.gateway.age,
            state.index,
        ),
    )
    built: dict[_ListenerKey, EdgeListener] = {}
    for state in claim_order:
        listener = state.listener
        members = pairs.get(_key(state), [])
        l7 = listener.protocol in ("HTTP", "HTTPS")
        built[_key(state)] = EdgeListener(
            gateway=state.gateway.meta.key,
            name=listener.name,
            port=listener.port,
            protocol=listener.protocol,
            hostname=listener.hostname,
            tls_mode=listener.tls_mode,
            certificates=state.certificates,
            virtual_hosts=builder.virtual_hosts(state, members) if l7 else (),
            l4_routes=() if l7 else builder.l4_routes(state, members),
        )
    listeners = tuple(
        built[_key(state)]
        for state in sorted(
            usable, key=lambda state: (state.listener.port, state.gateway.meta.key, state.index)
        )
    )
    return EdgeResult(
        listeners=listeners,
        shadowed=builder.shadowed,
        backend_services=frozenset(builder.services),
        backend_clusters=frozenset(builder.clusters),
        attached={key: len(items) for key, items in pairs.items()},
    )


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
