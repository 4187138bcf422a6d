"""Route tables: `out_http` and `cap_http` (a virtual host per service cluster plus the catch-all), and the
inbound delivery table.

A route table can hold ten thousand virtual hosts. Each service's virtual hosts are serialized once, as the exact
bytes of their `virtual_hosts` field entries, and a table is assembled by concatenation: protobuf's deterministic
serialization writes fields in field-number order, so `name` (1), the entries (2) and `validate_clusters` (7)
joined are the bytes the whole message serializes to (a test holds them equal). Adding one service then costs a
join, not the re-serialization of every other service's routes.

The mesh tables are kept as `Piece`s (`route_configuration_pieces`): the head, one piece per service (its virtual
hosts, hashed once when the service is projected: `services.ServiceProjection.vhosts`), and the catch-all with the
tail. The table's digest is over the pieces' digests (`aether.core.snapshot`), so a service joining the set hashes
no other service's bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from google.protobuf import wrappers_pb2

from aether.core.project.messages import seconds, shared_parts
from aether.core.project.names import (
    CATCH_ALL_VHOST,
    INBOUND_ROUTE,
    LIVE_PATH,
    OUTCOME_HEADER,
    PASSTHROUGH_CLUSTER,
    mesh_authority_regex,
)
from aether.core.project.outcome import idempotent_method_matcher, retry_policy
from aether.core.project.quic import QUIC_CLUSTER_HEADER, quic_header_present
from aether.core.protowire import varint
from aether.core.snapshot import Piece

_VIRTUAL_HOSTS_TAG = b"\x12"
"""Field 2 (`virtual_hosts`), wire type 2 (length-delimited): `(2 << 3) | 2`."""

AUTHORITY_HEADER = ":authority"


def vhost_entry(vhost: Any) -> bytes:
    """Return `vhost` as one entry of a RouteConfiguration's `virtual_hosts` field (tag, length, bytes)."""
    body: bytes = vhost.SerializeToString(deterministic=True)
    return _VIRTUAL_HOSTS_TAG + varint(len(body)) + body


def _service_routes(action: Any, *, headers: Sequence[Any] = ()) -> list[Any]:
    """Return the two routes of a destination: idempotent methods first (they also replay unanswered requests)."""
    routes = []
    for idempotent in (True, False):
        route_action = route_components_pb2.RouteAction()
        route_action.CopyFrom(action)
        route_action.retry_policy.CopyFrom(retry_policy(idempotent=idempotent))
        matchers = list(headers) + ([idempotent_method_matcher()] if idempotent else [])
        routes.append(
            route_components_pb2.Route(
                match=route_components_pb2.RouteMatch(prefix="/", headers=matchers), route=route_action
            )
        )
    return routes


def service_vhost(name: str, *, domains: Iterable[str], cluster: str, quic: bool = False) -> Any:
    """Return the virtual host `name` routing `domains` to `cluster`, with the retry policy by outcome.

    With `quic`, requests whose caller named its `quic:` cluster go there first (HTTP/3, the same retry policy:
    see `aether.core.project.quic`); the others (a caller of a plaintext node) to `cluster`.
    """
    routes = []
    if quic:
        routes = _service_routes(
            route_components_pb2.RouteAction(cluster_header=QUIC_CLUSTER_HEADER),
            headers=[quic_header_present()],
        )
    routes.extend(_service_routes(route_components_pb2.RouteAction(cluster=cluster)))
    return route_components_pb2.VirtualHost(name=name, domains=list(domains), routes=routes)


def service_vhost_entry(
    name: str, *, domains: Iterable[str], cluster: str, quic: bool = False
) -> tuple[bytes, ...]:
    """Return `vhost_entry(service_vhost(...))` in parts: the entry's tag, length, name and domains; with `quic`,
    the two `quic:` routes, which name no service and so are one bytes object every virtual host shares by
    reference; the service's own two routes, with their retry policies cut out and shared the same way. Fields in field-number order (name 1, domains 2, routes 3), so the
    parts joined are the entry's bytes (a test holds them equal)."""
    head: bytes = route_components_pb2.VirtualHost(name=name, domains=list(domains)).SerializeToString(
        deterministic=True
    )
    own: bytes = route_components_pb2.VirtualHost(
        routes=_service_routes(route_components_pb2.RouteAction(cluster=cluster))
    ).SerializeToString(deterministic=True)
    shared = _quic_routes() if quic else b""
    size = len(head) + len(shared) + len(own)
    return tuple(
        part
        for part in (_VIRTUAL_HOSTS_TAG + varint(size) + head, shared, *shared_parts(own, _retry_fields()))
        if part
    )


@functools.cache
def _retry_fields() -> tuple[bytes, bytes]:
    """The serialized `retry_policy` fields of the two service routes (idempotent first): each service's own
    routes end with them, so they are cut out and shared (`messages.shared_parts`)."""
    fields = [
        route_components_pb2.RouteAction(retry_policy=retry_policy(idempotent=idempotent)).SerializeToString(
            deterministic=True
        )
        for idempotent in (True, False)
    ]
    return fields[0], fields[1]


@functools.cache
def _quic_routes() -> bytes:
    body: bytes = route_components_pb2.VirtualHost(
        routes=_service_routes(
            route_components_pb2.RouteAction(cluster_header=QUIC_CLUSTER_HEADER),
            headers=[quic_header_present()],
        )
    ).SerializeToString(deterministic=True)
    return body


def routed_vhost(name: str, *, domains: Iterable[str], routes: Iterable[Any]) -> Any:
    """Return the virtual host `name` of `domains` with the given routes (a service's GAMMA routes, in order)."""
    return route_components_pb2.VirtualHost(name=name, domains=list(domains), routes=list(routes))


