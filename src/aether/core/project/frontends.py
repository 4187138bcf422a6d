"""GAMMA frontends on the node: the virtual host a captured HTTP request to a routed Service's ClusterIP and port
takes, whatever its Host header (see `aether.core.gateway.frontends`).

Each frontend becomes, in every captured pod's capture listener, a filter chain matching that destination (and
cleartext HTTP) whose connection manager routes with one virtual host for any Host (`*`): the routes of the
Service's GAMMA routes for that port (those naming the port, merged by precedence with those naming none), or,
should none be left (every rule dropped), the Service's default route to its mesh service. A request to any other address (a pod IP, a
Service without routes) keeps matching `cap_http` by Host.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
from envoy.config.route.v3 import route_components_pb2

from aether.core.gateway.frontends import MeshFrontend
from aether.core.mesh_names import http_cluster_name
from aether.core.project.gateway_routes import envoy_route_list
from aether.core.project.routes import routed_vhost, service_vhost

__all__ = ["FrontendRoute", "frontend_routes"]


@attrs.frozen(kw_only=True)
class FrontendRoute:
    """One frontend's destination and the virtual host its requests take."""

    address: str
    port: int
    vhost: bytes
    """The `VirtualHost` (domains `*`), serialized deterministically (a value: equal frontends compare equal)."""

    def virtual_host(self) -> route_components_pb2.VirtualHost:
        """Return the virtual host message."""
        return route_components_pb2.VirtualHost.FromString(self.vhost)


def frontend_routes(frontends: Iterable[MeshFrontend], *, mesh_domain: str) -> tuple[FrontendRoute, ...]:
    """Return the frontend routes of `frontends`, sorted by address and port as given (each destination once)."""
    found: list[FrontendRoute] = []
    seen: set[tuple[str, int]] = set()
    for frontend in frontends:
        where = (frontend.address, frontend.port)
        if where in seen:
            continue  # one ClusterIP is one Service: only a re-created Service mid-watch could repeat it
        seen.add(where)
        name = f"frontend:{frontend.address}:{frontend.port}"
        routes = frontend.all_routes
        if routes:
            vhost = routed_vhost(name, domains=["*"], routes=envoy_route_list(routes, mesh=True))
        else:
            cluster = http_cluster_name(frontend.service, mesh_domain=mesh_domain)
            vhost = service_vhost(name, domains=["*"], cluster=cluster)
        found.append(
            FrontendRoute(
                address=frontend.address,
                port=frontend.port,
                vhost=vhost.SerializeToString(deterministic=True),
            )
        )
    return tuple(found)
