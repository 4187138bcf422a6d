"""The event catalog: every event type, its kind name on the wire, and the record that carries one in the log."""

from __future__ import annotations

import re

import attrs

from aether.core.events.base import Event
from aether.core.events.identity import SvidRemoved, SvidRotated, TrustBundleRemoved, TrustBundleRotated
from aether.core.events.kube import (
    EndpointSliceDeleted,
    EndpointSliceUpserted,
    GatewayObjectDeleted,
    GatewayObjectUpserted,
    KubeServiceDeleted,
    KubeServiceUpserted,
    MeshConfigUpdated,
    NamespaceDeleted,
    NamespaceUpserted,
    ReferenceGrantDeleted,
    ReferenceGrantUpserted,
    TlsSecretDeleted,
    TlsSecretUpserted,
)
from aether.core.events.pods import NodeCaptureConfigured, PodAdded, PodRemoved, PodUpdated
from aether.core.events.registry import (
    EndpointAdded,
    EndpointRemoved,
    EndpointsSnapshotCompleted,
    EndpointsSnapshotReceived,
    EndpointUpdated,
    RegistryServiceAdded,
    RegistryServiceRemoved,
)
from aether.core.events.xds import OnDemandClusterRequested, ResourceAcked, ResourceNacked

EVENT_TYPES: tuple[type[Event], ...] = (
    PodAdded,
    PodUpdated,
    PodRemoved,
    NodeCaptureConfigured,
    EndpointsSnapshotReceived,
    EndpointAdded,
    EndpointUpdated,
    EndpointRemoved,
    EndpointsSnapshotCompleted,
    RegistryServiceAdded,
    RegistryServiceRemoved,
    KubeServiceUpserted,
    KubeServiceDeleted,
    GatewayObjectUpserted,
    GatewayObjectDeleted,
    ReferenceGrantUpserted,
    ReferenceGrantDeleted,
    TlsSecretUpserted,
    TlsSecretDeleted,
    NamespaceUpserted,
    NamespaceDeleted,
    EndpointSliceUpserted,
    EndpointSliceDeleted,
    MeshConfigUpdated,
    SvidRotated,
    SvidRemoved,
    TrustBundleRotated,
    TrustBundleRemoved,
    ResourceAcked,
    ResourceNacked,
    OnDemandClusterRequested,
)
"""Every event type, in wire order. Append-only: a persisted event type is never removed or changed in meaning."""


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


KIND_OF: dict[type[Event], str] = {cls: _snake_case(cls.__name__) for cls in EVENT_TYPES}
"""The kind name of each event type: its oneof field in `aether.log.v1.Event` (e.g. `pod_added`)."""


def kind_of(event: Event) -> str:
    """Return the kind name of `event` (`PodAdded` → `pod_added`)."""
    return KIND_OF[type(event)]


@attrs.frozen(kw_only=True)
class Record:
    """An event at its position in the log: what reducers fold."""

    seq: int
    """The log sequence number, from 1, increasing by one per record."""
    event: Event
