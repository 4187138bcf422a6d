"""The Kubernetes objects this node folds: Services, EndpointSlices, Namespaces, Gateway API objects, ReferenceGrants,
TLS Secrets and the MeshConfig."""

from __future__ import annotations

import attrs
import immutables

from aether.core.events.kube import (
    KubeEndpointSlice,
    KubeNamespace,
    KubeObject,
    KubeService,
    MeshConfig,
    TlsSecret,
)


@attrs.frozen(kw_only=True)
class KubeState:
    """Kubernetes objects keyed by `<kind>/<namespace>/<name>` (their `ObjectMeta.key`)."""

    services: immutables.Map[str, KubeService] = immutables.Map()
    gateway_objects: immutables.Map[str, KubeObject] = immutables.Map()
    reference_grants: immutables.Map[str, KubeObject] = immutables.Map()
    tls_secrets: immutables.Map[str, TlsSecret] = immutables.Map()
    """Secrets of type `kubernetes.io/tls`, keyed `Secret/<namespace>/<name>`: the edge's listener certificates."""
    mesh_config: MeshConfig = MeshConfig()
    namespaces: immutables.Map[str, KubeNamespace] = immutables.Map()
    """Namespaces, keyed `Namespace//<name>`: their labels, for listener namespace selectors."""
    endpoint_slices: immutables.Map[str, KubeEndpointSlice] = immutables.Map()
    """EndpointSlices, keyed `EndpointSlice/<namespace>/<name>`: the backends of Services without a selector."""
    slices_by_service: immutables.Map[str, frozenset[str]] = immutables.Map()
    """The keys of `endpoint_slices` per Service `<namespace>/<name>` they serve (an index the reducer keeps, so a
    projection finds a Service's slices without reading every slice); a slice serving no Service is in none."""

    def slices_of(self, namespace: str, name: str) -> tuple[KubeEndpointSlice, ...]:
        """Return the EndpointSlices of Service `namespace/name`, sorted by key."""
        keys = self.slices_by_service.get(f"{namespace}/{name}", frozenset())
        return tuple(self.endpoint_slices[key] for key in sorted(keys))


def slice_service(item: KubeEndpointSlice) -> str:
    """Return the Service `<namespace>/<name>` EndpointSlice `item` serves, or empty when it names none."""
    return f"{item.meta.namespace}/{item.service}" if item.service else ""


def index_slices(slices: immutables.Map[str, KubeEndpointSlice]) -> immutables.Map[str, frozenset[str]]:
    """Return `KubeState.slices_by_service` for `slices` (a checkpoint rebuilds it; the reducer keeps it)."""
    index: dict[str, set[str]] = {}
    for key, item in slices.items():
        if service := slice_service(item):
            index.setdefault(service, set()).add(key)
    return immutables.Map((service, frozenset(keys)) for service, keys in index.items())
