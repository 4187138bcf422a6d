"""What each role reads from the Kubernetes API: the one table its watches are built from and its RBAC is checked by.

A role's watches are `WatchQuery`s over the resources of its row (`aether.agent.kube_source`,
`aether.registrar.backends.kubernetes`); `tests/manifests/test_rbac.py` checks that the ClusterRoles of
`manifests/` grant each role's ServiceAccount exactly `rules()` of its row, nothing more and nothing less.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from aether.kube.resources import (
    GATEWAY_CLASSES,
    GATEWAYS,
    GRPC_ROUTES,
    HTTP_ROUTES,
    NODES,
    PODS,
    REFERENCE_GRANTS,
    SERVICES,
    TCP_ROUTES,
    TLS_ROUTES,
    UDP_ROUTES,
    ResourceType,
)

__all__ = [
    "AGENT_ACCESS",
    "MESH_RESOURCES",
    "REGISTRAR_KUBERNETES_ACCESS",
    "ROLE_ACCESS",
    "WATCH_VERBS",
    "RoleAccess",
    "Rule",
]

WATCH_VERBS = ("list", "watch")
"""What a reflector (`aether.kube.watch.Reflector`) asks for: a paged list, then a watch from its resourceVersion."""


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

    def rules(self) -> tuple[Rule, ...]:
        """The RBAC rules granting exactly the watches: one per API group, in group order."""
        groups: dict[str, set[str]] = {}
        for resource in self.watches:
            groups.setdefault(resource.group, set()).add(resource.plural)
        return tuple(
            Rule(api_group=group, resources=tuple(sorted(plurals)), verbs=WATCH_VERBS)
            for group, plurals in sorted(groups.items())
        )


MESH_RESOURCES: tuple[ResourceType, ...] = (
    SERVICES,
    GATEWAY_CLASSES,
    GATEWAYS,
    HTTP_ROUTES,
    GRPC_ROUTES,
    TCP_ROUTES,
    TLS_ROUTES,
    UDP_ROUTES,
    REFERENCE_GRANTS,
)
"""What every node reads: Services (backendRefs), the Gateway API's routes and gateways, and ReferenceGrants."""

AGENT_ACCESS = RoleAccess(role="agent", service_account="aether-agent", watches=(*MESH_RESOURCES, PODS))
"""`aether agent`: the mesh's objects, and the meshed pods of its node (a field selector; RBAC cannot narrow a
list to one node, so the grant is every pod)."""

REGISTRAR_KUBERNETES_ACCESS = RoleAccess(
    role="registrar", service_account="aether-registrar", watches=(PODS, NODES)
)
"""`aether registrar --backend kubernetes`: the meshed pods and the nodes they run on. The embedded and etcd
backends read nothing from the API."""

ROLE_ACCESS: Mapping[str, RoleAccess] = {
    access.service_account: access for access in (AGENT_ACCESS, REGISTRAR_KUBERNETES_ACCESS)
}
"""By ServiceAccount. The other roles read nothing from the API: `aether edge` reads its Gateway API objects from a
manifest directory, `aether mesh-dns` the agent's record file, and `aether controller` does not exist yet."""
