"""The contract types of the Gateway API view: what `gateway_view` returns, read by the node and edge projections
and the status sink. Names here are stable: other packages build on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs
import immutables

from aether.core.gateway.ir import HTTPRoute, SelectorKeys, VirtualHost

if TYPE_CHECKING:  # they build on this module's types
    from aether.core.gateway.frontends import MeshFrontend
    from aether.core.gateway.udp_routes import MeshUdpRouting, UdpRouteCluster

MESH_CONTROLLER = "gateway.aether.io/mesh"
"""The controllerName of GAMMA route status (routes whose parentRef is a Service)."""
EDGE_CONTROLLER = "gateway.aether.io/edge"
"""The controllerName of the edge's GatewayClass: only Gateways of such a class are the edge's."""


@attrs.frozen(kw_only=True)
class Condition:
    """One status condition, as the Gateway API writes it (`metav1.Condition` without the transition time).

    The transition time is the sink's business: the core has no clock, and equal inputs give equal status.
    """

    type: str
    """`Accepted`, `ResolvedRefs`, `Programmed`, ..."""
    status: str
    """`True`, `False` or `Unknown`."""
    reason: str
    """The API's reason (`Accepted`, `NoMatchingParent`, `BackendNotFound`, `RefNotPermitted`, ...)."""
    message: str
    observed_generation: int
    """The `metadata.generation` of the object this condition was computed from."""


@attrs.frozen(kw_only=True)
class ParentStatus:
    """A route's status for one of its parentRefs (`RouteParentStatus`)."""

    controller_name: str
    """`gateway.aether.io/mesh` for a Service parent, `gateway.aether.io/edge` for a Gateway parent."""
    group: str
    """The parentRef's group: `""` (core) for a Service, `gateway.networking.k8s.io` for a Gateway."""
    kind: str
    namespace: str
    name: str
    section_name: str = ""
    port: int = 0
    """The parentRef's port; 0 when it named none."""
    conditions: tuple[Condition, ...] = ()


@attrs.frozen(kw_only=True)
class ListenerStatus:
    """A Gateway listener's status."""

    name: str
    supported_kinds: tuple[str, ...]
    """The route kinds the listener accepts, sorted (group `gateway.networking.k8s.io`)."""
    attached_routes: int
    """How many routes are attached to the listener (accepted ones)."""
    conditions: tuple[Condition, ...] = ()


@attrs.frozen(kw_only=True)
class ObjectStatus:
    """The computed status of one Gateway API object, keyed in `GatewayView.status` by its `<kind>/<ns>/<name>`.

    Routes fill `parents`; Gateways fill `conditions` and `listeners`; GatewayClasses fill `conditions`.
    """

    kind: str
    namespace: str
    name: str
    generation: int
    conditions: tuple[Condition, ...] = ()
    parents: tuple[ParentStatus, ...] = ()
    listeners: tuple[ListenerStatus, ...] = ()


@attrs.frozen(kw_only=True)
class PortRouting:
    """The GAMMA routes of one Service port of a mesh service: those whose parentRef names that port, merged by
    precedence with those that name none. Its requests are those whose Host names the port (`<fqdn>:<port>`, and
    the bare `<fqdn>` when `bare`)."""

    port: int
    http_routes: tuple[HTTPRoute, ...] = ()
    grpc_routes: tuple[HTTPRoute, ...] = ()
    bare: bool = False
    """The bare `<fqdn>` (a Host without a port) names this port too: port 80, HTTP's default, or else the only
    port of the Service the routes name it on (a client of a one-port Service need not say the port). At most one
    port of a mesh service is bare."""

    @property
    def all_routes(self) -> tuple[HTTPRoute, ...]:
        """The virtual host's routes in the order Envoy evaluates them: gRPC first, then HTTP."""
        return (*self.grpc_routes, *self.http_routes)


