"""The node's units besides its services: one per local pod, the two route tables, one per slice cluster, one per
UDPRoute cluster, and the secrets.

Each unit holds the inputs it was last computed from and its `Resource` objects; `project` compares the inputs
with the held ones (by identity, `units.same_inputs`) and computes the unit again only when one differs, recording
what it added, replaced or dropped in the projection's `ResourceChanges`. A unit never reads an input it was not
handed, so the resources it keeps are the ones a whole projection would compute.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from aether.core.gateway import MeshL4Destination, MeshRouting, UdpRouteCluster
from aether.core.mesh_names import SliceClusterName, parse_slice_cluster_name
from aether.core.order import sorted_unique
from aether.core.project.dependencies import Demand, LocalPods
from aether.core.project.frontends import FrontendRoute
from aether.core.project.memo import Last
from aether.core.project.names import CAPTURE_ROUTE, OUTBOUND_ROUTE
from aether.core.project.node_inputs import in_set
from aether.core.project.pods import PodContext, project_pod
from aether.core.project.route_groups import RouteGroups
from aether.core.project.routes import route_configuration_pieces
from aether.core.project.secrets import caller_secrets, node_secrets
from aether.core.project.slices import slice_resources
from aether.core.project.udp import UdpDestination
from aether.core.project.udp_routes import udp_route_resources
from aether.core.project.units import ResourceChanges, same_inputs
from aether.core.snapshot import ROUTE_TYPE, Piece, Resource
from aether.core.state.state import State


class PodUnits:
    """One unit per local pod: its listeners (`pods.project_pod`)."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[tuple[Any, ...], tuple[Resource, ...]]] = {}

    def resources(self) -> Iterator[Resource]:
        """Yield the resources of every pod unit."""
        for _, items in self._pods.values():
            yield from items

    def project(
        self,
        local: LocalPods,
        context: PodContext,
        l4: tuple[MeshL4Destination, ...],
        udp: tuple[UdpDestination, ...],
        frontends: tuple[FrontendRoute, ...],
        changes: ResourceChanges,
    ) -> int:
        """Bring the pod units in line with `local`; return how many were computed."""
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


class RouteTables:
    """The two route tables (outbound, capture), assembled from the service units' virtual host pieces."""

    def __init__(self) -> None:
        self._groups = RouteGroups()
        self._unit: tuple[tuple[Any, ...], tuple[Resource, ...]] | None = None

    def resources(self) -> tuple[Resource, ...]:
        """Return the two tables (none before the first projection)."""
        return self._unit[1] if self._unit is not None else ()

    def project(
        self,
        state: State,
        demand: Demand,
        vhosts: Mapping[str, Piece],
        *,
        touched: set[str] | None,
        changes: ResourceChanges,
    ) -> None:
        """Bring the tables in line with the set's `vhosts`, of which only `touched` changed (None: any may have)."""
        mesh_domain = state.kube.mesh_config.mesh_domain
        inputs = (demand.services, mesh_domain)
        if (
            self._unit is not None
            and touched is not None
            and not touched
            and same_inputs(self._unit[0], inputs)
        ):
            return
        # The services' pieces (each hashed when its service was projected) in content-defined groups: only the
        # groups of the touched services are made again, so the two tables cost O(changed + groups), never their
        # 17 MB nor a step per service of the set (`route_groups`).
        grouped = self._groups.update(demand.services, vhosts, touched=touched)
        new = tuple(
            Resource.from_pieces(
                ROUTE_TYPE,
                name=name,
                pieces=route_configuration_pieces(
                    name, grouped, mesh_domain=mesh_domain, passthrough=passthrough
                ),
            )
            for name, passthrough in ((OUTBOUND_ROUTE, False), (CAPTURE_ROUTE, True))
        )
        self._unit = (inputs, changes.replace(self.resources(), new))