def catch_all_vhost(*, mesh_domain: str, passthrough: bool) -> Any:
    """Return `on_demand_catch_all` (`*`): liveness, mesh names discovered on demand, then the fallback.

    A Host that looks like a mesh name (`<sa>.<ns>.<meshDomain>[:port]`) routes to the cluster of that exact
    name (`cluster_header: ":authority"`); the on-demand filter asks the agent for it when Envoy lacks it. What is
    left gets a 404 on `out_http`, and goes where it was going on `cap_http` (`passthrough`).
    """
    authority = route_components_pb2.HeaderMatcher(
        name=AUTHORITY_HEADER,
        string_match=string_pb2.StringMatcher(
            safe_regex=regex_pb2.RegexMatcher(regex=mesh_authority_regex(mesh_domain))
        ),
    )
    live = route_components_pb2.Route(
        match=route_components_pb2.RouteMatch(path=LIVE_PATH),
        direct_response=route_components_pb2.DirectResponseAction(
            status=200, body=base_pb2.DataSource(inline_string="live\n")
        ),
    )
    # A caller that named its own `quic:` cluster (every pod of a node with SVIDs) asks for that one, so even the
    # first request to a service outside the dependency set rides HTTP/3 with the caller's certificate; the others
    # (a plaintext node) ask for the cluster the Host names.
    on_demand = [
        *_service_routes(
            route_components_pb2.RouteAction(cluster_header=QUIC_CLUSTER_HEADER),
            headers=[authority, quic_header_present()],
        ),
        *_service_routes(
            route_components_pb2.RouteAction(cluster_header=AUTHORITY_HEADER), headers=[authority]
        ),
    ]
    if passthrough:
        # No timeout: captured non-mesh traffic (long polls, streams) must behave as without the mesh.
        last = route_components_pb2.Route(
            match=route_components_pb2.RouteMatch(prefix="/"),
            route=route_components_pb2.RouteAction(cluster=PASSTHROUGH_CLUSTER, timeout=seconds(0)),
        )
    else:
        body = (
            "aether: the Host header names no mesh service; "
            f"expected <serviceAccount>.<namespace>.{mesh_domain}[:<port>]\n"
        )
        last = route_components_pb2.Route(
            match=route_components_pb2.RouteMatch(prefix="/"),
            direct_response=route_components_pb2.DirectResponseAction(
                status=404, body=base_pb2.DataSource(inline_string=body)
            ),
        )
    return route_components_pb2.VirtualHost(
        name=CATCH_ALL_VHOST, domains=["*"], routes=[live, *on_demand, last]
    )


def route_configuration_parts(name: str, entries: Iterable[bytes]) -> tuple[bytes, ...]:
    """Return the serialized RouteConfiguration `name` holding the `virtual_hosts` entries, in order, as parts: its
    head, the entries themselves (the very objects given, so tables holding the same entries share them), its tail.

    `validate_clusters` is off: a table may name a cluster Envoy is still discovering (on demand or in flight).
    The caller's `x-aether-quic-cluster` is for routing only: it never leaves the caller's proxy.
    """
    return (_route_head(name), *entries, _ROUTE_TAIL)


@functools.lru_cache(maxsize=64)
def _route_head(name: str) -> bytes:
    body: bytes = route_pb2.RouteConfiguration(name=name).SerializeToString(deterministic=True)
    return body


_ROUTE_TAIL = route_pb2.RouteConfiguration(
    validate_clusters=wrappers_pb2.BoolValue(value=False),
    request_headers_to_remove=[QUIC_CLUSTER_HEADER],
).SerializeToString(deterministic=True)


def route_configuration_pieces(
    name: str, vhosts: Iterable[Piece], *, mesh_domain: str, passthrough: bool
) -> tuple[Piece, ...]:
    """Return the mesh route table `name` as pieces: its head, the services' `vhosts` pieces in order (the very
    objects given, shared with the other table), then the catch-all virtual host (`catch_all_vhost`) with the
    tail. The pieces joined are `route_configuration_parts(name, [*entries, catch-all entry])` joined."""
    return (_head_piece(name), *vhosts, _catch_all_piece(mesh_domain=mesh_domain, passthrough=passthrough))


@functools.lru_cache(maxsize=64)
def _head_piece(name: str) -> Piece:
    return Piece.of((_route_head(name),))


@functools.lru_cache(maxsize=64)
def _catch_all_piece(*, mesh_domain: str, passthrough: bool) -> Piece:
    return Piece.of(
        (vhost_entry(catch_all_vhost(mesh_domain=mesh_domain, passthrough=passthrough)), _ROUTE_TAIL)
    )


def inbound_route_configuration(routes: Sequence[tuple[str | None, str]]) -> Any:
    """Return the inbound delivery table: `(authority port, app cluster)` pairs, a None port matching any.

    An `x-aether-outcome` the app sets itself is removed from its responses: only the proxy reports outcomes.
    """
    entries = []
    for port, cluster in routes:
        match = route_components_pb2.RouteMatch(prefix="/")
        if port is not None:
            match.headers.add(
                name=AUTHORITY_HEADER,
                string_match=string_pb2.StringMatcher(suffix=f":{port}"),
            )
        # Timeout 0: the caller's route timeout governs; a second clock here would only race it.
        entries.append(
            route_components_pb2.Route(
                match=match, route=route_components_pb2.RouteAction(cluster=cluster, timeout=seconds(0))
            )
        )
    return route_pb2.RouteConfiguration(
        name=INBOUND_ROUTE,
        virtual_hosts=[route_components_pb2.VirtualHost(name="app", domains=["*"], routes=entries)],
        response_headers_to_remove=[OUTCOME_HEADER],
        validate_clusters=wrappers_pb2.BoolValue(value=False),
    )
