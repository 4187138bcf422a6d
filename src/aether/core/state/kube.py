"""The Kubernetes objects this node folds: Services, Namespaces, Gateway API objects, ReferenceGrants, TLS Secrets
and the MeshConfig."""

from __future__ import annotations

import attrs
import immutables

from aether.core.events.kube import KubeNamespace, KubeObject, KubeService, MeshConfig, TlsSecret


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
