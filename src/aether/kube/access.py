"""What each role reads from the Kubernetes API: the one table its watches are built from and its RBAC is checked by.

A role's watches are `WatchQuery`s over the resources of its row (`aether.kube.source`,
`aether.registrar.backends.kubernetes`); `tests/manifests/test_rbac.py` checks that the ClusterRoles of
`manifests/` grant each role's ServiceAccount exactly `rules()` of its row, nothing more and nothing less.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from aether.kube.convert import TLS_SECRET_TYPE
from aether.kube.endpoints import MANAGED_SELECTOR
from aether.kube.mesh_config import CONFIG_MAPS, MESH_CONFIGS
from aether.kube.resources import (
    ENDPOINT_SLICES,
    GATEWAY_CLASSES,
    GATEWAYS,
    GRPC_ROUTES,
    HTTP_ROUTES,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    REFERENCE_GRANTS,
    SECRETS,
    SERVICES,
    TCP_ROUTES,
    TLS_ROUTES,
    UDP_ROUTES,
    ResourceType,
)
from aether.kube.watch import WatchQuery

__all__ = [
    "AGENT_ACCESS",
    "CONTROLLER_ACCESS",
    "CONTROLLER_NAMESPACE",
    "CONTROLLER_QUERIES",
    "EDGE_ACCESS",
    "EDGE_QUERIES",
    "LEASE_VERBS",
    "MESH_RESOURCES",
    "MUTATING_WEBHOOK_CONFIGURATIONS",
    "REGISTRAR_KUBERNETES_ACCESS",
    "ROLE_ACCESS",
    "STATUS_RESOURCES",
    "TLS_SECRETS_QUERY",
    "VALIDATING_WEBHOOK_CONFIGURATIONS",
    "WATCH_VERBS",
    "WEBHOOK_CONFIGURATION_VERBS",
    "RoleAccess",
    "Rule",
]

WATCH_VERBS = ("list", "watch")
"""What a reflector (`aether.kube.watch.Reflector`) asks for: a paged list, then a watch from its resourceVersion."""
STATUS_VERBS = ("update",)
"""What a status writer asks for on `<plural>/status`: a PUT conditional on the resourceVersion."""
LEASE_VERBS = ("create", "get", "update")
"""What leader election asks for on its Lease: read it, create it once, replace it (acquire, renew)."""
WEBHOOK_CONFIGURATION_VERBS = ("get", "update")
"""What the controller asks for on its webhook configurations: read them, replace them with the caBundle set."""
VALIDATING_WEBHOOK_CONFIGURATIONS = ResourceType(
    group="admissionregistration.k8s.io",
    version="v1",
    plural="validatingwebhookconfigurations",
    kind="ValidatingWebhookConfiguration",
    namespaced=False,
)
MUTATING_WEBHOOK_CONFIGURATIONS = ResourceType(
    group="admissionregistration.k8s.io",
    version="v1",
    plural="mutatingwebhookconfigurations",
    kind="MutatingWebhookConfiguration",
    namespaced=False,
)
"""What leader election asks for on its Lease: read it, create it once, replace it (acquire, renew)."""


@attrs.frozen(kw_only=True)
class Rule:
    """One RBAC PolicyRule: the verbs on some resources of one API group (as a ClusterRole spells it)."""

    api_group: str
    """The API group, "" for the core group."""
    resources: tuple[str, ...]
    """Plural resource names, sorted."""
    verbs: tuple[str, ...]


@attrs.frozen(kw_only=True)
class RoleAccess:
    """What one role of `aether` reads from the API, cluster-wide."""

    role: str
    """The role's name, as `aether <role>` spells it."""
    service_account: str
    """The ServiceAccount the role runs as in `manifests/`."""
    watches: tuple[ResourceType, ...]
    """The resources the role lists and watches (every namespace: `WATCH_VERBS`)."""
    status_writes: tuple[ResourceType, ...] = ()
    """The resources whose status the role writes (every namespace): `get` of the object (the re-read after a 409)
    and `update` of `<plural>/status`."""
    namespaced: tuple[tuple[str, ResourceType, tuple[str, ...]], ...] = ()
    """`(namespace, resource, verbs)`: what the role does in one namespace only (a Role, not a ClusterRole)."""
    cluster: tuple[tuple[ResourceType, tuple[str, ...]], ...] = ()
    """`(resource, verbs)`: further cluster-wide grants (the manifest narrows them with resourceNames)."""

    def rules(self) -> tuple[Rule, ...]:
        """The ClusterRole's rules granting exactly the watches and status writes, in group order."""
        found = _grouped(self.watches, WATCH_VERBS)
        found += _grouped(self.status_writes, ("get",))
        found += _grouped(self.status_writes, STATUS_VERBS, subresource="status")
        for resource, verbs in self.cluster:
            found += _grouped((resource,), verbs)
        return tuple(sorted(found, key=lambda rule: (rule.api_group, rule.verbs, rule.resources)))

    def namespace_rules(self) -> dict[str, tuple[Rule, ...]]:
        """By namespace, the Role's rules granting exactly `namespaced`."""
        found: dict[str, list[Rule]] = {}
        for namespace, resource, verbs in self.namespaced:
            found.setdefault(namespace, []).append(
                Rule(api_group=resource.group, resources=(resource.plural,), verbs=verbs)
            )
        return {namespace: tuple(rules) for namespace, rules in sorted(found.items())}


def _grouped(
    resources: tuple[ResourceType, ...], verbs: tuple[str, ...], *, subresource: str = ""
) -> list[Rule]:
    groups: dict[str, set[str]] = {}
    for resource in resources:
        groups.setdefault(resource.group, set()).add(
            f"{resource.plural}/{subresource}" if subresource else resource.plural
        )
    return [
        Rule(api_group=group, resources=tuple(sorted(plurals)), verbs=verbs)
        for group, plurals in sorted(groups.items())
    ]