def _slice_plan(
    demand: Demand, routings: Mapping[str, MeshRouting]
) -> tuple[tuple[str, SliceClusterName, str, str], ...]:
    """Return, sorted by name, the slice clusters the GAMMA routes of the set's services send to, each with its
    parts, its Service's key in `KubeState.services` and in `KubeState.slices_by_service`."""
    plan = []
    for name in sorted_unique(
        name for _, routing in in_set(routings, demand) for name in routing.slice_clusters
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


class SliceUnits:
    """One unit per slice cluster: a Service without a selector that the set's GAMMA routes send to, its cluster
    and endpoints from its own EndpointSlices (`slices.slice_resources`)."""

    def __init__(self) -> None:
        self._plan = Last()
        self._slices: dict[str, tuple[Any, Any, tuple[Resource, ...]]] = {}
        """Per slice cluster: the Service and the slice index entry it was projected from, and its resources."""
        self._inputs: tuple[Any, ...] | None = None

    def resources(self) -> Iterator[Resource]:
        """Yield the resources of every slice cluster."""
        for _, _, items in self._slices.values():
            yield from items

    def project(
        self, state: State, demand: Demand, routings: Mapping[str, MeshRouting], changes: ResourceChanges
    ) -> None:
        """Project the clusters of the Services without a selector that the set's GAMMA routes send to, each from
        its Service and its own EndpointSlices: a slice change re-projects only the clusters of its Service."""
        wanted: tuple[tuple[str, SliceClusterName, str, str], ...] = self._plan.get(
            (demand.services, routings), lambda: _slice_plan(demand, routings)
        )
        kube = state.kube
        inputs_of_set = (wanted, kube.services, kube.slices_by_service)
        if same_inputs(self._inputs, inputs_of_set):
            return
        self._inputs = inputs_of_set
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


class UdpRouteUnits:
    """One unit per weighted cluster of the UDPRoutes serving the set's destinations
    (`udp_routes.udp_route_resources`)."""

    def __init__(self) -> None:
        self._units: dict[str, tuple[tuple[Any, ...], tuple[Resource, ...]]] = {}
        """Per UDPRoute cluster: the cluster and its backends' endpoint maps it was projected from, and its
        resources."""

    def resources(self) -> Iterator[Resource]:
        """Yield the resources of every UDPRoute cluster."""
        for _, items in self._units.values():
            yield from items

    def project(self, state: State, clusters: tuple[UdpRouteCluster, ...], changes: ResourceChanges) -> None:
        """Project the weighted clusters of the UDPRoutes serving the set's destinations, each from its backends'
        endpoint maps: a registry change re-projects only the clusters of the services it touched."""
        endpoints = state.registry.endpoints
        wanted = {cluster.name for cluster in clusters}
        for name in sorted(set(self._units).difference(wanted)):
            changes.replace(self._units.pop(name)[1], ())
        for cluster in clusters:
            inputs = (cluster, *(endpoints.get(service) for service in cluster.services))
            held = self._units.get(cluster.name)
            if held is not None and held[0][0] == cluster and same_inputs(held[0][1:], inputs[1:]):
                continue
            new = udp_route_resources(cluster, endpoints.get)
            self._units[cluster.name] = (inputs, changes.replace(held[1] if held else (), new))


class SecretUnit:
    """The node's secrets: the SVIDs of the local identities (their inbound listeners), their caller secrets, the
    trust bundle."""

    def __init__(self) -> None:
        self._unit: tuple[tuple[Any, ...], tuple[Resource, ...]] | None = None

    def resources(self) -> tuple[Resource, ...]:
        """Return the secrets (none before the first projection)."""
        return self._unit[1] if self._unit is not None else ()

    def project(self, state: State, identities: tuple[str, ...], changes: ResourceChanges) -> None:
        """Bring the secrets in line with the state's SVIDs and bundles for the local `identities`."""
        identity = state.identity
        trust_domain = state.kube.mesh_config.trust_domain
        inputs = (identity.svids, identity.trust_bundles, identities, trust_domain)
        if self._unit is not None and same_inputs(self._unit[0], inputs):
            return
        messages = [
            *node_secrets(
                identities, svids=identity.svids, bundles=identity.trust_bundles, trust_domain=trust_domain
            ),
            *caller_secrets(identities, svids=identity.svids),
        ]
        new = tuple(Resource.from_message(message) for message in messages)
        self._unit = (inputs, changes.replace(self.resources(), new))
