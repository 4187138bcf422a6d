"""What the log already holds of Kubernetes objects: the baseline every object source diffs against.

A source that starts from nothing re-appends every object at every start and never deletes what vanished while it
was down. A `Baseline` starts from the objects of the replayed state (`logged_objects`) and follows every event the
source sends: an upsert equal to what the log holds appends nothing, and an object the source no longer sees gets
its deletion (`vanished`). The manifest directory and the Kubernetes watches share it.

Objects a reducer rejected are not in the state, so an unchanged rejected object is appended again after a restart
(and rejected again): the log keeps no copy of it to compare with.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import attrs

from aether.core.events import (
    EndpointSliceDeleted,
    EndpointSliceUpserted,
    Event,
    GatewayObjectDeleted,
    GatewayObjectUpserted,
    KubeEndpointSlice,
    KubeNamespace,
    KubeObject,
    KubeService,
    KubeServiceDeleted,
    KubeServiceUpserted,
    NamespaceDeleted,
    NamespaceUpserted,
    Pod,
    PodAdded,
    PodRemoved,
    PodUpdated,
    ReferenceGrantDeleted,
    ReferenceGrantUpserted,
    TlsSecret,
    TlsSecretDeleted,
    TlsSecretUpserted,
)
from aether.core.state import State

__all__ = ["Baseline", "LoggedObject", "event_object", "logged_objects"]

LoggedObject = KubeService | KubeObject | TlsSecret | KubeNamespace | KubeEndpointSlice | Pod
"""What the state keeps of an object: the payload of its last applied upsert."""


def _pod_key(namespace: str, name: str) -> str:
    return f"Pod/{namespace}/{name}"


def logged_objects(state: State, *, kinds: Collection[str] | None = None) -> dict[str, LoggedObject]:
    """Return the objects `state` holds (of `kinds` only, if given), by `<kind>/<namespace>/<name>`, in key order."""
    found: dict[str, LoggedObject] = {}
    kube = state.kube
    for item in (
        *kube.services.values(),
        *kube.gateway_objects.values(),
        *kube.reference_grants.values(),
        *kube.tls_secrets.values(),
        *kube.namespaces.values(),
        *kube.endpoint_slices.values(),
    ):
        found[item.meta.key] = item
    for record in state.pods.values():
        found[_pod_key(record.pod.namespace, record.pod.name)] = record.pod
    return {key: found[key] for key in sorted(found) if kinds is None or _kind_of(key) in kinds}


def event_object(event: Event) -> tuple[str, LoggedObject | None] | None:
    """Return the key of the object upsert or deletion `event` is about, with the upserted payload (None for a
    deletion); None when `event` is not about a Kubernetes object."""
    match event:
        case KubeServiceUpserted(service=item) | TlsSecretUpserted(secret=item):
            return item.meta.key, item
        case NamespaceUpserted(namespace=item):
            return item.meta.key, item
        case EndpointSliceUpserted(slice=item):
            return item.meta.key, item
        case GatewayObjectUpserted(object=item) | ReferenceGrantUpserted(object=item):
            return item.meta.key, item
        case PodAdded(pod=pod) | PodUpdated(pod=pod):
            return _pod_key(pod.namespace, pod.name), pod
        case KubeServiceDeleted(meta=meta) | TlsSecretDeleted(meta=meta) | NamespaceDeleted(meta=meta):
            return meta.key, None
        case EndpointSliceDeleted(meta=meta):
            return meta.key, None
        case GatewayObjectDeleted(meta=meta) | ReferenceGrantDeleted(meta=meta):
            return meta.key, None
        case PodRemoved(namespace=namespace, name=name):
            return _pod_key(namespace, name), None
    return None


def _deletion(item: LoggedObject, *, source: str, observed_at: int) -> Event:
    match item:
        case Pod():
            return PodRemoved(
                observed_at=observed_at, source=source, namespace=item.namespace, name=item.name, uid=item.uid
            )
        case KubeService():
            return KubeServiceDeleted(observed_at=observed_at, source=source, meta=item.meta)
        case TlsSecret():
            return TlsSecretDeleted(observed_at=observed_at, source=source, meta=item.meta)
        case KubeNamespace():
            return NamespaceDeleted(observed_at=observed_at, source=source, meta=item.meta)
        case KubeEndpointSlice():
            return EndpointSliceDeleted(observed_at=observed_at, source=source, meta=item.meta)
        case KubeObject() if item.meta.kind == "ReferenceGrant":
            return ReferenceGrantDeleted(observed_at=observed_at, source=source, meta=item.meta)
        case KubeObject():
            return GatewayObjectDeleted(observed_at=observed_at, source=source, meta=item.meta)


def _held(logged: LoggedObject | None, item: LoggedObject) -> bool:
    """True when the log holds `item` already. A pod is compared without the sandbox only the CNI observes: the pod
    reducer keeps the logged one for an upsert that carries none."""
    if isinstance(logged, Pod) and isinstance(item, Pod) and not item.netns:
        return attrs.evolve(logged, netns="", container_id="") == item
    return logged == item


def _kind_of(key: str) -> str:
    return key.partition("/")[0]


class Baseline:
    """The objects one source has in the log, by key: seeded from the replayed state, then kept by `changed`.

    Args:
        objects: What the log holds (`logged_objects(state, kinds=...)` of the kinds the source owns).
        kept: Keys of `objects` the source compares with but never deletes until it has sent them itself (the
            pods the CNI also reports).
    """

    def __init__(
        self, objects: Mapping[str, LoggedObject] | None = None, *, kept: Iterable[str] = ()
    ) -> None:
        self._objects: dict[str, LoggedObject] = dict(objects or {})
        self._kept = set(kept)

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __len__(self) -> int:
        return len(self._objects)

    def changed(self, events: Iterable[Event]) -> list[Event]:
        """Return `events` without the upserts of objects the log already holds as they are, and remember the rest."""
        kept: list[Event] = []
        for event in events:
            found = event_object(event)
            if found is not None:
                key, item = found
                self._kept.discard(key)  # seen by the source itself: a later list may delete it
                if item is None:
                    self._objects.pop(key, None)
                elif _held(self._objects.get(key), item):
                    continue
                else:
                    self._objects[key] = item
            kept.append(event)
        return kept

    def vanished(
        self, present: Collection[str], *, source: str, observed_at: int, kind: str | None = None
    ) -> list[Event]:
        """Return the deletions of the objects (of `kind` only, if given) not in `present`, in key order, and forget
        them."""
        gone = sorted(
            key
            for key in self._objects
            if key not in present and key not in self._kept and (kind is None or _kind_of(key) == kind)
        )
        return [_deletion(self._objects.pop(key), source=source, observed_at=observed_at) for key in gone]
