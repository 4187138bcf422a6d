"""Resolving references: a backendRef or a Service parentRef to the mesh service behind it, under ReferenceGrants.

A Kubernetes Service stands for the mesh service (`<ns>/<serviceAccount>`) of the pods it selects (DESIGN.md
section 4): that service account is the identity its pods present (SPIFFE ID, SAN pinning). A node's state holds
only some pods, so when the selector picks none the Service's own name is taken as the service account: a Service
named like its service account resolves to it directly. Pods of several accounts behind one Service resolve to the
first account in sorted order (one Service, one identity is the supported shape).

Routing follows the Service's selection, not the identity: a resolved backend carries its Service's selector, and
its traffic goes only to the endpoints of the service account whose pod labels match it (registry endpoints carry
their pod's labels). So Services whose pods share an account (every pod as `default`, or a canary's v1 and v2
Services) each reach their own pods.

A Service without a selector (a "manual" Service whose EndpointSlices a user writes, or a headless one) selects no
pods: its backendRef resolves to the slice cluster of its port (`slices:<service>.<ns>:<port>`, `Backend.cluster`),
whose endpoints are its EndpointSlices' ready addresses (`aether.core.project.slices`). Its mesh service stays the
account of its name (what a Service parentRef of it routes for).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
import immutables

from aether.core.events.kube import KubeNamespace, KubeService
from aether.core.events.registry import Protocol
from aether.core.gateway.model.gateways import NAMESPACE_NAME_LABEL
from aether.core.gateway.model.grants import ReferenceGrant
from aether.core.gateway.model.refs import CORE_GROUP, GATEWAY_GROUP, BackendRef
from aether.core.mesh_names import http_cluster_name, slice_cluster_name
from aether.core.state.pods import PodRecord

BACKEND_NOT_FOUND = "BackendNotFound"
REF_NOT_PERMITTED = "RefNotPermitted"
INVALID_KIND = "InvalidKind"
UNSUPPORTED_PROTOCOL = "UnsupportedProtocol"
_NO_NAMESPACES: Mapping[str, KubeNamespace] = immutables.Map()


@attrs.frozen(kw_only=True, cache_hash=True)
class Backend:
    """A backendRef resolved: the mesh service behind it, or why there is none."""

    ref: BackendRef
    service: str = ""
    """The mesh service `<ns>/<sa>`; empty when unresolved."""
    selector: tuple[tuple[str, str], ...] = ()
    """The Service's selector, sorted by label: the endpoints of `service` its traffic may reach (empty: all)."""
    cluster: str = ""
    """The cluster of a Service without a selector (`slices:<service>.<ns>:<port>`: its EndpointSlices); empty:
    the cluster of `service`."""
    reason: str = ""
    """`BackendNotFound`, `RefNotPermitted` or `InvalidKind` when unresolved."""
    message: str = ""

    def cluster_name(self, *, mesh_domain: str) -> str:
        """Return the HTTP cluster the backend's traffic goes to: `cluster`, or the mesh service's own."""
        return self.cluster or http_cluster_name(self.service, mesh_domain=mesh_domain)


