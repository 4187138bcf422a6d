"""GAMMA: the routes whose parent is a Service, per mesh service, in precedence order, as Envoy routes."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from aether.core.gateway.actions import Entry, translate
from aether.core.gateway.attach import Resolved
from aether.core.gateway.contract import MESH_CONTROLLER, MeshRouting
from aether.core.gateway.model.routes import GRPC_ROUTE
from aether.core.gateway.precedence import ordered, shadow_note


@attrs.frozen(kw_only=True)
class MeshResult:
    """The GAMMA routing of every mesh service some route targets."""

    routing: dict[str, MeshRouting]
    shadowed: dict[str, list[str]]
    """Per route key, the matches it lost to an older route."""
    backend_services: frozenset[str]


def mesh_routing(resolved: Sequence[Resolved], *, mesh_domain: str) -> MeshResult:
    """Return the GAMMA routing of `resolved` routes (oldest first)."""
    buckets: dict[str, tuple[list[Entry], list[Entry], set[str]]] = {}
    for item in resolved:
        if not item.working:
            continue
        services = {
            result.service
            for result in item.parents
            if result.accepted and result.controller == MESH_CONTROLLER and result.service
        }
        for service in sorted(services):
            http, grpc, keys = buckets.setdefault(service, ([], [], set()))
            (grpc if item.route.kind == GRPC_ROUTE else http).extend(item.entries())
            keys.add(item.route.key)
    routing: dict[str, MeshRouting] = {}
    shadowed: dict[str, list[str]] = {}
    backends: set[str] = set()
    for service in sorted(buckets):
        http, grpc, keys = buckets[service]
        translated = []
        targets: set[str] = set()
        for entries in (http, grpc):
            kept, lost = ordered(entries)
            for loser, winner in lost:
                shadowed.setdefault(loser.route.key, []).append(
                    shadow_note(f"mesh service {service}", loser, winner)
                )
            routes, services = translate(kept, mesh_domain=mesh_domain, mesh=True)
            translated.append(tuple(routes))
            targets.update(services)
        backends.update(targets)
        routing[service] = MeshRouting(
            service=service,
            http_routes=translated[0],
            grpc_routes=translated[1],
            routes=tuple(sorted(keys)),
            backend_services=tuple(sorted(targets)),
        )
    return MeshResult(routing=routing, shadowed=shadowed, backend_services=frozenset(backends))
