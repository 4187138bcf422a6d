"""The node snapshot: `project_node` (pure, whole) and `NodeProjector` (the same result, re-projecting only what
changed since its previous call).

A snapshot is made of units, each a function of a few immutable inputs: one unit per service of the dependency set
(`services`), one per local pod (`pods`), and the node-wide ones (the passthrough cluster, the two route tables, the
secrets). `NodeProjector` keeps, per unit, the inputs it was last computed from, compared by identity (`is`) for
the state's immutable maps and records and by equality for small context values; a unit whose inputs are the same
keeps its `Resource` objects (their digests and packed bytes are reused), and the next snapshot is the previous one
`with_changes`. It holds nothing else: no clock, no event, no hidden input. So its output equals
`project_node(state, node_name=..., now=...)` for any sequence of states, whatever came before (a property test
holds the two equal over random event sequences).

What one registry event costs at 10,000 services: the changed service's resources only. The registry's history
(`RegistryState.changed_since`) names the services whose endpoint maps were replaced since the maps the last
projection saw; without one (a new snapshot, a checkpoint read, a projector many steps behind) the pass compares
every map of the set by identity instead (by `map` and `compress`, at C speed). What a service
joining or leaving the set costs (a pod of a new service account, a new upstream): its own resources, the set's
declarations and demand derived from the previous ones (`dependencies.declarations`, `demand(previous=...)`), and
its group of the route tables (`route_groups`): nothing walks the set in Python.
"""

from __future__ import annotations

import bisect
import ipaddress
import itertools
import operator
from collections.abc import Callable, Iterable, Mapping
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
from aether.core.mesh_names import SliceClusterName, parse_cluster_name, parse_slice_cluster_name
from aether.core.order import sorted_unique
from aether.core.project import dependencies
from aether.core.project.clusters import passthrough_cluster
from aether.core.project.dependencies import Declarations, Demand, LocalPods, RequestIndex
from aether.core.project.endpoints import Locality, node_locality
from aether.core.project.frontends import FrontendRoute, frontend_routes
from aether.core.project.names import CAPTURE_ROUTE, OUTBOUND_ROUTE, spiffe_id
from aether.core.project.pods import PodContext, project_pod
from aether.core.project.route_groups import RouteGroups
from aether.core.project.routes import route_configuration_pieces
from aether.core.project.secrets import caller_secrets, node_secrets
from aether.core.project.services import NOTHING, ServiceContext, ServiceProjection, project_service
from aether.core.project.slices import slice_resources
from aether.core.project.tls import UpstreamIdentity, upstream_identity
from aether.core.project.tracing import tracing_of
from aether.core.project.udp import (
    UdpCapture,
    UdpDestination,
    udp_captures,
    udp_destinations,
    udp_ports_by_service,
)
from aether.core.project.udp_routes import udp_route_resources
from aether.core.project.units import ResourceChanges, same_inputs
from aether.core.snapshot import ROUTE_TYPE, Piece, Resource, Snapshot
from aether.core.state.state import State

T = TypeVar("T")

_FEW = 64
"""Up to this many services joining or leaving the set, the services pass edits its endpoint-map list in place."""

_ABSENT = object()
"""Stands for an input a unit did not have (never the same object as any input)."""


def _in_set(routed: Mapping[str, T], demand: Demand) -> list[tuple[str, T]]:
    """Return the entries of `routed` (per mesh service: its GAMMA routing, frontends...) whose service is in the
    dependency set, in the set's order: walked from `routed` (few), never from the set (thousands)."""
    by_service = demand.by_service
    return sorted(
        ((service, value) for service, value in routed.items() if service in by_service), key=_first
    )


def _first(item: tuple[str, Any]) -> str:
    return item[0]


