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

GATEWAY_CHAIN_LIMIT = 256
"""Links a chain of `GatewayChanges` holds at most: memory stays bounded, and the next link starts a new chain."""


@attrs.frozen(kw_only=True, eq=False)
class GatewayChanges:
    """One link of the chain of Gateway API object keys the reducer changed, newest first.

    A projector that remembers the `token` of the link it last saw reads what changed since by following
    `previous` back to it (`changed_since`), instead of comparing every object. `objects` is the map this change
    produced: a state whose `gateway_objects` is another map (decoded, or built without the reducer) is not
    described by its chain. A chain is cut after `GATEWAY_CHAIN_LIMIT` links; its first link remembers the token
    of the link it replaced (`after`), so a projector that saw that one still finds its place.
    """

    key: str
    objects: immutables.Map[str, KubeObject]
    previous: GatewayChanges | None
    depth: int
    after: object
    token: object = attrs.field(factory=object)


def gateway_changed(
    changes: GatewayChanges | None, key: str, objects: immutables.Map[str, KubeObject]
) -> GatewayChanges:
    """Return the chain `changes` with `key`'s change (which produced `objects`) added."""
    if changes is None or changes.depth >= GATEWAY_CHAIN_LIMIT:
        after = None if changes is None else changes.token
        return GatewayChanges(key=key, objects=objects, previous=None, depth=1, after=after)
    return GatewayChanges(key=key, objects=objects, previous=changes, depth=changes.depth + 1, after=None)


def changed_since(kube: KubeState, token: object) -> set[str] | None:
    """Return the keys of the Gateway API objects changed since the link whose token is `token`; None when the
    chain does not tell (the state's objects are not the chain's, or the link is not in it)."""
    node = kube.gateway_changes
    if node is None or node.objects is not kube.gateway_objects:
        return None
    keys: set[str] = set()
    while node.token is not token:
        keys.add(node.key)
        if node.previous is None:
            return keys if node.after is token and token is not None else None
        node = node.previous
    return keys


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
    gateway_changes: GatewayChanges | None = attrs.field(default=None, eq=False, repr=False)
    """What the reducer changed in `gateway_objects`, newest first (not part of the state's value: equal states may
    have different chains, and a decoded state has none)."""

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
