"""What the node's units are computed from: `NodeInputsMemo.read(state, now=...)` returns a `NodeInputs`, the
local pods, the dependency set, the GAMMA routing of the set (HTTP, L4, UDP, frontends, subsets) and the two
contexts (services', pods').

These are the one place a projection walks more than a unit: each input is held in a memo cell (`memo.Last`) keyed
on the identity of what it was derived from, and a value derived again equal to the held one keeps the held object
(`memo.interned`). That is what makes the units cheap: a unit compares its inputs by identity, so an input that did
not change must come back as the same object. The dependency set is derived from the previous one where it can
(`dependencies.demand(previous=...)`), and what GAMMA routes of the set send to is walked from the routed services
(few), never from the set (thousands).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from aether.core.gateway import (
    GatewayProjector,
    GatewayView,
    MeshL4Destination,
    MeshL4Routing,
    MeshRouting,
    MeshUdpRouting,
    UdpRouteCluster,
)
from aether.core.gateway.frontends import MeshFrontend
from aether.core.gateway.ir import SelectorKeys
from aether.core.mesh_names import parse_cluster_name
from aether.core.order import sorted_unique
from aether.core.project import dependencies
from aether.core.project.dependencies import Declarations, Demand, LocalPods, RequestIndex
from aether.core.project.endpoints import Locality, node_locality
from aether.core.project.frontends import FrontendRoute, frontend_routes
from aether.core.project.memo import Last, interned
from aether.core.project.names import spiffe_id
from aether.core.project.pods import PodContext
from aether.core.project.services import ServiceContext
from aether.core.project.tls import UpstreamIdentity, upstream_identity
from aether.core.project.tracing import tracing_of
from aether.core.project.udp import UdpDestination, udp_destinations, udp_ports_by_service
from aether.core.state.state import State

T = TypeVar("T")


def in_set(routed: Mapping[str, T], demand: Demand) -> list[tuple[str, T]]:
    """Return the entries of `routed` (per mesh service: its GAMMA routing, frontends...) whose service is in the
    dependency set, in the set's order: walked from `routed` (few), never from the set (thousands)."""
    by_service = demand.by_service
    return sorted(
        ((service, value) for service, value in routed.items() if service in by_service), key=_first
    )


def _first(item: tuple[str, Any]) -> str:
    return item[0]


@attrs.frozen(kw_only=True)
class L4InSet:
    """The GAMMA L4 routing of a dependency set: what the pods' transparent listeners match, and the services
    that must have a `tcp:` cluster."""

    destinations: tuple[MeshL4Destination, ...]
    backends: frozenset[str]


@attrs.frozen(kw_only=True)
class UdpInSet:
    """The UDP Service destinations the node serves, and per mesh service the target ports of its `udp:`
    clusters."""

    destinations: tuple[UdpDestination, ...]
    ports: Mapping[str, tuple[int, ...]]
    clusters: tuple[UdpRouteCluster, ...] = ()
    """The weighted clusters of the UDPRoutes that took destinations over, by name."""


@attrs.frozen(kw_only=True)
class NodeInputs:
    """What one projection's units are computed from; each field is the same object as in the previous projection
    while its value did not change."""

    local: LocalPods
    """The node's pods, and which of them are captured."""
    identities: tuple[str, ...]
    """The SPIFFE IDs of the local pods' services, sorted: their SVIDs and caller secrets."""
    demand: Demand
    """The dependency set: the services the node's pods declare or request, and those GAMMA routes send to."""
    routings: Mapping[str, MeshRouting]
    """The GAMMA HTTP routing per mesh service (of any service: the units pick the set's)."""
    l4: L4InSet
    subsets: Mapping[str, SelectorKeys]
    """Per service of the set, the selector key sets its bare cluster is subset by."""
    udp: UdpInSet
    frontends: tuple[FrontendRoute, ...]
    service_context: ServiceContext
    pod_context: PodContext