class Resolver:
    """Resolves Services and backendRefs against one state's Services, pods and grants (pure; built per view)."""

    def __init__(
        self,
        *,
        services: Mapping[str, KubeService],
        pods: Iterable[PodRecord],
        grants: Iterable[ReferenceGrant],
        namespaces: Mapping[str, KubeNamespace] = _NO_NAMESPACES,
    ) -> None:
        self._services = services
        self._namespaces = namespaces
        self._pods: dict[str, list[PodRecord]] = {}
        for record in pods:
            self._pods.setdefault(record.pod.namespace, []).append(record)
        self._grants: dict[str, list[ReferenceGrant]] = {}
        for grant in grants:
            self._grants.setdefault(grant.meta.namespace, []).append(grant)
        self._accounts: dict[str, str | None] = {}
        self._backends: dict[tuple[BackendRef, str, str, frozenset[tuple[str, str]]], Backend] = {}
        """Each backendRef resolved (a function of it and these inputs; routes repeat the same references)."""

    def mesh_service(self, namespace: str, name: str) -> str | None:
        """Return the mesh service of the Service `namespace/name`, or None when no such Service exists."""
        key = f"Service/{namespace}/{name}"
        if key in self._accounts:
            return self._accounts[key]
        service = self._services.get(key)
        account: str | None = None
        if service is not None:
            selector = dict(service.selector)
            accounts = sorted(
                {
                    record.pod.service_account
                    for record in self._pods.get(namespace, ())
                    if selector
                    and all(record.pod.labels.get(label) == value for label, value in selector.items())
                }
            )
            account = f"{namespace}/{accounts[0] if accounts else name}"
        self._accounts[key] = account
        return account

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """Return the labels of Namespace `namespace`; only `kubernetes.io/metadata.name` (which the API server
        sets on every Namespace) when the Namespace is not known."""
        known = self._namespaces.get(f"Namespace//{namespace}")
        if known is None:
            return {NAMESPACE_NAME_LABEL: namespace}
        return {**known.labels, NAMESPACE_NAME_LABEL: namespace}

    @property
    def services(self) -> Mapping[str, KubeService]:
        """The Kubernetes Services resolved against, by key `Service/<ns>/<name>`."""
        return self._services

    def kube_service(self, namespace: str, name: str) -> KubeService | None:
        """Return the Kubernetes Service `namespace/name`, or None."""
        return self._services.get(f"Service/{namespace}/{name}")

    def tcp_backend(self, backend: Backend) -> Backend:
        """Return `backend` as the backend of a GAMMA TCPRoute or TLSRoute: unresolved unless it speaks TCP.

        Its connections go to the service's `tcp:` cluster, which only TCP endpoints serve. The state knows the
        protocol of its own pods only (`endpoint.aether.io/protocol`): a service whose known pods are all HTTP
        is refused (`UnsupportedProtocol`); one without a known pod (elsewhere in the cluster) is taken as TCP,
        and the node gives it a `tcp:` cluster either way.
        """
        known = [
            record
            for record in self._pods.get(backend.ref.namespace, ())
            if record.service == backend.service
        ]
        if (
            not backend.service
            or not known
            or any(record.config.protocol == Protocol.TCP for record in known)
        ):
            return backend
        return Backend(
            ref=backend.ref,
            reason=UNSUPPORTED_PROTOCOL,
            message=(
                f"backendRef {backend.ref.key}: mesh service {backend.service} does not speak TCP (no pod of it "
                "has endpoint.aether.io/protocol: tcp), so no tcp: cluster serves it"
            ),
        )

    def permitted(
        self,
        *,
        from_kind: str,
        from_namespace: str,
        to_group: str,
        to_kind: str,
        to_namespace: str,
        to_name: str,
    ) -> bool:
        """True when a reference may cross from `from_namespace` to `to_namespace` (same namespace, or a grant)."""
        if from_namespace == to_namespace:
            return True
        return any(
            grant.permits(
                group=GATEWAY_GROUP,
                kind=from_kind,
                namespace=from_namespace,
                to_group=to_group,
                to_kind=to_kind,
                to_name=to_name,
            )
            for grant in self._grants.get(to_namespace, ())
        )

    def backend(
        self,
        ref: BackendRef,
        *,
        route_kind: str,
        route_namespace: str,
        parents: frozenset[tuple[str, str]] = frozenset(),
    ) -> Backend:
        """Resolve one backendRef of a route of `route_kind` in `route_namespace`.

        `parents` are the `(namespace, name)` of the route's Service parents: a GAMMA consumer route (in the
        caller's namespace) refers to the Service it routes without a ReferenceGrant (GEP-1294).
        """
        key = (ref, route_kind, route_namespace, parents)
        held = self._backends.get(key)
        if held is None:
            held = self._backends[key] = self._backend(
                ref, route_kind=route_kind, route_namespace=route_namespace, parents=parents
            )
        return held

    def _backend(
        self, ref: BackendRef, *, route_kind: str, route_namespace: str, parents: frozenset[tuple[str, str]]
    ) -> Backend:
        if not ref.is_service:
            return Backend(
                ref=ref,
                reason=INVALID_KIND,
                message=f"backendRef {ref.key}: only core Services are supported (got group {ref.group!r}, kind {ref.kind!r})",
            )
        if (ref.namespace, ref.name) not in parents and not self.permitted(
            from_kind=route_kind,
            from_namespace=route_namespace,
            to_group=CORE_GROUP,
            to_kind="Service",
            to_namespace=ref.namespace,
            to_name=ref.name,
        ):
            return Backend(
                ref=ref,
                reason=REF_NOT_PERMITTED,
                message=(
                    f"backendRef {ref.key}: no ReferenceGrant in namespace {ref.namespace!r} allows {route_kind}s "
                    f"from {route_namespace!r} to refer to it"
                ),
            )
        service = self.mesh_service(ref.namespace, ref.name)
        if service is None:
            return Backend(
                ref=ref, reason=BACKEND_NOT_FOUND, message=f"backendRef {ref.key}: Service not found"
            )
        kube = self._services[f"Service/{ref.namespace}/{ref.name}"]
        if not kube.selector:
            return self._slice_backend(ref, kube, service)
        return Backend(ref=ref, service=service, selector=tuple(sorted(kube.selector.items())))

    @staticmethod
    def _slice_backend(ref: BackendRef, kube: KubeService, service: str) -> Backend:
        """Resolve a backendRef to Service `kube`, which has no selector, to the slice cluster of its port (the
        Service's only port when the reference names none)."""
        ports = [item.port for item in kube.ports]
        port = ref.port or (ports[0] if len(ports) == 1 else 0)
        if port not in ports:
            named = f"port {ref.port}" if ref.port else "no port"
            return Backend(
                ref=ref,
                reason=BACKEND_NOT_FOUND,
                message=(
                    f"backendRef {ref.key}: names {named}, but the Service (without a selector: its "
                    f"EndpointSlices are its backends) has ports {ports}; name one of them"
                ),
            )
        cluster = slice_cluster_name(ref.namespace, ref.name, port=port)
        return Backend(ref=ref, service=service, cluster=cluster)
