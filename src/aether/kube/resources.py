"""Kubernetes resource types: where each kind lives in the API (group, version, plural) and how its paths read."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = [
    "BUILTIN_RESOURCES",
    "DISCOVERY_GROUP",
    "ENDPOINT_SLICES",
    "GATEWAYS",
    "GATEWAY_API_GROUP",
    "GATEWAY_CLASSES",
    "GRPC_ROUTES",
    "HTTP_ROUTES",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "REFERENCE_GRANTS",
    "SECRETS",
    "SERVICES",
    "TCP_ROUTES",
    "TLS_ROUTES",
    "UDP_ROUTES",
    "JsonObject",
    "ResourceType",
    "object_key",
    "resource_version_of",
]

JsonObject = dict[str, Any]
"""A Kubernetes object as the API serves it: decoded JSON.

Objects stay JSON here on purpose: the API is open-ended (new fields appear in every release), and the
converters in `aether.kube.convert` read the few fields the mesh needs into typed core values.
"""

GATEWAY_API_GROUP = "gateway.networking.k8s.io"
DISCOVERY_GROUP = "discovery.k8s.io"


@attrs.frozen(kw_only=True)
class ResourceType:
    """One served version of one kind: `/api/v1/pods`, `/apis/gateway.networking.k8s.io/v1/httproutes`."""

    group: str
    """The API group; empty for the core group (served under `/api`)."""
    version: str
    plural: str
    """The resource name in paths, lower case and plural."""
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """The `apiVersion` of the kind's objects: `v1`, or `<group>/<version>`."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def collection_path(self, *, namespace: str | None = None) -> str:
        """Return the path of the collection, across namespaces when `namespace` is None.

        Raises:
            ValueError: If `namespace` is given for a cluster-scoped kind.
        """
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is None:
            return f"{root}/{self.plural}"
        if not self.namespaced:
            raise ValueError(
                f"resource {self.plural!r}: cluster-scoped, so it has no namespace (got {namespace!r})"
            )
        return f"{root}/namespaces/{namespace}/{self.plural}"

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"


PODS = ResourceType(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
NODES = ResourceType(group="", version="v1", plural="nodes", kind="Node", namespaced=False)
SERVICES = ResourceType(group="", version="v1", plural="services", kind="Service", namespaced=True)
SECRETS = ResourceType(group="", version="v1", plural="secrets", kind="Secret", namespaced=True)
NAMESPACES = ResourceType(group="", version="v1", plural="namespaces", kind="Namespace", namespaced=False)
ENDPOINT_SLICES = ResourceType(
    group=DISCOVERY_GROUP, version="v1", plural="endpointslices", kind="EndpointSlice", namespaced=True
)
"""The backends of Services without a selector (manual and headless Services)."""
LEASES = ResourceType(
    group="coordination.k8s.io", version="v1", plural="leases", kind="Lease", namespaced=True
)
"""The controller's leader election (not in `BUILTIN_RESOURCES`: no node reads it)."""


def _gateway(version: str, plural: str, kind: str, *, namespaced: bool = True) -> ResourceType:
    return ResourceType(
        group=GATEWAY_API_GROUP, version=version, plural=plural, kind=kind, namespaced=namespaced
    )


GATEWAY_CLASSES = _gateway("v1", "gatewayclasses", "GatewayClass", namespaced=False)
GATEWAYS = _gateway("v1", "gateways", "Gateway")
HTTP_ROUTES = _gateway("v1", "httproutes", "HTTPRoute")
GRPC_ROUTES = _gateway("v1", "grpcroutes", "GRPCRoute")
REFERENCE_GRANTS = _gateway("v1beta1", "referencegrants", "ReferenceGrant")
TCP_ROUTES = _gateway("v1alpha2", "tcproutes", "TCPRoute")
TLS_ROUTES = _gateway("v1alpha2", "tlsroutes", "TLSRoute")
UDP_ROUTES = _gateway("v1alpha2", "udproutes", "UDPRoute")

BUILTIN_RESOURCES: tuple[ResourceType, ...] = (
    PODS,
    NODES,
    SERVICES,
    SECRETS,
    NAMESPACES,
    ENDPOINT_SLICES,
    GATEWAY_CLASSES,
    _gateway("v1beta1", "gatewayclasses", "GatewayClass", namespaced=False),
    GATEWAYS,
    _gateway("v1beta1", "gateways", "Gateway"),
    HTTP_ROUTES,
    _gateway("v1beta1", "httproutes", "HTTPRoute"),
    GRPC_ROUTES,
    _gateway("v1alpha2", "grpcroutes", "GRPCRoute"),
    REFERENCE_GRANTS,
    _gateway("v1alpha2", "referencegrants", "ReferenceGrant"),
    TCP_ROUTES,
    TLS_ROUTES,
    UDP_ROUTES,
)
"""Every served version of every kind the mesh reads (the Gateway API's CRDs serve some kinds at two versions,
from one storage: an object created at v1 is listed at v1beta1 too, with its `apiVersion` rewritten)."""


def object_key(obj: JsonObject) -> str:
    """Return `<namespace>/<name>` (or `<name>` for cluster-scoped objects): the store's key, and the sort order."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace") or ""
    name = metadata.get("name") or ""
    return f"{namespace}/{name}" if namespace else str(name)


def resource_version_of(obj: JsonObject) -> str:
    """Return the object's `metadata.resourceVersion` (empty when absent): an opaque token, compared for equality."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
