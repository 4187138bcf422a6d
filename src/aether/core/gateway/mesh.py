"""GAMMA: the routes whose parent is a Service, per mesh service, in precedence order, as the view's routes."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import immutables

from aether.core.gateway import ir
from aether.core.gateway.attach import Resolved
from aether.core.gateway.contract import MESH_CONTROLLER, MeshRouting, PortRouting
from aether.core.gateway.entries import Entry, translate
from aether.core.gateway.ir import selector_keys, slice_clusters
from aether.core.gateway.memo import Memo
from aether.core.gateway.model.routes import GRPC_ROUTE, HTTP_ROUTE
from aether.core.gateway.ordered import Ordered, route_order
from aether.core.gateway.precedence import ordered, shadow_note
from aether.core.mesh_names import http_cluster_name


@attrs.frozen(kw_only=True)
class MeshResult:
    """The GAMMA routing of every mesh service some route targets."""

    routing: dict[str, MeshRouting]
    shadowed: dict[str, list[str]]
    """Per route key, the matches it lost to an older route."""
    backend_services: frozenset[str]


@attrs.frozen(kw_only=True)
class _Service:
    routing: MeshRouting
    notes: tuple[tuple[str, str], ...]
    """`(route key, message)` of the matches lost to older routes."""


def _ports(item: Resolved, service: str) -> frozenset[int]:
    """The Service ports the route's parentRefs to `service` name (0: a parentRef naming none)."""
    return frozenset(
        result.ref.port
        for result in item.parents
        if result.accepted and result.controller == MESH_CONTROLLER and result.service == service
    )


HTTP_DEFAULT_PORT = 80
"""The port a Host without one names (HTTP's default): a GAMMA route for Service port 80 takes the bare name."""


def _bare_port(named: Sequence[int], contributors: Sequence[Resolved], service: str) -> int:
    """The port a Host without one names among `named` (the ports routes name): 80, HTTP's default; else the one
    named port that is the whole of its Service's ports (every parent naming it says so); 0 for none."""
    if HTTP_DEFAULT_PORT in named:
        return HTTP_DEFAULT_PORT
    only = {
        result.ref.port
        for item in contributors
        for result in item.parents
        if result.accepted
        and result.controller == MESH_CONTROLLER
        and result.service == service
        and result.ref.port
        and result.ports == (result.ref.port,)
    }
    return next(iter(only)) if len(only) == 1 else 0


def _caller_namespace(item: Resolved, service: str) -> str:
    """The route's namespace when it is a consumer route of `service` (in another namespace than the Services it
    routes, whose namespace is the mesh service's); empty for a producer route."""
    namespace = item.route.meta.namespace
    return namespace if namespace != service.partition("/")[0] else ""


def _translated(
    service: str, contributors: Sequence[Resolved], memo: Memo, notes: dict[tuple[str, str], None]
) -> tuple[tuple[ir.HTTPRoute, ...], tuple[ir.HTTPRoute, ...], set[str]]:
    """Return the HTTP and gRPC routes of `contributors` in precedence order and the services they send to; the
    matches lost to older routes are added to `notes`.

    Consumer routes (GEP-1294) come first, grouped by namespace (sorted), each taking its own namespace's callers
    only: for those callers they take precedence over the producer's routes, which come last and take every
    caller's requests that no consumer route took. Precedence and conflicts are decided within each group.
    """
    groups: dict[str, tuple[list[Entry], list[Entry]]] = {}
    for item in contributors:
        caller = _caller_namespace(item, service)
        http, grpc = groups.setdefault(caller, ([], []))
        (grpc if item.route.kind == GRPC_ROUTE else http).extend(item.entries(caller_namespace=caller))
    translated: tuple[list[ir.HTTPRoute], list[ir.HTTPRoute]] = ([], [])
    targets: set[str] = set()
    for caller in sorted(groups, key=lambda namespace: (not namespace, namespace)):
        for entries, into in zip(groups[caller], translated, strict=True):
            kept, lost = ordered(entries)
            for loser, winner in lost:
                notes[(loser.route.key, shadow_note(f"mesh service {service}", loser, winner))] = None
            routes, services = translate(kept, routes_of=memo.entry_routes)
            into.extend(routes)
            targets.update(services)
    if groups and "" not in groups:
        # Only consumer routes: every other caller keeps the service's default routing.
        translated[0].append(_default_route(service, mesh_domain=memo.mesh_domain))
    return tuple(translated[0]), tuple(translated[1]), targets


def _default_route(service: str, *, mesh_domain: str) -> ir.HTTPRoute:
    """The route of a service without GAMMA routes: every request to its own cluster."""
    return ir.HTTPRoute(
        name="",
        match=ir.RouteMatch(path=ir.StringMatch(kind=ir.PREFIX, value="/")),
        action=ir.Forward(
            destinations=(
                ir.Destination(cluster=http_cluster_name(service, mesh_domain=mesh_domain), weight=1),
            )
        ),
    )


