"""`EdgeProjector`: the edge snapshot of `edge.edge_snapshot`, re-projecting only what changed since the previous one.

The snapshot is made of units, each a function of a few inputs: the listeners (one per Gateway listener port, from
its plan, the bind address and tracing), the route tables (`aether.core.project.edge_tables`: per virtual host
and per route), the clusters (one unit per mesh service the routes use, one per slice cluster), the UDP listeners
and their clusters, `edge_unroutable`, and the secrets. A unit whose inputs are the same (compared by identity for
the state's immutable maps and the view's virtual hosts and routes, by equality for plans and small values) keeps
its `Resource` objects, and the next snapshot is the previous one `with_changes`. The projector holds nothing
else (no clock, no event, no hidden input), so its snapshot equals `edge_snapshot(view, state, ...)` for any
sequence of states (a property test holds the two equal over random event sequences).

What one HTTPRoute change costs at 10,000 routes: the plans (a pass over the listeners and virtual hosts), the
changed virtual host's entry joined from its routes' kept entries (the changed route serialized), the table's
digest, and equality tests of the backend clusters and selectors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from aether.core.gateway import GatewayView
from aether.core.mesh_names import SliceClusterName, http_cluster_name
from aether.core.project.edge import (
    UNROUTABLE,
    ClusterPlan,
    EdgeInputs,
    EdgeOptions,
    ListenerPlan,
    TablePlan,
    edge_certificates,
    edge_inputs,
    edge_secrets,
    listener_message,
    plan_clusters,
    port_plans,
    service_cluster_resources,
    single_cluster_resources,
    udp_plans,
    udp_resources,
)
from aether.core.project.edge_listeners import readiness_listener
from aether.core.project.edge_tables import EdgeTables
from aether.core.project.units import ResourceChanges, same_inputs
from aether.core.snapshot import Resource, Snapshot
from aether.core.state.state import State


@attrs.frozen(kw_only=True)
class EdgeProjectorStatistics:
    """What an `EdgeProjector` did."""

    projections: int
    """Snapshots projected so far."""
    listeners_built: int
    """Listeners the last projection serialized (the others were reused)."""
    tables_built: int
    """Route tables whose bytes the last projection assembled anew."""
    virtual_hosts_joined: int
    """Virtual host entries the last projection joined anew."""
    routes_serialized: int
    """Routes the last projection serialized (the others' bytes were reused)."""
    clusters_projected: int
    """Cluster units (mesh services, slice clusters) the last projection computed."""
    upserted: int
    """Resources the last snapshot added or replaced."""
    removed: int
    """Resources the last snapshot dropped."""


def _interned(previous: EdgeInputs | None, current: EdgeInputs) -> EdgeInputs:
    """`previous` when it equals `current`, so that equal inputs stay one object (identity checks)."""
    return previous if previous is not None and previous == current else current


class EdgeProjector:
    """Projects the edge's snapshots, reusing what it computed before from the same inputs.

    A deterministic memo: it holds only caches keyed on its inputs (see the module docstring), so `project`
    returns what `edge_snapshot` returns for the same arguments.
    """

    def __init__(self, *, node_id: str, options: EdgeOptions) -> None:
        self._node_id = node_id
        self._options = options
        self._inputs: EdgeInputs | None = None
        self._listener_of: dict[tuple[ListenerPlan, tuple[str, ...]], Resource] = {}
        """Per plan and route table names, its listener (for `_inputs`' bind address and tracing)."""
        self._listeners: tuple[Resource, ...] = ()
        self._tables = EdgeTables()
        self._table_resources: tuple[Resource, ...] = ()
        self._cluster_plan: tuple[frozenset[str], str, ClusterPlan] | None = None
        """The backend cluster names, the mesh domain, and their plan."""
        self._clusters_inputs: tuple[Any, ...] | None = None
        self._singles: dict[str, tuple[tuple[Any, ...], tuple[Resource, ...]]] = {}
        """Per slice cluster (or name no mesh service serves): what it was projected from, and its resources."""
        self._services: dict[str, tuple[tuple[Any, ...], tuple[Resource, ...]]] = {}
        """Per mesh service: what its clusters were projected from, and their resources."""
        self._udp: tuple[tuple[Any, ...], tuple[Resource, ...]] | None = None
        self._unroutable: tuple[Resource, ...] = ()
        self._secrets: tuple[tuple[Any, ...], tuple[Resource, ...]] | None = None
        self._snapshot: Snapshot | None = None
        self._statistics = EdgeProjectorStatistics(
            projections=0,
            listeners_built=0,
            tables_built=0,
            virtual_hosts_joined=0,
            routes_serialized=0,
            clusters_projected=0,
            upserted=0,
            removed=0,
        )

    def statistics(self) -> EdgeProjectorStatistics:
        """Return what the projector did, as of its last projection."""
        return self._statistics

    def project(self, view: GatewayView, state: State) -> Snapshot:
        """Return the edge snapshot of `view` (of `state`): equal to `edge_snapshot(view, state, ...)`."""
        inputs = _interned(self._inputs, edge_inputs(state, options=self._options))
        if inputs is not self._inputs:
            self._listener_of = {}  # every listener is a function of the bind address and tracing
        self._inputs = inputs
        changes = ResourceChanges()
        certificates = edge_certificates(state, view.edge_listeners)
        plans, unroutable = port_plans(view.edge_listeners, certificates)
        listeners_built = self._project_listeners(plans, inputs, changes)
        self._table_resources = changes.replace(
            self._table_resources, self._tables.resources(table for _, tables in plans for table in tables)
        )
        clusters_projected = self._project_clusters(view, state, inputs, changes)
        self._project_udp(view, state, changes)
        self._unroutable = changes.replace(self._unroutable, (UNROUTABLE,) if unroutable else ())
        self._project_secrets(state, inputs, certificates, changes)
        snapshot = self._next_snapshot(state, changes)
        self._snapshot = snapshot
        tables = self._tables.statistics()
        self._statistics = EdgeProjectorStatistics(
            projections=self._statistics.projections + 1,
            listeners_built=listeners_built,
            tables_built=tables.tables,
            virtual_hosts_joined=tables.virtual_hosts,
            routes_serialized=tables.routes,
            clusters_projected=clusters_projected,
            upserted=len(changes.upserted),
            removed=len(changes.removed),
        )
        return snapshot

    # --- units ---

    def _project_listeners(
        self,
        plans: Sequence[tuple[ListenerPlan, tuple[TablePlan, ...]]],
        inputs: EdgeInputs,
        changes: ResourceChanges,
    ) -> int:
        """Bring the listeners in line (the readiness listener first); return how many were serialized."""
        bind = self._options.bind
        held = self._listener_of
        current: dict[tuple[ListenerPlan, tuple[str, ...]], Resource] = {}
        built = 0
        readiness = self._listeners[0] if self._listeners else None
        if readiness is None:
            readiness = Resource.from_message(readiness_listener(bind=bind))
            built += 1
        listeners = [readiness]
        for plan, tables in plans:
            key = (plan, tuple(table.name for table in tables))
            resource = current.get(key) or held.get(key)
            if resource is None:
                message = listener_message(plan, bind=bind, tracing=inputs.tracing)
                resource = Resource.from_message(message, references=key[1])
                built += 1
            current[key] = resource
            listeners.append(resource)
        self._listener_of = current
        self._listeners = changes.replace(self._listeners, listeners)
        return built

    def _project_clusters(
        self, view: GatewayView, state: State, inputs: EdgeInputs, changes: ResourceChanges
    ) -> int:
        """Bring the cluster units in line with the view's backend clusters; return how many were computed."""
        context = inputs.context
        names = view.backend_clusters
        held_plan = self._cluster_plan
        if held_plan is not None and held_plan[1] == context.mesh_domain and held_plan[0] == names:
            plan = held_plan[2]
        else:
            plan = plan_clusters(names, mesh_domain=context.mesh_domain)
            self._cluster_plan = (names, context.mesh_domain, plan)
        kube, endpoints = state.kube, state.registry.endpoints
        selectors = view.backend_selectors
        unit_inputs = (plan, context, endpoints, kube.services, kube.slices_by_service)
        held = self._clusters_inputs
        if (
            held is not None
            and all(a is b for a, b in zip(held[:-1], unit_inputs, strict=True))
            and held[-1] == selectors
        ):
            return 0
        self._clusters_inputs = (*unit_inputs, selectors)
        projected = 0
        wanted = {name for name, _ in plan.singles}
        for name in sorted(set(self._singles).difference(wanted)):
            changes.replace(self._singles.pop(name)[1], ())
        for name, sliced in plan.singles:
            single = _single_inputs(sliced, state)
            held_single = self._singles.get(name)
            if held_single is not None and same_inputs(held_single[0], single):
                continue
            new = single_cluster_resources(name, sliced, kube)
            self._singles[name] = (single, changes.replace(held_single[1] if held_single else (), new))
            projected += 1
        services = {service for service, _ in plan.services}
        for service in sorted(set(self._services).difference(services)):
            changes.replace(self._services.pop(service)[1], ())
        for service, requested in plan.services:
            subsets = selectors.get(http_cluster_name(service, mesh_domain=context.mesh_domain), ())
            unit = (endpoints.get(service), context, requested, subsets)
            held_service = self._services.get(service)
            if held_service is not None and _same_service(held_service[0], unit):
                continue
            new = service_cluster_resources(service, requested, state, context=context, subsets=selectors)
            self._services[service] = (unit, changes.replace(held_service[1] if held_service else (), new))
            projected += 1
        return projected

    def _project_udp(self, view: GatewayView, state: State, changes: ResourceChanges) -> None:
        """The UDP listeners and their clusters: recomputed whole when a plan or a backend's endpoints changed."""
        plans = udp_plans(view)
        endpoints = state.registry.endpoints
        maps = tuple(endpoints.get(service) for _, cluster in plans for service in cluster.services)
        held = self._udp
        if held is not None and held[0][0] == plans and same_inputs(held[0][1], maps):
            return
        new = udp_resources(plans, endpoints.get, bind=self._options.bind)
        self._udp = ((plans, maps), changes.replace(held[1] if held else (), new))

    def _project_secrets(
        self,
        state: State,
        inputs: EdgeInputs,
        certificates: Mapping[str, tuple[bytes, bytes]],
        changes: ResourceChanges,
    ) -> None:
        """The edge's SVID and trust bundle and the listeners' certificates."""
        identity = state.identity
        unit = (inputs, identity.svids, identity.trust_bundles)
        held = self._secrets
        if held is not None and same_inputs(held[0][:3], unit) and held[0][3] == certificates:
            return
        new = tuple(
            Resource.from_message(secret) for secret in edge_secrets(state, inputs, certificates=certificates)
        )
        self._secrets = ((*unit, certificates), changes.replace(held[1] if held else (), new))

    def _next_snapshot(self, state: State, changes: ResourceChanges) -> Snapshot:
        previous = self._snapshot
        if previous is None:
            return Snapshot.build(node_id=self._node_id, seq=state.seq, resources=self._all_resources())
        return previous.with_changes(seq=state.seq, upserted=changes.upserted, removed=changes.removed)

    def _all_resources(self) -> list[Resource]:
        """Every resource held, in the order `edge_snapshot` lists them."""
        resources = [*self._listeners, *self._table_resources]
        for _, items in self._singles.values():
            resources.extend(items)
        for _, items in self._services.values():
            resources.extend(items)
        if self._udp is not None:
            resources.extend(self._udp[1])
        resources.extend(self._unroutable)
        if self._secrets is not None:
            resources.extend(self._secrets[1])
        return resources


def _single_inputs(sliced: SliceClusterName | None, state: State) -> tuple[Any, ...]:
    """What a slice cluster is projected from: its Service and its slices' index entry (the reducer gives the
    entry a new frozenset whenever one of the Service's slices changes); nothing for an endpoint-less one."""
    if sliced is None:
        return ()
    kube = state.kube
    return (
        kube.services.get(f"Service/{sliced.namespace}/{sliced.service}"),
        kube.slices_by_service.get(f"{sliced.namespace}/{sliced.service}"),
    )


def _same_service(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    """The same endpoint map and context (identity), the same requested names and selector keys (equality)."""
    return old[0] is new[0] and old[1] is new[1] and old[2] == new[2] and old[3] == new[3]