MESH_RESOURCES: tuple[ResourceType, ...] = (
    SERVICES,
    ENDPOINT_SLICES,
    GATEWAY_CLASSES,
    GATEWAYS,
    HTTP_ROUTES,
    GRPC_ROUTES,
    TCP_ROUTES,
    TLS_ROUTES,
    UDP_ROUTES,
    REFERENCE_GRANTS,
)
"""What every node reads: Services (backendRefs) and EndpointSlices (the backends of a Service without a selector),
the Gateway API's routes and gateways, and ReferenceGrants."""

AGENT_ACCESS = RoleAccess(role="agent", service_account="aether-agent", watches=(*MESH_RESOURCES, PODS))
"""`aether agent`: the mesh's objects, and the meshed pods of its node (a field selector; RBAC cannot narrow a
list to one node, so the grant is every pod)."""

REGISTRAR_KUBERNETES_ACCESS = RoleAccess(
    role="registrar", service_account="aether-registrar", watches=(PODS, NODES)
)
"""`aether registrar --backend kubernetes`: the meshed pods and the nodes they run on. The embedded and etcd
backends read nothing from the API."""

STATUS_RESOURCES: tuple[ResourceType, ...] = (
    GATEWAY_CLASSES,
    GATEWAYS,
    HTTP_ROUTES,
    GRPC_ROUTES,
    TCP_ROUTES,
    TLS_ROUTES,
    UDP_ROUTES,
)
"""The Gateway API kinds whose status the controller writes."""

CONTROLLER_NAMESPACE = "aether-system"
"""Where the controller's Lease lives (its own namespace)."""

TLS_SECRETS_QUERY = WatchQuery(resource=SECRETS, field_selector=f"type={TLS_SECRET_TYPE}")
"""The TLS Secrets, every namespace: what a Gateway listener's certificateRefs may name. RBAC cannot narrow a list to
one Secret type (nor to the Secrets some listener references), so the grant is every Secret; the field selector keeps
the others off the wire."""

CONTROLLER_QUERIES: tuple[WatchQuery, ...] = (
    *(WatchQuery(resource=resource) for resource in MESH_RESOURCES),
    WatchQuery(resource=PODS, label_selector=MANAGED_SELECTOR),
    TLS_SECRETS_QUERY,
    WatchQuery(resource=NAMESPACES),
)
"""What the controller folds: what every node reads, every meshed pod (a Service's backends are the service
account of the pods it selects), and the TLS Secrets (a Gateway listener's certificateRefs decide its ResolvedRefs
and Programmed conditions; without them every HTTPS listener would be reported InvalidCertificateRef). RBAC cannot
narrow a list to one Secret type: `TLS_SECRETS_QUERY`), and the Namespaces (their labels decide which routes a listener's `allowedRoutes.namespaces.selector` admits)."""

CONTROLLER_ACCESS = RoleAccess(
    role="controller",
    service_account="aether-controller",
    watches=(*(query.resource for query in CONTROLLER_QUERIES), MESH_CONFIGS, CONFIG_MAPS),
    status_writes=STATUS_RESOURCES,
    namespaced=(
        (CONTROLLER_NAMESPACE, LEASES, LEASE_VERBS),
        (CONTROLLER_NAMESPACE, PODS, ("get",)),
        (CONTROLLER_NAMESPACE, SECRETS, ("create", "get")),
    ),
    cluster=(
        (CONFIG_MAPS, ("create", "update")),
        (VALIDATING_WEBHOOK_CONFIGURATIONS, WEBHOOK_CONFIGURATION_VERBS),
        (MUTATING_WEBHOOK_CONFIGURATIONS, WEBHOOK_CONFIGURATION_VERBS),
    ),
)
"""`aether controller`: the agent's reads cluster-wide, the Gateway API's status, and its Lease; the MeshConfigs and
the ConfigMaps it projects them into (every namespace that has one); for the webhooks,
its own pod (the init container's image), the serving certificate's Secret, and our two webhook configurations'
caBundle (get and update, narrowed by resourceNames in the manifest)."""

EDGE_QUERIES: tuple[WatchQuery, ...] = (
    *(WatchQuery(resource=resource) for resource in MESH_RESOURCES),
    TLS_SECRETS_QUERY,
    WatchQuery(resource=NAMESPACES),
)
"""What `aether edge --kube-api/--kubeconfig/--in-cluster` folds (`aether.kube.source`): what every node reads (the
GatewayClasses, every Gateway, their routes of the five kinds, Services and ReferenceGrants), the TLS Secrets (its
HTTPS and TLS listeners' certificates) and the Namespaces (`allowedRoutes.namespaces.selector`). The API cannot
select Gateways by class (`spec.gatewayClassName` is no field selector), so every Gateway is listed and the core's
gateway view keeps those of a class with controllerName `gateway.aether.io/edge`. No pods: endpoints come from the
registrar."""

EDGE_ACCESS = RoleAccess(
    role="edge",
    service_account="aether-edge",
    watches=tuple(query.resource for query in EDGE_QUERIES),
)
"""`aether edge` in a cluster: list and watch `EDGE_QUERIES`' resources cluster-wide, nothing else (each replica is
its own control plane: no Lease, no writes)."""

ROLE_ACCESS: Mapping[str, RoleAccess] = {
    access.service_account: access
    for access in (AGENT_ACCESS, REGISTRAR_KUBERNETES_ACCESS, CONTROLLER_ACCESS, EDGE_ACCESS)
}
"""By ServiceAccount. The other roles read nothing from the API: `aether mesh-dns` reads the agent's record file."""