def _service(service: str, contributors: Sequence[Resolved], memo: Memo) -> _Service:
    notes: dict[tuple[str, str], None] = {}
    ports = {item.route.key: _ports(item, service) for item in contributors}
    anywhere = [item for item in contributors if 0 in ports[item.route.key]]
    http, grpc, targets = _translated(service, anywhere, memo, notes)
    by_port = []
    named = sorted({port for named in ports.values() for port in named if port})
    bare = _bare_port(named, contributors, service)
    for port in named:
        scoped = [item for item in contributors if ports[item.route.key] & {0, port}]
        port_http, port_grpc, port_targets = _translated(service, scoped, memo, notes)
        by_port.append(
            PortRouting(port=port, http_routes=port_http, grpc_routes=port_grpc, bare=port == bare)
        )
        targets.update(port_targets)
    every = (*http, *grpc, *(route for item in by_port for route in item.all_routes))
    routing = MeshRouting(
        service=service,
        http_routes=http,
        grpc_routes=grpc,
        routes=tuple(sorted({item.route.key for item in contributors})),
        backend_services=tuple(sorted(targets)),
        backend_selectors=immutables.Map(selector_keys(every)),
        slice_clusters=slice_clusters(every),
        every_port=bool(anywhere),
        ports=tuple(by_port),
    )
    return _Service(routing=routing, notes=tuple(notes))


def mesh_services(item: Resolved) -> set[str]:
    """The mesh services a GAMMA HTTP or gRPC route applies to (its accepted Service parents'); none for another."""
    if not item.working or item.route.kind not in (HTTP_ROUTE, GRPC_ROUTE):
        return set()
    return {
        result.service for result in item.parents if result.accepted and result.controller == MESH_CONTROLLER
    }


class MeshBuilder:
    """The GAMMA routes added to it, per mesh service in route order: adding or removing a route rebuilds only
    the routing of the services it applies to."""

    def __init__(self, *, memo: Memo) -> None:
        self._memo = memo
        self.members: dict[str, Ordered[Resolved]] = {}
        """Per mesh service (empty: a parent whose mesh service is not known), its routes oldest first."""
        self._held: dict[str, tuple[Resolved, set[str]]] = {}
        self.changed: set[str] = set()
        """The services whose routes changed since `result` was last asked."""

    def add(self, item: Resolved) -> None:
        """Add a route (not held yet)."""
        services = mesh_services(item)
        if not services:
            return
        self._held[item.route.key] = (item, services)
        for service in services:
            self.members.setdefault(service, Ordered()).add(route_order(item.route), item)
        self.changed.update(services)

    def remove(self, route: str) -> None:
        """Remove route `route` (a key; nothing when it is not held)."""
        held = self._held.pop(route, None)
        if held is None:
            return
        item, services = held
        for service in services:
            members = self.members[service]
            members.remove(route_order(item.route))
            if not len(members):
                del self.members[service]
        self.changed.update(services)

    def result(self) -> MeshResult:
        """Return the GAMMA routing of the routes held; a service whose routes are the same objects as in the
        previous view keeps its `MeshRouting` object."""
        routing: dict[str, MeshRouting] = {}
        shadowed: dict[str, list[str]] = {}
        backends: set[str] = set()
        memo = self._memo
        for service in sorted(self.members):
            if not service:
                continue
            contributors = self.members[service].values()
            signature = tuple(contributors)
            key = ("mesh", service)
            held = memo.unit(key, signature)
            if held is None:
                held = memo.store(key, signature, _service(service, contributors, memo))
            for route_key, note in held.notes:
                shadowed.setdefault(route_key, []).append(note)
            routing[service] = held.routing
            backends.update(held.routing.backend_services)
        self.changed = set()
        return MeshResult(routing=routing, shadowed=shadowed, backend_services=frozenset(backends))


def mesh_routing(resolved: Sequence[Resolved], *, memo: Memo) -> MeshResult:
    """Return the GAMMA routing of `resolved` routes (oldest first)."""
    builder = MeshBuilder(memo=memo)
    for item in resolved:
        builder.add(item)
    return builder.result()


def caller_routes(
    service: str, contributors: Sequence[Resolved], *, memo: Memo
) -> tuple[tuple[ir.HTTPRoute, ...], tuple[ir.HTTPRoute, ...]]:
    """Return the HTTP and gRPC routes `contributors` give `service`'s callers, in precedence order, as its routing
    does (consumer routes first; what they lose to older routes is the mesh routing's to report)."""
    http, grpc, _ = _translated(service, contributors, memo, {})
    return http, grpc