def _slice_plan(
    demand: Demand, routings: Mapping[str, MeshRouting]
) -> tuple[tuple[str, SliceClusterName, str, str], ...]:
    """Return, sorted by name, the slice clusters the GAMMA routes of the set's services send to, each with its
    parts, its Service's key in `KubeState.services` and in `KubeState.slices_by_service`."""
    plan = []
    for name in sorted_unique(
        name for _, routing in _in_set(routings, demand) for name in routing.slice_clusters
    ):
        parsed = parse_slice_cluster_name(name)
        assert parsed is not None, f"route cluster {name!r} is not a slice cluster: this is a bug"
        plan.append(
            (
                name,
                parsed,
                f"Service/{parsed.namespace}/{parsed.service}",
                f"{parsed.namespace}/{parsed.service}",
            )
        )
    return tuple(plan)


def project_node(state: State, *, node_name: str, now: int, collector_cluster: str = "") -> Snapshot:
    """Return the snapshot of `node_name` (every pod of the state when empty) at time `now`.

    Args:
        state: The folded state.
        node_name: The node (its Envoy's node id); empty projects every pod (single-node local mode).
        now: Nanoseconds since the Unix epoch: the observation time of the last event folded, so on-demand
            requests expire the same way in a replay.
        collector_cluster: The OpenTelemetry collector's cluster in Envoy's bootstrap
            (`aether.envoy.bootstrap.OTEL_CLUSTER`): when the MeshConfig enables tracing, the pods' HTTP
            listeners send spans there (`aether.core.project.tracing`); empty: none declared, no tracing.

    Returns:
        The snapshot at `state.seq`; its `not_found` holds the names requested on demand that no cluster serves.
    """
    return NodeProjector(node_name=node_name, collector_cluster=collector_cluster).project(state, now=now)


@attrs.frozen(kw_only=True)
class _L4InSet:
    """The GAMMA L4 routing of a dependency set: what the pods' transparent listeners match, and the services
    that must have a `tcp:` cluster."""

    destinations: tuple[MeshL4Destination, ...]
    backends: frozenset[str]


@attrs.frozen(kw_only=True)
class _UdpInSet:
    """The UDP Service destinations the node serves, and per mesh service the target ports of its `udp:`
    clusters."""

    destinations: tuple[UdpDestination, ...]
    ports: Mapping[str, tuple[int, ...]]
    clusters: tuple[UdpRouteCluster, ...] = ()
    """The weighted clusters of the UDPRoutes that took destinations over, by name."""


@attrs.frozen(kw_only=True)
class ProjectorStatistics:
    """What a `NodeProjector` did."""

    projections: int
    """Snapshots projected so far."""
    services: int
    """Services in the dependency set at the last projection."""
    services_projected: int
    """Services whose resources the last projection computed (the others were reused)."""
    pods_projected: int
    """Local pods whose resources the last projection computed."""
    upserted: int
    """Resources the last snapshot added or replaced."""
    removed: int
    """Resources the last snapshot dropped."""


