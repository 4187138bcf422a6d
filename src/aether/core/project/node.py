"""The node snapshot: `project_node` (pure, whole) and `NodeProjector` (the same result, re-projecting only what
changed since its previous call).

A snapshot is made of units, each a function of a few immutable inputs: one unit per service of the dependency set
(`node_services`), one per local pod, and the node-wide ones: the passthrough cluster, the two route tables, the
slice and UDPRoute clusters, the secrets (`node_units`). A projection has two stages. First the inputs
(`node_inputs`): the local pods, the dependency set, the GAMMA routing of the set and the contexts, each derived
again only when what it comes from changed, and kept as the same object while equal. Then the units: each keeps
the inputs it was last computed from, compared by identity (`is`) for the state's immutable maps and records and by
equality for small context values; a unit whose inputs are the same keeps its `Resource` objects (their digests and
packed bytes are reused), and the next snapshot is the previous one `with_changes`.

The projector holds nothing else: no clock, no event, no hidden input. So its output equals
`project_node(state, node_name=..., now=...)` for any sequence of states, whatever came before (a property test
holds the two equal over random event sequences).

What one registry event costs at 10,000 services: the changed service's resources only (`node_services`). What a
service joining or leaving the set costs (a pod of a new service account, a new upstream): its own resources, the
set's declarations and demand derived from the previous ones (`dependencies.declarations`, `demand(previous=...)`),
and its group of the route tables (`route_groups`): nothing walks the set in Python.
"""

from __future__ import annotations

import attrs

from aether.core.project.clusters import passthrough_cluster
from aether.core.project.memo import Last
from aether.core.project.node_inputs import NodeInputsMemo
from aether.core.project.node_services import ServiceUnits
from aether.core.project.node_units import PodUnits, RouteTables, SecretUnit, SliceUnits, UdpRouteUnits
from aether.core.project.udp import UdpCapture, udp_captures
from aether.core.project.units import ResourceChanges
from aether.core.snapshot import Resource, Snapshot
from aether.core.state.state import State


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


class NodeProjector:
    """Projects one node's snapshots, reusing what it computed before from the same inputs.

    A deterministic memo: it holds only caches keyed on the identity of immutable inputs (see the module
    docstring), so `project` returns what `project_node` returns for the same arguments.
    """

    def __init__(self, *, node_name: str, collector_cluster: str = "") -> None:
        self._node_name = node_name
        self._inputs = NodeInputsMemo(node_name=node_name, collector_cluster=collector_cluster)
        self._dependencies: tuple[str, ...] = ()
        self._udp_capture_of = Last()
        self._udp_capture: tuple[UdpCapture, ...] = ()
        self._services = ServiceUnits()
        self._pods = PodUnits()
        self._routes = RouteTables()
        self._slices = SliceUnits()
        self._udp_routes = UdpRouteUnits()
        self._secrets = SecretUnit()
        self._passthrough: tuple[Resource, ...] = ()
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
        inputs = self._inputs.read(state, now=now)
        local, demand, udp = inputs.local, inputs.demand, inputs.udp
        self._dependencies = demand.services

        changes = ResourceChanges()
        services_projected, touched = self._services.project(
            state,
            demand,
            inputs.service_context,
            inputs.routings,
            inputs.l4.backends,
            inputs.subsets,
            udp.ports,
            changes,
        )
        pods_projected = self._pods.project(
            local, inputs.pod_context, inputs.l4.destinations, udp.destinations, inputs.frontends, changes
        )
        self._udp_capture = self._udp_capture_of.get(
            (local, udp.destinations),
            lambda: udp_captures(local.records, bound=local.bound, destinations=udp.destinations),
        )
        self._routes.project(state, demand, self._services.vhosts, touched=touched, changes=changes)
        self._slices.project(state, demand, inputs.routings, changes)
        self._udp_routes.project(state, udp.clusters, changes)
        self._secrets.project(state, inputs.identities, changes)
        if not self._passthrough:
            self._passthrough = changes.replace((), (Resource.from_message(passthrough_cluster()),))
        not_found = frozenset((*demand.unmatched, *self._services.not_found(demand.requesting)))
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
        return [
            *self._passthrough,
            *self._services.resources(),
            *self._pods.resources(),
            *self._slices.resources(),
            *self._udp_routes.resources(),
            *self._routes.resources(),
            *self._secrets.resources(),
        ]