@attrs.frozen(kw_only=True)
class MeshRouting:
    """The GAMMA routes of one mesh service: they replace its default routes in `out_http` and `cap_http`.

    Both tuples hold the routes (`aether.core.gateway.ir`), each already in precedence order. HTTPRoutes and
    GRPCRoutes are never merged: the gRPC routes (which match only gRPC requests, by content type) come first in
    the virtual host, then the HTTP routes. A request no route matches gets Envoy's 404, as GAMMA specifies.
    """

    service: str
    """The mesh service key `<ns>/<sa>` whose virtual host the routes replace."""
    http_routes: tuple[HTTPRoute, ...] = ()
    grpc_routes: tuple[HTTPRoute, ...] = ()
    routes: tuple[str, ...] = ()
    """The keys (`<kind>/<ns>/<name>`) of the route objects that contributed, sorted."""
    backend_services: tuple[str, ...] = ()
    """The mesh services the routes send or mirror to, sorted: their clusters must be in the caller's snapshot."""
    backend_selectors: Mapping[str, SelectorKeys] = attrs.field(factory=immutables.Map)
    """Per cluster the routes send a Service's selection to, the label key sets of those selectors: the cluster
    must subset its endpoints by them (`aether.core.gateway.ir.selector_keys`)."""
    slice_clusters: tuple[str, ...] = ()
    """The clusters of Services without a selector the routes send or mirror to, sorted: the caller's node builds
    them from the Services' EndpointSlices (`aether.core.project.slices`)."""
    every_port: bool = True
    """True when some route's parentRef names no port: `http_routes` and `grpc_routes` (those routes) replace the
    default routes of the service's own virtual host. False when every route names a port: requests of other ports
    keep the default routes."""
    ports: tuple[PortRouting, ...] = ()
    """Per Service port some route's parentRef names, in port order, the routes of that port (GAMMA's MeshPorts:
    a route for port 80 never applies to port 8080, though both target the same pods)."""

    @property
    def all_routes(self) -> tuple[HTTPRoute, ...]:
        """The virtual host's routes in the order Envoy evaluates them: gRPC first, then HTTP."""
        return (*self.grpc_routes, *self.http_routes)


@attrs.frozen(kw_only=True)
class WeightedBackend:
    """One backend of an L4 route: a cluster and its weight (an unresolved backend has no cluster)."""

    cluster: str
    """`tcp:<sa>.<ns>.<meshDomain>` (TCP/TLS) or `udp:...` (UDP); empty when the backendRef did not resolve."""
    weight: int
    service: str = ""
    """The mesh service `<ns>/<sa>`; empty when unresolved."""


@attrs.frozen(kw_only=True)
class L4Route:
    """A TCPRoute, TLSRoute or UDPRoute attached to an edge listener."""

    route: str
    """The route's key `<kind>/<ns>/<name>`."""
    hostnames: tuple[str, ...] = ()
    """SNI names (TLSRoute, intersected with the listener hostname); empty matches any (TCP/UDP)."""
    backends: tuple[WeightedBackend, ...] = ()
    """The weighted backends; a weight-0 backend is kept with weight 0, an unresolved one with an empty cluster."""

    @property
    def usable_backends(self) -> tuple[tuple[str, int], ...]:
        """The `(cluster, weight)` pairs a proxy splits over: resolved backends with a positive weight."""
        return tuple(
            (item.cluster, item.weight) for item in self.backends if item.cluster and item.weight > 0
        )


@attrs.frozen(kw_only=True)
class MeshL4Destination:
    """GAMMA L4: what one TCPRoute or TLSRoute forwards on one port of a Service parent's ClusterIP.

    The node matches captured connections by their original destination (`address`:`port`) and, for a TLSRoute,
    by SNI (`route.hostnames`); a route with no hostnames (TCPRoute, or a TLSRoute without any) takes the
    connections no name matches.
    """

    address: str
    """The parent Service's ClusterIP."""
    port: int
    """A port of the Service: the parentRef's `port`, or each of the Service's ports when it named none."""
    route: L4Route
    """The route's SNI names won on this destination (empty: the nameless connections) and its backends."""


@attrs.frozen(kw_only=True)
class MeshL4Routing:
    """The GAMMA L4 routes of one mesh service (the one behind their parent Services), for the node's listeners."""

    service: str
    """The mesh service key `<ns>/<sa>` of the parent Services: the node routes for it when it is a dependency."""
    destinations: tuple[MeshL4Destination, ...] = ()
    """Sorted by address, port, then SNI names (nameless last): no two match the same connections."""
    backend_services: tuple[str, ...] = ()
    """The mesh services the routes forward to, sorted: their `tcp:` clusters must be in the caller's snapshot."""