class _Last:
    """The value last computed from some inputs, recomputed only when one of them changed (see `same_inputs`)."""

    __slots__ = ("inputs", "value")

    def __init__(self) -> None:
        self.inputs: tuple[Any, ...] | None = None
        self.value: Any = None

    def get(self, inputs: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        if not same_inputs(self.inputs, inputs):
            self.inputs, self.value = inputs, compute()
        return self.value


def _interned(previous: T | None, current: T) -> T:
    """Return `previous` when it equals `current`, so that equal contexts stay one object (identity checks)."""
    return previous if previous is not None and previous == current else current


class NodeProjector:
    """Projects one node's snapshots, reusing what it computed before from the same inputs.

    A deterministic memo: it holds only caches keyed on the identity of immutable inputs (see the module
    docstring), so `project` returns what `project_node` returns for the same arguments.
    """

    def __init__(self, *, node_name: str, collector_cluster: str = "") -> None:
        self._node_name = node_name
        self._collector_cluster = collector_cluster
        self._local, self._identities = _Last(), _Last()
        self._dependencies: tuple[str, ...] = ()
        self._declared, self._index, self._demand, self._locality = _Last(), _Last(), _Last(), _Last()
        self._gateway, self._routed_demand, self._l4_in_set = _Last(), _Last(), _Last()
        self._subsets_in_set = _Last()
        self._udp_in_set, self._udp_capture_of = _Last(), _Last()
        self._udp_held: _UdpInSet | None = None
        self._udp_capture: tuple[UdpCapture, ...] = ()
        self._subsets: Mapping[str, SelectorKeys] = {}
        self._routings: Mapping[str, MeshRouting] = {}
        self._l4: Mapping[str, MeshL4Routing] = {}
        self._l4_held: _L4InSet | None = None
        self._udp_routes: Mapping[str, MeshUdpRouting] = {}
        self._frontends: Mapping[str, tuple[MeshFrontend, ...]] = {}
        self._frontends_in_set = _Last()
        self._frontends_held: tuple[FrontendRoute, ...] = ()
        self._udp_route_units: dict[str, tuple[tuple[Any, ...], tuple[Resource, ...]]] = {}
        """Per UDPRoute cluster: the cluster and its backends' endpoint maps it was projected from, and its
        resources."""
        self._gateway_projector = GatewayProjector()
        self._service_context: ServiceContext | None = None
        self._pod_context: PodContext | None = None
        self._services: dict[str, tuple[tuple[Any, ...], ServiceProjection]] = {}
        self._vhosts: dict[str, Piece] = {}
        """The services of `_services` that have virtual hosts, and their piece: the route tables' middle."""
        self._touched: set[str] = set()
        """The services the current projection's services pass dropped, added or changed the virtual hosts of."""
        self._route_groups = RouteGroups()
        self._services_inputs: tuple[Any, ...] | None = None
        self._endpoint_refs: list[Any] = []
        self._pods: dict[str, tuple[tuple[Any, ...], tuple[Resource, ...]]] = {}
        self._routes: tuple[tuple[Any, ...], tuple[Resource, ...]] | None = None
        self._secrets: tuple[tuple[Any, ...], tuple[Resource, ...]] | None = None
        self._passthrough: tuple[Resource, ...] = ()
        self._slices_in_set = _Last()
        self._slices: dict[str, tuple[Any, Any, tuple[Resource, ...]]] = {}
        """Per slice cluster: the Service and the slice index entry it was projected from, and its resources."""
        self._slices_inputs: tuple[Any, ...] | None = None
        self._snapshot: Snapshot | None = None
        self._statistics = ProjectorStatistics(
            projections=0, services=0, services_projected=0, pods_projected=0, upserted=0, removed=0
        )

    @property
    def dependencies(self) -> tuple[str, ...]:
        """The node's dependency set as of the last projection, sorted: the registrar watch's service filter."""
        return self._dependencies

    @property
    def udp_capture(self) -> tuple[UdpCapture, ...]:
        """Per captured pod, the UDP destinations its listeners serve as of the last projection: what the pod's
        capture must divert (the agent keeps each pod's nftables set equal to it)."""
        return self._udp_capture

    def statistics(self) -> ProjectorStatistics:
        """Return what the projector did, as of its last projection."""
        return self._statistics

    def project(self, state: State, *, now: int) -> Snapshot:
        """Return the node's snapshot of `state` at `now`: equal to `project_node(state, node_name=..., now=now)`."""
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
        self._dependencies = demand.services
        l4_in_set = self._l4_of(demand, l4)
        subsets = self._subsets_of(demand, routings, mesh.mesh_domain)
        udp = self._udp_of(state, demand)
        frontends = self._frontends_of(demand, mesh.mesh_domain)
        service_context = _interned(
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
        pod_context = _interned(
            self._pod_context,
            PodContext(
                trust_domain=mesh.trust_domain,
                plaintext=identity.plaintext,
                no_http3=no_http3,
                tracing=tracing_of(mesh, collector_cluster=self._collector_cluster, service_name=""),
            ),
        )
        self._service_context, self._pod_context = service_context, pod_context

        changes = ResourceChanges()
        services_projected, touched = self._project_services(
            state, demand, service_context, routings, l4_in_set.backends, subsets, udp.ports, changes
        )
        pods_projected = self._project_pods(
            local, pod_context, l4_in_set.destinations, udp.destinations, frontends, changes
        )
        self._udp_capture = self._udp_capture_of.get(
            (local, udp.destinations),
            lambda: udp_captures(local.records, bound=local.bound, destinations=udp.destinations),
        )
        self._project_routes(state, demand, touched=touched, changes=changes)
        self._project_slices(state, demand, routings, changes)
        self._project_udp_routes(state, udp.clusters, changes)
        self._project_secrets(state, identities, changes)
        if not self._passthrough:
            self._passthrough = changes.replace((), (Resource.from_message(passthrough_cluster()),))
        not_found = frozenset(
            (
                *demand.unmatched,
                *(name for service in demand.requesting for name in self._services[service][1].not_found),
            )
        )
        snapshot = self._next_snapshot(state, changes, not_found)
        self._snapshot = snapshot
        self._statistics = ProjectorStatistics(
            projections=self._statistics.projections + 1,
            services=len(demand.services),
            services_projected=services_projected,
            pods_projected=pods_projected,
            upserted=len(changes.upserted),
            removed=len(changes.removed),
        )
        return snapshot

    # --- inputs ---

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

    def _l4_of(self, demand: Demand, l4: Mapping[str, MeshL4Routing]) -> _L4InSet:
        """Return the GAMMA L4 destinations of the dependency set and their backends (the same object while
        equal, so that pod and service units stay reused)."""

        def compute() -> _L4InSet:
            routings = [routing for _, routing in _in_set(l4, demand)]
            return _interned(
                self._l4_held,
                _L4InSet(
                    destinations=tuple(item for routing in routings for item in routing.destinations),
                    backends=frozenset(name for routing in routings for name in routing.backend_services),
                ),
            )

        held: _L4InSet = self._l4_in_set.get((demand.services, l4), compute)
        self._l4_held = held
        return held

    def _subsets_of(
        self, demand: Demand, routings: Mapping[str, MeshRouting], mesh_domain: str
    ) -> Mapping[str, SelectorKeys]:
        """Return, per service of the set, the selector key sets its bare cluster is subset by (the Services the
        set's GAMMA routes send to); a service whose key sets did not change keeps the same tuple object."""

        def compute() -> Mapping[str, SelectorKeys]:
            found: dict[str, set[tuple[str, ...]]] = {}
            for _, routing in _in_set(routings, demand):
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
                    (item for _, items in _in_set(frontends, demand) for item in items),
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

    def _udp_of(self, state: State, demand: Demand) -> _UdpInSet:
        """Return the UDP Service destinations of the dependency set (the same objects while equal, so that pod
        and service units stay reused)."""
        mesh_domain = state.kube.mesh_config.mesh_domain
        udp_routes = self._udp_routes

        def compute() -> _UdpInSet:
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
            return _UdpInSet(destinations=destinations, ports=ports, clusters=clusters)

        udp: _UdpInSet = self._udp_in_set.get(
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

        def interned() -> Demand:
            # A set equal to the previous one keeps its tuple, so that what is keyed on it (the route tables, the
            # slice and UDP plans) is not recomputed when only a demand changed (a pod of a service the set
            # already holds, an on-demand request).
            routed = with_backends()
            held = self._routed_demand.value
            if held is not None and routed.services is not held.services and routed.services == held.services:
                routed = attrs.evolve(routed, services=held.services)
            return routed

        routed: Demand = self._routed_demand.get((demand, routings, l4, udp), interned)
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

    # --- units ---

    def _project_services(
        self,
        state: State,
        demand: Demand,
        context: ServiceContext,
        routings: Mapping[str, MeshRouting],
        tcp_backends: frozenset[str],
        subsets: Mapping[str, SelectorKeys],
        udp_ports: Mapping[str, tuple[int, ...]],
        changes: ResourceChanges,
    ) -> tuple[int, set[str] | None]:
        """Bring the service units in line; return how many were computed and the services that joined or left the
        set or whose virtual hosts changed (None: any may have)."""
        registry = state.registry
        self._touched = set()
        touched: set[str] | None = self._touched
        deps = demand.services
        previous = self._services_inputs
        refs = self._endpoint_refs
        if previous is not None and previous[1] is context:
            # Same context: only the services whose demand, endpoint map, catalog entry or routing changed.
            candidates: set[str] = set()
            old_demand: Demand = previous[0]
            if demand is not old_demand:
                old_deps = old_demand.services
                if (
                    deps != old_deps
                    and demand.moved_from is old_deps
                    and registry.endpoints is previous[2]
                    and len(demand.joined) + len(demand.left) <= _FEW
                ):
                    # A few services joined or left a set derived from the last one, the registry unchanged: those
                    # are the only candidates, and the endpoint maps' list is edited where they sit (O(changed)).
                    for service in demand.left:
                        self._drop_service(service, changes)
                    for at in sorted(
                        (bisect.bisect_left(old_deps, item) for item in demand.left), reverse=True
                    ):
                        del refs[at]
                    for service in demand.joined:
                        refs.insert(bisect.bisect_left(deps, service), registry.endpoints.get(service))
                    candidates.update(demand.joined)
                elif deps != old_deps:  # services joined or left the set: line the endpoint maps up by name
                    # (at C speed, `map`/`compress`: a set change costs no Python step per service of the set)
                    for service in sorted(
                        itertools.filterfalse(demand.by_service.__contains__, self._services)
                    ):
                        self._drop_service(service, changes)
                    held_refs = dict(zip(old_deps, self._endpoint_refs, strict=True))
                    refs = list(map(registry.endpoints.get, deps))
                    candidates.update(
                        itertools.compress(
                            deps,
                            map(operator.is_not, refs, map(held_refs.get, deps, itertools.repeat(_ABSENT))),
                        )
                    )
                # A service neither set requests has the one `declared` demand in both: only the requesting ones
                # (and those that joined, above) can differ.
                old_by_service, by_service = old_demand.by_service, demand.by_service
                candidates.update(
                    service
                    for service in {*old_demand.requesting, *demand.requesting}
                    if service in by_service and by_service[service] is not old_by_service.get(service)
                )
            if registry.endpoints is not previous[2] and refs is self._endpoint_refs:
                changed = registry.changed_since(previous[2])
                if changed is None:
                    # No history from the last maps (a new snapshot, a checkpoint read): compare them all.
                    refs = list(map(registry.endpoints.get, deps))
                    candidates.update(
                        itertools.compress(deps, map(operator.is_not, refs, self._endpoint_refs))
                    )
                else:
                    # The registry's history names the services whose maps were replaced since: O(changed).
                    maps, by_service = registry.endpoints, demand.by_service
                    for service in changed:
                        if service in by_service:
                            refs[bisect.bisect_left(deps, service)] = maps.get(service)
                            candidates.add(service)
            if registry.services is not previous[3]:
                candidates.update(demand.undeclared)
            if routings is not previous[4]:
                old_routings = previous[4]
                candidates.update(
                    service
                    for service in {*routings, *old_routings}
                    if service in demand.by_service and routings.get(service) is not old_routings.get(service)
                )
            if tcp_backends is not previous[5]:
                candidates.update(
                    service
                    for service in tcp_backends.symmetric_difference(previous[5])
                    if service in demand.by_service
                )
            if subsets is not previous[6]:
                old_subsets = previous[6]
                candidates.update(
                    service
                    for service in {*subsets, *old_subsets}
                    if service in demand.by_service and subsets.get(service) is not old_subsets.get(service)
                )
            if udp_ports is not previous[7]:
                old_ports = previous[7]
                candidates.update(
                    service
                    for service in {*udp_ports, *old_ports}
                    if service in demand.by_service and udp_ports.get(service) is not old_ports.get(service)
                )
            order: Iterable[str] = sorted(candidates)
        else:
            refs = list(map(registry.endpoints.get, deps))
            order = deps
            for service in sorted(set(self._services).difference(deps)):
                self._drop_service(service, changes)
            touched = None
        self._services_inputs = (
            demand,
            context,
            registry.endpoints,
            registry.services,
            routings,
            tcp_backends,
            subsets,
            udp_ports,
        )
        self._endpoint_refs = refs
        projected = 0
        for service in order:
            held = self._services.get(service)
            # A new set gives a requested service an equal demand of its own: keep the one it was projected from.
            service_demand = _interned(held[0][1] if held is not None else None, demand.by_service[service])
            endpoints = registry.endpoints.get(service)
            in_catalog = service in registry.services
            routing = routings.get(service)
            tcp_backend = service in tcp_backends
            service_subsets = subsets.get(service, ())
            service_udp = udp_ports.get(service, ())
            inputs = (
                endpoints,
                service_demand,
                in_catalog,
                context,
                routing,
                tcp_backend,
                service_subsets,
                service_udp,
            )
            if held is not None and same_inputs(held[0], inputs):
                continue
            old = held[1] if held is not None else NOTHING
            new = project_service(
                service,
                endpoints,
                service_demand,
                in_catalog=in_catalog,
                context=context,
                routing=routing,
                tcp_backend=tcp_backend,
                subsets=service_subsets,
                udp_ports=service_udp,
            )
            vhosts = old.vhosts if old.vhosts == new.vhosts else new.vhosts
            if held is None:
                self._touched.add(service)
            if vhosts is not old.vhosts:
                self._touched.add(service)
                if vhosts.size:
                    self._vhosts[service] = vhosts
                else:
                    self._vhosts.pop(service, None)
            resources = changes.replace(old.resources, new.resources)
            self._services[service] = (
                inputs,
                ServiceProjection(resources=resources, vhosts=vhosts, not_found=new.not_found),
            )
            projected += 1
        return projected, touched

    def _drop_service(self, service: str, changes: ResourceChanges) -> None:
        changes.replace(self._services.pop(service)[1].resources, ())
        self._vhosts.pop(service, None)
        self._touched.add(service)

    def _project_pods(
        self,
        local: LocalPods,
        context: PodContext,
        l4: tuple[MeshL4Destination, ...],
        udp: tuple[UdpDestination, ...],
        frontends: tuple[FrontendRoute, ...],
        changes: ResourceChanges,
    ) -> int:
        present = {record.pod.key for record in local.records}
        for key in sorted(set(self._pods).difference(present)):
            changes.replace(self._pods.pop(key)[1], ())
        projected = 0
        for record in local.records:
            bound = record.pod.key in local.bound
            inputs = (record, bound, context, l4, udp, frontends)
            held = self._pods.get(record.pod.key)
            if held is not None and same_inputs(held[0], inputs):
                continue
            new = project_pod(record, bound=bound, context=context, l4=l4, udp=udp, frontends=frontends)
            self._pods[record.pod.key] = (inputs, changes.replace(held[1] if held else (), new))
            projected += 1
        return projected

    def _project_routes(
        self, state: State, demand: Demand, *, touched: set[str] | None, changes: ResourceChanges
    ) -> None:
        mesh_domain = state.kube.mesh_config.mesh_domain
        inputs = (demand.services, mesh_domain)
        if (
            self._routes is not None
            and touched is not None
            and not touched
            and same_inputs(self._routes[0], inputs)
        ):
            return
        # The services' pieces (each hashed when its service was projected) in content-defined groups: only the
        # groups of the touched services are made again, so the two tables cost O(changed + groups), never their
        # 17 MB nor a step per service of the set (`route_groups`).
        vhosts = self._route_groups.update(demand.services, self._vhosts, touched=touched)
        new = tuple(
            Resource.from_pieces(
                ROUTE_TYPE,
                name=name,
                pieces=route_configuration_pieces(
                    name, vhosts, mesh_domain=mesh_domain, passthrough=passthrough
                ),
            )
            for name, passthrough in ((OUTBOUND_ROUTE, False), (CAPTURE_ROUTE, True))
        )
        self._routes = (inputs, changes.replace(self._routes[1] if self._routes else (), new))

    def _project_slices(
        self, state: State, demand: Demand, routings: Mapping[str, MeshRouting], changes: ResourceChanges
    ) -> None:
        """Project the clusters of the Services without a selector that the set's GAMMA routes send to, each from
        its Service and its own EndpointSlices: a slice change re-projects only the clusters of its Service."""
        wanted: tuple[tuple[str, SliceClusterName, str, str], ...] = self._slices_in_set.get(
            (demand.services, routings), lambda: _slice_plan(demand, routings)
        )
        kube = state.kube
        inputs_of_set = (wanted, kube.services, kube.slices_by_service)
        if same_inputs(self._slices_inputs, inputs_of_set):
            return
        self._slices_inputs = inputs_of_set
        for name in set(self._slices).difference(item[0] for item in wanted):
            changes.replace(self._slices.pop(name)[2], ())
        services, index = kube.services, kube.slices_by_service
        for name, parsed, service_key, index_key in wanted:
            # The reducer gives a Service's index entry a new frozenset whenever one of its slices changes: the
            # entry's identity says whether this cluster's slices changed, without reading them.
            service, entry = services.get(service_key), index.get(index_key)
            held = self._slices.get(name)
            if held is not None and held[0] is service and held[1] is entry:
                continue
            cluster, assignment = slice_resources(name, parsed, kube)
            new = (
                Resource.from_message(cluster, references=(name,)),
                Resource.from_message(assignment),
            )
            self._slices[name] = (service, entry, changes.replace(held[2] if held else (), new))

    def _project_udp_routes(
        self, state: State, clusters: tuple[UdpRouteCluster, ...], changes: ResourceChanges
    ) -> None:
        """Project the weighted clusters of the UDPRoutes serving the set's destinations, each from its backends'
        endpoint maps: a registry change re-projects only the clusters of the services it touched."""
        endpoints = state.registry.endpoints
        wanted = {cluster.name for cluster in clusters}
        for name in sorted(set(self._udp_route_units).difference(wanted)):
            changes.replace(self._udp_route_units.pop(name)[1], ())
        for cluster in clusters:
            inputs = (cluster, *(endpoints.get(service) for service in cluster.services))
            held = self._udp_route_units.get(cluster.name)
            if held is not None and held[0][0] == cluster and same_inputs(held[0][1:], inputs[1:]):
                continue
            new = udp_route_resources(cluster, endpoints.get)
            self._udp_route_units[cluster.name] = (inputs, changes.replace(held[1] if held else (), new))

    def _project_secrets(self, state: State, identities: tuple[str, ...], changes: ResourceChanges) -> None:
        """The SVIDs of the local identities (their inbound listeners), their caller secrets, the trust bundle."""
        identity = state.identity
        trust_domain = state.kube.mesh_config.trust_domain
        inputs = (identity.svids, identity.trust_bundles, identities, trust_domain)
        if self._secrets is not None and same_inputs(self._secrets[0], inputs):
            return
        messages = [
            *node_secrets(
                identities, svids=identity.svids, bundles=identity.trust_bundles, trust_domain=trust_domain
            ),
            *caller_secrets(identities, svids=identity.svids),
        ]
        new = tuple(Resource.from_message(message) for message in messages)
        self._secrets = (inputs, changes.replace(self._secrets[1] if self._secrets else (), new))

    def _next_snapshot(self, state: State, changes: ResourceChanges, not_found: frozenset[str]) -> Snapshot:
        previous = self._snapshot
        if previous is None:
            return Snapshot.build(
                node_id=self._node_name, seq=state.seq, resources=self._all_resources(), not_found=not_found
            )
        return previous.with_changes(
            seq=state.seq,
            upserted=changes.upserted,
            removed=changes.removed,
            not_found=None if not_found == previous.not_found else not_found,
        )

    def _all_resources(self) -> list[Resource]:
        resources: list[Resource] = [*self._passthrough]
        for _, projection in self._services.values():
            resources.extend(projection.resources)
        for _, items in self._pods.values():
            resources.extend(items)
        for _, _, items in self._slices.values():
            resources.extend(items)
        for _, items in self._udp_route_units.values():
            resources.extend(items)
        for unit in (self._routes, self._secrets):
            if unit is not None:
                resources.extend(unit[1])
        return resources
