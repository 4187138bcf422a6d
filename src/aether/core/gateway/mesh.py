"""GAMMA: the routes whose parent is a Service, per mesh service, in precedence order, as the view's routes."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import immutables

from aether.core.gateway import ir
from aether.core.gateway.attach import Resolved
from aether.core.gateway.contract import MESH_CONTROLLER, MeshRouting, PortRouting
from aether.core.gateway.entries import Entry, translate
from aether.core.gateway.ir import selector_keys
from aether.core.gateway.memo import Memo
from aether.core.gateway.model.routes import GRPC_ROUTE, HTTP_ROUTE
from aether.core.gateway.precedence import ordered, shadow_note


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


def _translated(
    service: str, contributors: Sequence[Resolved], memo: Memo, notes: dict[tuple[str, str], None]
) -> tuple[tuple[ir.HTTPRoute, ...], tuple[ir.HTTPRoute, ...], set[str]]:
    """Return the HTTP and gRPC routes of `contributors` in precedence order and the services they send to; the
    matches lost to older routes are added to `notes`."""
    http: list[Entry] = []
    grpc: list[Entry] = []
    for item in contributors:
        (grpc if item.route.kind == GRPC_ROUTE else http).extend(item.entries())
    translated = []
    targets: set[str] = set()
    for entries in (http, grpc):
        kept, lost = ordered(entries)
        for loser, winner in lost:
            notes[(loser.route.key, shadow_note(f"mesh service {service}", loser, winner))] = None
        routes, services = translate(kept, routes_of=memo.entry_routes)
        translated.append(tuple(routes))
        targets.update(services)
    return translated[0], translated[1], targets


def _service(service: str, contributors: Sequence[Resolved], memo: Memo) -> _Service:
    notes: dict[tuple[str, str], None] = {}
    ports = {item.route.key: _ports(item, service) for item in contributors}
    anywhere = [item for item in contributors if 0 in ports[item.route.key]]
    http, grpc, targets = _translated(service, anywhere, memo, notes)
    by_port = []
    for port in sorted({port for named in ports.values() for port in named if port}):
        scoped = [item for item in contributors if ports[item.route.key] & {0, port}]
        port_http, port_grpc, port_targets = _translated(service, scoped, memo, notes)
        by_port.append(PortRouting(port=port, http_routes=port_http, grpc_routes=port_grpc))
        targets.update(port_targets)
    every = (*http, *grpc, *(route for item in by_port for route in item.all_routes))
    routing = MeshRouting(
        service=service,
        http_routes=http,
        grpc_routes=grpc,
        routes=tuple(sorted({item.route.key for item in contributors})),
        backend_services=tuple(sorted(targets)),
        backend_selectors=immutables.Map(selector_keys(every)),
        every_port=bool(anywhere),
        ports=tuple(by_port),
    )
    return _Service(routing=routing, notes=tuple(notes))


def mesh_routing(resolved: Sequence[Resolved], *, memo: Memo) -> MeshResult:
    """Return the GAMMA routing of `resolved` routes (oldest first); a service whose contributing routes are the
    same objects as in the previous view keeps its `MeshRouting` object."""
    contributors: dict[str, list[Resolved]] = {}
    for item in resolved:
        if not item.working or item.route.kind not in (HTTP_ROUTE, GRPC_ROUTE):
            continue
        services = {
            result.service
            for result in item.parents
            if result.accepted and result.controller == MESH_CONTROLLER and result.service
        }
        for service in services:
            contributors.setdefault(service, []).append(item)
    routing: dict[str, MeshRouting] = {}
    shadowed: dict[str, list[str]] = {}
    backends: set[str] = set()
    for service in sorted(contributors):
        signature = tuple(contributors[service])
        key = ("mesh", service)
        held = memo.unit(key, signature)
        if held is None:
            held = memo.store(key, signature, _service(service, contributors[service], memo))
        for route_key, note in held.notes:
            shadowed.setdefault(route_key, []).append(note)
        routing[service] = held.routing
        backends.update(held.routing.backend_services)
    return MeshResult(routing=routing, shadowed=shadowed, backend_services=frozenset(backends))
