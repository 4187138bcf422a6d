"""Folding manifests without a cluster: the pods of the manifests stand in for the registrar.

In a cluster, endpoints reach the log from the registrar (`EndpointsSnapshotReceived`, `EndpointAdded`, ...). Offline
(`aether render`, an edge fed from a directory) there is no registrar: every meshed pod with an IP is the endpoint it
would register, and one registry snapshot carries them all. The events are the registrar's own, so the projections
cannot tell the difference.
"""

from __future__ import annotations

from collections.abc import Iterable

from aether.core.events import Endpoint, EndpointsSnapshotCompleted, EndpointsSnapshotReceived, Event, Record
from aether.core.order import sorted_unique
from aether.core.project import registrations
from aether.core.reduce import fold_all
from aether.core.state import EMPTY_STATE, State
from aether.core.state.pods import PodRecord

__all__ = ["OFFLINE_REGISTRY_VERSION", "fold_offline", "pod_endpoint", "registry_events"]

OFFLINE_REGISTRY_VERSION = "1"
"""The version of the stand-in registry snapshot (a snapshot is accepted at any version, so one is enough)."""


def pod_endpoint(record: PodRecord) -> Endpoint:
    """Return the endpoint a meshed pod registers (`aether.core.project.registrations`, the agent's own rule)."""
    endpoint = registrations.pod_endpoint(record, cluster_name="")
    assert endpoint is not None, (
        "a folded pod record always has an IP (the reducer keeps addressless pods out)"
    )
    return endpoint


def registry_events(state: State, *, source: str, observed_at: int) -> tuple[Event, ...]:
    """Return the registry snapshot of the pods of `state`, as every node's agent would register them.

    Returns:
        An `EndpointsSnapshotReceived` holding one endpoint per pod and the catalog of their services, then the
        `EndpointsSnapshotCompleted` that marks the view complete.
    """
    endpoints = tuple(registrations.local_endpoints(state, node_name="", cluster_name="").values())
    return (
        EndpointsSnapshotReceived(
            observed_at=observed_at,
            source=source,
            version=OFFLINE_REGISTRY_VERSION,
            endpoints=endpoints,
            services=sorted_unique(endpoint.service for endpoint in endpoints),
        ),
        EndpointsSnapshotCompleted(observed_at=observed_at, source=source, version=OFFLINE_REGISTRY_VERSION),
    )


def fold_offline(events: Iterable[Event], *, source: str, observed_at: int) -> State:
    """Fold `events` (a manifest directory's) from the empty state, then the registry snapshot of its pods.

    Returns:
        The state a node would hold with the same objects and a registrar that registered every pod.
    """
    folded = tuple(events)
    state = fold_all(EMPTY_STATE, (Record(seq=seq, event=event) for seq, event in enumerate(folded, 1)))
    snapshot = registry_events(state, source=source, observed_at=observed_at)
    return fold_all(
        state, (Record(seq=state.seq + seq, event=event) for seq, event in enumerate(snapshot, 1))
    )
