"""The discovery documents of the test Kubernetes API server (`/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`),
as kubectl reads them, and the built-in kinds an install of `manifests/` creates.

kubectl 1.32 asks for aggregated discovery first (`Accept: application/json;g=apidiscovery.k8s.io;v=v2;...`) and
falls back to these legacy documents when the answer is plain `application/json`, as an older server's is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from aether.kube.resources import BUILTIN_RESOURCES, JsonObject, ResourceType

__all__ = [
    "INSTALL_RESOURCES",
    "SERVED_VERBS",
    "api_versions",
    "group_list",
    "resource_list",
    "served_resources",
]

SERVED_VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")
"""What the test server answers for every kind (`aether.testing.kubewrites` and the list/watch of `kubeapi`)."""


def _kind(group: str, version: str, plural: str, kind: str, *, namespaced: bool) -> ResourceType:
    return ResourceType(group=group, version=version, plural=plural, kind=kind, namespaced=namespaced)


INSTALL_RESOURCES: tuple[ResourceType, ...] = (
    _kind("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True),
    _kind("", "v1", "configmaps", "ConfigMap", namespaced=True),
    _kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", namespaced=True),
    _kind("apps", "v1", "daemonsets", "DaemonSet", namespaced=True),
    _kind("apps", "v1", "deployments", "Deployment", namespaced=True),
    _kind("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    _kind("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
    _kind("rbac.authorization.k8s.io", "v1", "roles", "Role", namespaced=True),
    _kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", namespaced=True),
    _kind(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
    ),
    _kind(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        namespaced=False,
    ),
    _kind(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        namespaced=False,
    ),
    _kind("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True),
    # The mesh's own CRDs (manifests/base/crds): served as the API server serves a CRD once it is established.
    _kind("config.aether.io", "v1", "meshconfigs", "MeshConfig", namespaced=True),
    _kind("config.aether.io", "v1", "edgeconfigs", "EdgeConfig", namespaced=True),
)
"""The built-in kinds `kubectl apply -k manifests/overlays/...` creates (or the roles will use) beyond the mesh's
own table (`aether.kube.resources.BUILTIN_RESOURCES`): serve both to install the mesh."""

_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def _priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version order, highest first when sorted: GA, then beta, then alpha; larger numbers first."""
    match = _VERSION.match(version)
    if match is None:
        return (3, 0, 0)
    major, level, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[level]
    return (rank, -int(major), -int(minor or 0))


def api_versions(*, address: str) -> JsonObject:
    """`GET /api`: the core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def group_list(resources: Iterable[ResourceType]) -> JsonObject:
    """`GET /apis`: every named group with its versions, the preferred (highest-priority) one first."""
    versions: dict[str, set[str]] = {}
    for resource in resources:
        if resource.group:
            versions.setdefault(resource.group, set()).add(resource.version)
    groups = []
    for group, served in sorted(versions.items()):
        ordered = [
            {"groupVersion": f"{group}/{version}", "version": version}
            for version in sorted(served, key=_priority)
        ]
        groups.append({"name": group, "versions": ordered, "preferredVersion": ordered[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def resource_list(resources: Iterable[ResourceType], *, group: str, version: str) -> JsonObject | None:
    """`GET /api/v1` or `/apis/<group>/<version>`: the kinds served there and their status subresources; None
    when nothing is served at that group and version (the server answers 404)."""
    served = sorted(
        (resource for resource in resources if (resource.group, resource.version) == (group, version)),
        key=lambda resource: resource.plural,
    )
    if not served:
        return None
    entries: list[JsonObject] = []
    for resource in served:
        common = {
            "singularName": resource.kind.lower(),
            "namespaced": resource.namespaced,
            "kind": resource.kind,
        }
        entries.append({"name": resource.plural, **common, "verbs": list(SERVED_VERBS)})
        entries.append({"name": f"{resource.plural}/status", **common, "verbs": ["get", "patch", "update"]})
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def served_resources(extra: Iterable[ResourceType] = INSTALL_RESOURCES) -> tuple[ResourceType, ...]:
    """The mesh's kinds and `extra`: what the standalone server serves."""
    return (*BUILTIN_RESOURCES, *extra)
