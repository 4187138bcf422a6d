"""Folding manifests without a cluster: the pods of the manifests stand in for the registrar.

In a cluster, endpoints reach the log from the registrar (`EndpointsSnapshotReceived`, `EndpointAdded`, ...). Offline
(`aether render`, an edge fed from a directory) there is no registrar: every meshed pod with an IP is the endpoint it
would register, and one registry snapshot carries them all. The events are the registrar's own, so the projections
cannot tell the difference.

Manifests carry no network namespace, but in a cluster the CNI joins every managed pod from its own: `cni_joined`
gives each pod the namespace path a container runtime would have, so a node's render holds its capture listeners.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable

import attrs

from aether.core.events import (
    Endpoint,
    EndpointsSnapshotCompleted,
    EndpointsSnapshotReceived,
    Event,
    Pod,
    PodAdded,
    PodUpdated,
    Record,
)
from aether.core.order import sorted_unique
from aether.core.project import registrations
from aether.core.reduce import fold_all
from aether.core.reduce.annotations import pod_problem, unmanaged_reason
from aether.core.state import EMPTY_STATE, State
from aether.core.state.pods import PodRecord

__all__ = [
    "CNI_NETNS_DIRECTORY",
    "OFFLINE_REGISTRY_VERSION",
    "addressless_pods",
    "cni_joined",
    "cni_netns",
    "fold_offline",
    "pod_endpoint",
    "registry_events",
]

OFFLINE_REGISTRY_VERSION = "1"
"""The version of the stand-in registry snapshot (a snapshot is accepted at any version, so one is enough)."""
CNI_NETNS_DIRECTORY = "/var/run/netns"
"""Where container runtimes (containerd, CRI-O) pin the pod sandboxes' network namespaces."""


def cni_netns(pod: Pod) -> str:
    """Return the network namespace path a runtime would give `pod`'s sandbox, as containerd names them
    (`/var/run/netns/cni-<uuid>`), the UUID derived from the pod's uid, else its `namespace/name`: deterministic."""
    digest = hashlib.sha256((pod.uid or pod.key).encode()).digest()
    return f"{CNI_NETNS_DIRECTORY}/cni-{uuid.UUID(bytes=digest[:16], version=4)}"


def cni_joined(events: Iterable[Event]) -> tuple[Event, ...]:
    """Return `events` with every pod in a network namespace of its own (`cni_netns`), as the CNI ADD of a cluster
    joins it; a pod that already names one keeps it, and every other event is unchanged."""
    return tuple(
        attrs.evolve(event, pod=attrs.evolve(event.pod, netns=cni_netns(event.pod)))
        if isinstance(event, PodAdded | PodUpdated) and not event.pod.netns
        else event
        for event in events
    )


def addressless_pods(events: Iterable[Event]) -> tuple[Pod, ...]:
    """Return the pods of `events` that would join the mesh (managed, valid) but have no IP, in event order:
    offline, nothing will assign them one, so they would be left out of every projection."""
    return tuple(
        event.pod
        for event in events
        if isinstance(event, PodAdded | PodUpdated)
        and not event.pod.ips
        and unmanaged_reason(event.pod) is None
        and pod_problem(event.pod) is None
    )


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