@attrs.frozen(kw_only=True)
class EdgeListener:
    """One listener of a Gateway of the edge's class, with everything attached to it."""

    gateway: str
    """The Gateway's key `Gateway/<ns>/<name>`."""
    name: str
    """The listener's `name` (unique within its Gateway)."""
    port: int
    protocol: str
    """`HTTP`, `HTTPS`, `TLS`, `TCP` or `UDP`."""
    hostname: str = ""
    """The listener's hostname (may be `*.example.com`); empty matches any host."""
    tls_mode: str = ""
    """`Terminate` or `Passthrough` for HTTPS/TLS listeners; empty otherwise."""
    certificates: tuple[str, ...] = ()
    """The certificateRefs that resolved, as Secret keys `<ns>/<name>`, in listener order."""
    virtual_hosts: tuple[VirtualHost, ...] = ()
    """The virtual hosts (HTTP/HTTPS listeners), most specific domain first.

    No domain appears twice on one listener port (across every listener on that port): a domain goes to the listener
    with the most specific hostname, then the oldest Gateway. Domains carry no port: the edge's route table should set
    `ignore_port_in_host_matching`. A host no virtual host names is the edge projection's to answer (a `*` virtual
    host answering 404), unless a virtual host here already has the domain `*` (a route without hostnames on a
    listener without one)."""
    l4_routes: tuple[L4Route, ...] = ()
    """TLS listeners: the TLSRoutes, oldest first, each SNI name given to one route only (the oldest claiming it).
    TCP and UDP listeners: the one route that forwards (the oldest; later ones are told why in their status)."""


@attrs.frozen(kw_only=True)
class GatewayView:
    """What the Gateway API objects of a state project to (see the module docstring)."""

    mesh_routes: Mapping[str, MeshRouting] = attrs.field(factory=immutables.Map)
    """GAMMA routing per mesh service `<ns>/<sa>`."""
    edge_listeners: tuple[EdgeListener, ...] = ()
    """Every listener the edge serves (of an accepted edge Gateway, itself accepted, not conflicted, its certificates
    resolved), sorted by port, then gateway key, then listener order."""
    backend_services: frozenset[str] = frozenset()
    """The mesh services `<ns>/<sa>` that edge routes point to: the edge emits their clusters."""
    backend_clusters: frozenset[str] = frozenset()
    """The exact cluster names the edge's routes reference (a subset of the clusters of `backend_services`)."""
    backend_selectors: Mapping[str, SelectorKeys] = attrs.field(factory=immutables.Map)
    """Per cluster the edge's routes send a Service's selection to, the label key sets of those selectors."""
    mesh_backend_services: frozenset[str] = frozenset()
    """The mesh services that GAMMA routes point to (the node adds them to a dependency set it routes for)."""
    mesh_l4: Mapping[str, MeshL4Routing] = attrs.field(factory=immutables.Map)
    """GAMMA L4 routing (TCPRoute, TLSRoute) per mesh service `<ns>/<sa>` of the parent Services."""
    mesh_udp: Mapping[str, MeshUdpRouting] = attrs.field(factory=immutables.Map)
    """GAMMA UDP routing (UDPRoute) per mesh service `<ns>/<sa>` of the parent Services."""
    udp_clusters: Mapping[str, UdpRouteCluster] = attrs.field(factory=immutables.Map)
    """By route key, the weighted cluster of each UDPRoute an edge UDP listener forwards through."""
    mesh_frontends: Mapping[str, tuple[MeshFrontend, ...]] = attrs.field(factory=immutables.Map)
    """Per mesh service, the ClusterIP and port of each Service its GAMMA HTTP and gRPC routes name as parent:
    where the node routes a captured request by its destination (`aether.core.gateway.frontends`)."""
    status: Mapping[str, ObjectStatus] = attrs.field(factory=immutables.Map)
    """The computed status of every Gateway API object, keyed by `<kind>/<ns>/<name>`."""