class NodeInputsMemo:
    """Derives a state's `NodeInputs` for one node, reusing what it derived from the same objects before."""

    def __init__(self, *, node_name: str, collector_cluster: str = "") -> None:
        self._node_name = node_name
        self._collector_cluster = collector_cluster
        self._local, self._identities = Last(), Last()
        self._declared, self._index, self._demand, self._locality = Last(), Last(), Last(), Last()
        self._gateway, self._routed_demand, self._l4_in_set = Last(), Last(), Last()
        self._subsets_in_set = Last()
        self._udp_in_set = Last()
        self._udp_held: UdpInSet | None = None
        self._subsets: Mapping[str, SelectorKeys] = {}
        self._routings: Mapping[str, MeshRouting] = {}
        self._l4: Mapping[str, MeshL4Routing] = {}
        self._l4_held: L4InSet | None = None
        self._udp_routes: Mapping[str, MeshUdpRouting] = {}
        self._frontends: Mapping[str, tuple[MeshFrontend, ...]] = {}
        self._frontends_in_set = Last()
        self._frontends_held: tuple[FrontendRoute, ...] = ()
        self._gateway_projector = GatewayProjector()
        self._service_context: ServiceContext | None = None
        self._pod_context: PodContext | None = None

    def read(self, state: State, *, now: int) -> NodeInputs:
        """Return the inputs of the node's snapshot of `state` at `now`."""
        mesh = state.kube.mesh_config
        local: LocalPods = self._local.get(
            (state.pods, state.captured_nodes),
            lambda: dependencies.local_pods(
                state.pods, node_name=self._node_name, captured_nodes=state.captured_nodes
            ),
        )
        identities: tuple[str, ...] = self._identities.get(
            (local, mesh.trust_domain),
            lambda: sorted_unique(
                spiffe_id(record.service, trust_domain=mesh.trust_domain) for record in local.records
            ),
        )
        # What clusters present depends on whether the node holds any SVID, not on which: a new local identity
        # changes its pods' listeners and the caller secrets only (`aether.core.project.tls`).
        identity: UpstreamIdentity = upstream_identity(state.identity.svids)
        routings = self._mesh_routings(state)
        l4 = self._l4
        demand = self._dependency_set(state, local, routings, (l4, self._udp_routes), now=now)
        l4_in_set = self._l4_of(demand, l4)
        subsets = self._subsets_of(demand, routings, mesh.mesh_domain)
        udp = self._udp_of(state, demand)
        frontends = self._frontends_of(demand, mesh.mesh_domain)
        service_context = interned(
            self._service_context,
            ServiceContext(
                mesh_domain=mesh.mesh_domain,
                trust_domain=mesh.trust_domain,
                identity=identity,
                locality=self._node_locality(state, local),
            ),
        )
        svids = state.identity.svids
        no_http3 = frozenset(
            item for item in identities if (svid := svids.get(item)) is not None and svid.http3_problem
        )
        pod_context = interned(
            self._pod_context,
            PodContext(
                trust_domain=mesh.trust_domain,
                plaintext=identity.plaintext,
                no_http3=no_http3,
                tracing=tracing_of(mesh, collector_cluster=self._collector_cluster, service_name=""),
            ),
        )
        self._service_context, self._pod_context = service_context, pod_context
        return NodeInputs(
            local=local,
            identities=identities,
            demand=demand,
            routings=routings,
            l4=l4_in_set,
            subsets=subsets,
            udp=udp,
            frontends=frontends,
            service_context=service_context,
            pod_context=pod_context,
        )

    def _mesh_routings(self, state: State) -> Mapping[str, MeshRouting]:
        """Return the GAMMA routing per mesh service, the same objects as last time where nothing changed.

        The view is rebuilt only when a Gateway API object, grant, Service, pod or the mesh domain changed; a
        service's routing equal to the one it had keeps that object, so only services whose routes changed are
        re-projected.
        """
        kube = state.kube
        view: GatewayView = self._gateway.get(
            (
                kube.gateway_objects,
                kube.reference_grants,
                kube.services,
                state.pods,
                kube.mesh_config.mesh_domain,
            ),
            lambda: self._gateway_projector.view(state),
        )
        previous = self._routings
        current = {
            service: held
            if (held := previous.get(service)) is not None and (held is routing or held == routing)
            else routing
            for service, routing in view.mesh_routes.items()
        }
        if len(current) != len(previous) or any(current[key] is not previous.get(key) for key in current):
            self._routings = current
        if view.mesh_l4 is not self._l4 and view.mesh_l4 != self._l4:
            self._l4 = view.mesh_l4
        if view.mesh_udp is not self._udp_routes and view.mesh_udp != self._udp_routes:
            self._udp_routes = view.mesh_udp
        if view.mesh_frontends is not self._frontends and view.mesh_frontends != self._frontends:
            self._frontends = view.mesh_frontends
        return self._routings

    def _l4_of(self, demand: Demand, l4: Mapping[str, MeshL4Routing]) -> L4InSet:
        """Return the GAMMA L4 destinations of the dependency set and their backends (the same object while
        equal, so that pod and service units stay reused)."""

        def compute() -> L4InSet:
            routings = [routing for _, routing in in_set(l4, demand)]
            return interned(
                self._l4_held,
                L4InSet(
                    destinations=tuple(item for routing in routings for item in routing.destinations),
                    backends=frozenset(name for routing in routings for name in routing.backend_services),
                ),
            )

        held: L4InSet = self._l4_in_set.get((demand.services, l4), compute)
        self._l4_held = held
        return held

    def _subsets_of(
        self, demand: Demand, routings: Mapping[str, MeshRouting], mesh_domain: str
    ) -> Mapping[str, SelectorKeys]:
        """Return, per service of the set, the selector key sets its bare cluster is subset by (the Services the
        set's GAMMA routes send to); a service whose key sets did not change keeps the same tuple object."""

        def compute() -> Mapping[str, SelectorKeys]:
            found: dict[str, set[tuple[str, ...]]] = {}
            for _, routing in in_set(routings, demand):
                for cluster, selected in routing.backend_selectors.items():
                    parsed = parse_cluster_name(cluster, mesh_domain=mesh_domain)
                    assert parsed is not None, (
                        f"route cluster {cluster!r} names no mesh service: this is a bug"
                    )
                    found.setdefault(parsed.service, set()).update(selected)
            previous = self._subsets
            current: dict[str, SelectorKeys] = {}
            for service, keys in sorted(found.items()):
                value = tuple(sorted(keys))
                held = previous.get(service)
                current[service] = held if held == value and held is not None else value
            if current == previous:
                return previous
            return current

        subsets: Mapping[str, SelectorKeys] = self._subsets_in_set.get(
            (demand.services, routings, mesh_domain), compute
        )
        self._subsets = subsets
        return subsets

    def _frontends_of(self, demand: Demand, mesh_domain: str) -> tuple[FrontendRoute, ...]:
        """Return the GAMMA frontends of the dependency set with their virtual hosts, sorted by address and port
        (the same object while equal, so that pod units stay reused)."""
        frontends = self._frontends

        def compute() -> tuple[FrontendRoute, ...]:
            found = frontend_routes(
                sorted(
                    (item for _, items in in_set(frontends, demand) for item in items),
                    key=lambda item: (ipaddress.IPv4Address(item.address), item.port),
                ),
                mesh_domain=mesh_domain,
            )
            return self._frontends_held if found == self._frontends_held else found

        held: tuple[FrontendRoute, ...] = self._frontends_in_set.get(
            (demand.services, frontends, mesh_domain), compute
        )
        self._frontends_held = held
        return held

    def _udp_of(self, state: State, demand: Demand) -> UdpInSet:
        """Return the UDP Service destinations of the dependency set (the same objects while equal, so that pod
        and service units stay reused)."""
        mesh_domain = state.kube.mesh_config.mesh_domain
        udp_routes = self._udp_routes

        def compute() -> UdpInSet:
            routes = {
                service: routing.destinations
                for service, routing in udp_routes.items()
                if service in demand.by_service
            }
            destinations = udp_destinations(
                state.kube.services,
                state.pods.values(),
                in_set=demand.by_service,
                mesh_domain=mesh_domain,
                routes=routes,
            )
            clusters = tuple(
                sorted(
                    {item.cluster.name: item.cluster for items in routes.values() for item in items}.values(),
                    key=lambda cluster: cluster.name,
                )
            )
            previous = self._udp_held
            if previous is not None and (previous.destinations, previous.clusters) == (
                destinations,
                clusters,
            ):
                return previous
            held = previous.ports if previous is not None else {}
            ports = {
                service: held[service] if held.get(service) == value else value
                for service, value in udp_ports_by_service(destinations).items()
            }
            return UdpInSet(destinations=destinations, ports=ports, clusters=clusters)

        udp: UdpInSet = self._udp_in_set.get(
            (state.kube.services, state.pods, demand.services, mesh_domain, udp_routes), compute
        )
        self._udp_held = udp
        return udp

    def _dependency_set(
        self,
        state: State,
        local: LocalPods,
        routings: Mapping[str, MeshRouting],
        l4_routings: tuple[Mapping[str, MeshL4Routing], Mapping[str, MeshUdpRouting]],
        *,
        now: int,
    ) -> Demand:
        mesh = state.kube.mesh_config
        on_demand = state.feedback.on_demand
        declarations: Declarations = self._declared.get(
            (local,), lambda: dependencies.declarations(local.records, previous=self._declared.value)
        )
        declared = declarations.services
        index: RequestIndex = self._index.get(
            (on_demand, mesh.mesh_domain, mesh.on_demand_ttl_seconds),
            lambda: dependencies.request_index(
                on_demand,
                node_name=self._node_name,
                mesh_domain=mesh.mesh_domain,
                ttl_seconds=mesh.on_demand_ttl_seconds,
            ),
        )
        # The live requests are a suffix of the index: the set changes only when `now` crosses an expiry.
        live_from = index.live_from(now)

        def derived() -> Demand:
            # From the previous demand when the declarations were derived from the ones it was computed from: a
            # pod coming or going costs its own services, not the set (O(changed); equal to computing it whole).
            held = self._demand
            if held.inputs is not None and declarations.base is held.inputs[0]:
                return dependencies.demand(
                    declared,
                    index,
                    live_from=live_from,
                    previous=held.value,
                    joined=declarations.joined,
                    left=declarations.left,
                )
            return dependencies.demand(declared, index, live_from=live_from)

        demand: Demand = self._demand.get((declared, index, live_from), derived)

        l4, udp = l4_routings

        def with_backends() -> Demand:
            # The services GAMMA routes (HTTP, TCP/TLS and UDP) of the set send to need their clusters (UDP: their
            # endpoints) here too (one level: routing happens once, at the caller).
            # Walked from the routed services (few), not from the set (thousands).
            by_service = demand.by_service
            extra = {
                backend
                for routed in (routings, l4, udp)
                for service, routing in routed.items()
                if service in by_service
                for backend in routing.backend_services
                if backend not in by_service
            }
            if not extra:
                return demand
            return dependencies.demand(sorted_unique((*declared, *extra)), index, live_from=live_from)

        def same_set() -> Demand:
            # A set equal to the previous one keeps its tuple, so that what is keyed on it (the route tables, the
            # slice and UDP plans) is not recomputed when only a demand changed (a pod of a service the set
            # already holds, an on-demand request).
            routed = with_backends()
            held = self._routed_demand.value
            if held is not None and routed.services is not held.services and routed.services == held.services:
                routed = attrs.evolve(routed, services=held.services)
            return routed

        routed: Demand = self._routed_demand.get((demand, routings, l4, udp), same_set)
        return routed

    def _node_locality(self, state: State, local: LocalPods) -> Locality | None:
        services = sorted_unique(record.service for record in local.records)
        maps = tuple(state.registry.endpoints.get(service) for service in services)
        locality: Locality | None = self._locality.get(
            maps,
            lambda: node_locality(
                (item for endpoints in maps if endpoints is not None for item in endpoints.values()),
                node_name=self._node_name,
            ),
        )
        return locality
