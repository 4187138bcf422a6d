"""`fold`: the one entry point of the reducers, a total dispatch table from event type to reducer."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from aether.core.errors import UnknownEvent
from aether.core.events import (
    EndpointAdded,
    EndpointRemoved,
    EndpointSliceDeleted,
    EndpointSliceUpserted,
    EndpointsSnapshotCompleted,
    EndpointsSnapshotReceived,
    EndpointUpdated,
    Event,
    GatewayObjectDeleted,
    GatewayObjectUpserted,
    KubeServiceDeleted,
    KubeServiceUpserted,
    MeshConfigUpdated,
    NamespaceDeleted,
    NamespaceUpserted,
    NodeCaptureConfigured,
    OnDemandClusterRequested,
    PendingUpsert,
    PodAdded,
    PodRemoved,
    PodUpdated,
    Record,
    ReferenceGrantDeleted,
    ReferenceGrantUpserted,
    RegistryServiceAdded,
    RegistryServiceRemoved,
    ResourceAcked,
    ResourceNacked,
    SvidRemoved,
    SvidRotated,
    TlsSecretDeleted,
    TlsSecretUpserted,
    TrustBundleRemoved,
    TrustBundleRotated,
    UpsertBatch,
)
from aether.core.reduce import identity, kube, pods, registry, xds
from aether.core.state.state import State

_Reducer = Callable[[State, Any, int], State]

REDUCERS: dict[type, _Reducer] = {
    PodAdded: pods.pod_added,
    PodUpdated: pods.pod_updated,
    PodRemoved: pods.pod_removed,
    NodeCaptureConfigured: pods.node_capture_configured,
    EndpointsSnapshotReceived: registry.endpoints_snapshot_received,
    EndpointAdded: registry.endpoint_added,
    EndpointUpdated: registry.endpoint_updated,
    EndpointRemoved: registry.endpoint_removed,
    EndpointsSnapshotCompleted: registry.endpoints_snapshot_completed,
    RegistryServiceAdded: registry.registry_service_added,
    RegistryServiceRemoved: registry.registry_service_removed,
    KubeServiceUpserted: kube.kube_service_upserted,
    KubeServiceDeleted: kube.kube_service_deleted,
    GatewayObjectUpserted: kube.gateway_object_upserted,
    GatewayObjectDeleted: kube.gateway_object_deleted,
    ReferenceGrantUpserted: kube.reference_grant_upserted,
    ReferenceGrantDeleted: kube.reference_grant_deleted,
    TlsSecretUpserted: kube.tls_secret_upserted,
    TlsSecretDeleted: kube.tls_secret_deleted,
    MeshConfigUpdated: kube.mesh_config_updated,
    NamespaceUpserted: kube.namespace_upserted,
    NamespaceDeleted: kube.namespace_deleted,
    EndpointSliceUpserted: kube.endpoint_slice_upserted,
    EndpointSliceDeleted: kube.endpoint_slice_deleted,
    SvidRotated: identity.svid_rotated,
    SvidRemoved: identity.svid_removed,
    TrustBundleRotated: identity.trust_bundle_rotated,
    TrustBundleRemoved: identity.trust_bundle_removed,
    ResourceAcked: xds.resource_acked,
    ResourceNacked: xds.resource_nacked,
    OnDemandClusterRequested: xds.on_demand_cluster_requested,
}
"""One row per event type of the catalog (a test checks the table covers `EVENT_TYPES` exactly)."""


def fold_event(state: State, event: Event, *, seq: int) -> State:
    """Return the state after `event` at log position `seq`: `fold` without building a `Record` (replay's loop)."""
    reducer = REDUCERS.get(type(event))
    if reducer is None:
        raise UnknownEvent(value_type=type(event).__qualname__)
    return reducer(state, event, seq)


def fold(state: State, record: Record) -> State:
    """Return the state after `record`: pure and total for every event of the catalog.

    Bad input folds into a rejection (see `aether.core.state.diagnostics`); the result's `seq` is `record.seq`.

    Raises:
        UnknownEvent: `record.event` is not an event of the catalog (a programming error, never bad input).
    """
    return fold_event(state, record.event, seq=record.seq)


def fold_many(state: State, items: Iterable[tuple[int, Event | PendingUpsert | UpsertBatch]]) -> State:
    """Return the state after folding `(seq, event)` pairs in order: what `fold_event` one by one returns.

    Runs of consecutive endpoint upserts fold as one step (`registry.UpsertRun`), several times cheaper per event;
    what the run does not take cleanly folds the ordinary way. Replay and the journal fold through here. Replay
    hands in endpoint upserts as `PendingUpsert` (`decode_for_fold`) and as `UpsertBatch` (`decode_upsert_batch`,
    paired with its first record's seq): one the run does not take is built here (a batch record by record).

    Raises:
        UnknownEvent: as `fold`.
    """
    state, run = _fold_into_run(state, None, items)
    return state if run is None else run.finish()


def _fold_into_run(
    state: State,
    run: registry.UpsertRun | None,
    items: Iterable[tuple[int, Event | PendingUpsert | UpsertBatch]],
) -> tuple[State, registry.UpsertRun | None]:
    """Fold `items` after `state` and the pending `run`: return the state and the run still open."""
    for seq, event in items:
        kind = type(event)
        if kind in _UPSERTS:
            if run is None:
                run = registry.UpsertRun(state)
            if kind is UpsertBatch:
                if run.add_batch(event, seq):  # type: ignore[arg-type]  # the type was just checked
                    continue
                state, run = _fold_into_run(state, run, enumerate(event.events(), start=seq))  # type: ignore[union-attr]
                continue
            if run.add(event, seq):  # type: ignore[arg-type]  # the type was just checked
                continue
        if run is not None:
            state, run = run.finish(), None
        if isinstance(event, PendingUpsert):
            event = event.event()
        state = fold_event(state, event, seq=seq)  # type: ignore[arg-type]  # a batch never gets here
    return state, run


_UPSERTS = frozenset((EndpointAdded, EndpointUpdated, PendingUpsert, UpsertBatch))


def fold_all(state: State, records: Iterable[Record]) -> State:
    """Fold `records` in order, starting from `state` (through `fold_many`)."""
    return fold_many(state, ((record.seq, record.event) for record in records))
