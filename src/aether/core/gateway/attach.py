"""Attaching a route to its parents: a Gateway's listeners (sectionName, port, allowedRoutes, hostnames) or a
Service (GAMMA), with the Accepted reason the API gives when it cannot attach.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from aether.core.gateway.contract import EDGE_CONTROLLER, MESH_CONTROLLER
from aether.core.gateway.entries import Entry
from aether.core.gateway.hostnames import intersect
from aether.core.gateway.listeners import ListenerState
from aether.core.gateway.model.gateways import AllowedRoutes
from aether.core.gateway.model.refs import ParentRef
from aether.core.gateway.model.routes import TCP_ROUTE, UDP_ROUTE, Route
from aether.core.gateway.resolve import Backend, Resolver
from aether.core.gateway.status import (
    NO_MATCHING_LISTENER_HOSTNAME,
    NO_MATCHING_PARENT,
    NOT_ALLOWED_BY_LISTENERS,
    UNSUPPORTED_VALUE,
)


@attrs.frozen(kw_only=True)
class Attached:
    """A listener a route attached to, and the hostnames it serves there."""

    state: ListenerState
    hosts: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ParentResult:
    """What became of one parentRef."""

    ref: ParentRef
    controller: str
    reason: str = ""
    """Empty when accepted; else `NoMatchingParent`, `NotAllowedByListeners` or `NoMatchingListenerHostname`."""
    message: str = ""
    listeners: tuple[Attached, ...] = ()
    service: str = ""
    """The mesh service of a Service parent."""
    address: str = ""
    """The ClusterIP of a Service parent of an L4 route (TCPRoute, TLSRoute, UDPRoute)."""
    ports: tuple[int, ...] = ()
    """The Service ports an L4 route forwards on: the parentRef's port, or every TCP (for a UDPRoute: UDP) port of
    the Service. For an HTTP or gRPC route whose parentRef names a port: every port of the Service (a Host without
    a port names the route's port when it is the Service's only one)."""

    @property
    def accepted(self) -> bool:
        """True when the route attached to this parent."""
        return not self.reason


def _selected(allowed: AllowedRoutes, labels: Mapping[str, str]) -> bool:
    """True when a namespace selector selects the Namespace whose labels are `labels`."""
    if any(labels.get(key) != value for key, value in allowed.match_labels):
        return False
    for requirement in allowed.match_expressions:
        present = requirement.key in labels
        value = labels.get(requirement.key, "")
        holds = {
            "In": present and value in requirement.values,
            "NotIn": not (present and value in requirement.values),
            "Exists": present,
            "DoesNotExist": not present,
        }[requirement.operator]
        if not holds:
            return False
    return True


def namespace_allowed(state: ListenerState, namespace: str, *, labels: Mapping[str, str]) -> bool:
    """True when the listener's `allowedRoutes.namespaces` admits routes from `namespace`, whose Namespace has
    `labels` (a selector matches them)."""
    allowed = state.listener.allowed
    if allowed.namespaces == "All":
        return True
    if allowed.namespaces == "Same":
        return namespace == state.gateway.meta.namespace
    return _selected(allowed, labels)


def attach_to_gateway(
    route: Route,
    ref: ParentRef,
    listeners: Sequence[ListenerState],
    *,
    namespace_labels: Mapping[str, str],
) -> ParentResult:
    """Attach `route` to the listeners of one Gateway (all of them, sorted in listener order); `namespace_labels`
    are the labels of the route's Namespace (what listener namespace selectors match)."""
    named = [
        state
        for state in listeners
        if (not ref.section_name or state.listener.name == ref.section_name)
        and (not ref.port or state.listener.port == ref.port)
    ]
    if not named:
        wanted = " ".join(
            part
            for part in (
                f"sectionName {ref.section_name!r}" if ref.section_name else "",
                f"port {ref.port}" if ref.port else "",
            )
            if part
        )
        return ParentResult(
            ref=ref,
            controller=EDGE_CONTROLLER,
            reason=NO_MATCHING_PARENT,
            message=f"Gateway {ref.namespace}/{ref.name} has no listener with {wanted}",
        )
    allowed = [
        state
        for state in named
        if state.usable
        and route.kind in state.kinds
        and namespace_allowed(state, route.meta.namespace, labels=namespace_labels)
    ]
    if not allowed:
        return ParentResult(
            ref=ref,
            controller=EDGE_CONTROLLER,
            reason=NOT_ALLOWED_BY_LISTENERS,
            message=(
                f"no listener of Gateway {ref.namespace}/{ref.name} that the reference names accepts "
                f"{route.kind}s from namespace {route.meta.namespace!r}"
            ),
        )
    attached = []
    for state in allowed:
        if route.kind in (TCP_ROUTE, UDP_ROUTE):
            attached.append(Attached(state=state, hosts=()))
            continue
        hosts = intersect(state.listener.hostname, route.hostnames)
        if hosts:
            attached.append(Attached(state=state, hosts=hosts))
    if not attached:
        return ParentResult(
            ref=ref,
            controller=EDGE_CONTROLLER,
            reason=NO_MATCHING_LISTENER_HOSTNAME,
            message=f"no hostname of the route {list(route.hostnames)} matches a listener hostname of Gateway {ref.namespace}/{ref.name}",
        )
    return ParentResult(ref=ref, controller=EDGE_CONTROLLER, listeners=tuple(attached))


def _mesh_parent(ref: ParentRef, resolver: Resolver) -> ParentResult:
    """Attach a GAMMA route to the mesh service behind a Service parent (any port)."""
    service = resolver.mesh_service(ref.namespace, ref.name)
    if service is None:
        return ParentResult(
            ref=ref,
            controller=MESH_CONTROLLER,
            reason=NO_MATCHING_PARENT,
            message=f"Service {ref.namespace}/{ref.name} not found",
        )
    return ParentResult(ref=ref, controller=MESH_CONTROLLER, service=service)


def attach_to_service(ref: ParentRef, resolver: Resolver) -> ParentResult:
    """Attach a GAMMA HTTPRoute or GRPCRoute to the mesh service behind a Service parent; a parentRef port must be
    one of the Service's (the route then applies to that port only)."""
    result = _mesh_parent(ref, resolver)
    kube = resolver.kube_service(ref.namespace, ref.name)
    if (
        result.accepted
        and ref.port
        and kube is not None
        and all(item.port != ref.port for item in kube.ports)
    ):
        return attrs.evolve(
            result,
            reason=NO_MATCHING_PARENT,
            message=(
                f"Service {ref.namespace}/{ref.name} has no port {ref.port} "
                f"(it has {sorted(item.port for item in kube.ports)})"
            ),
        )
    if result.accepted and ref.port and kube is not None:
        return attrs.evolve(result, ports=tuple(sorted({item.port for item in kube.ports})))
    return result


def attach_l4_to_service(ref: ParentRef, resolver: Resolver, *, protocol: str = "TCP") -> ParentResult:
    """Attach a GAMMA TCPRoute or TLSRoute (`protocol` TCP) or UDPRoute (UDP): the mesh service behind the Service,
    and where its clients send.

    The node tells an L4 route's connections (or datagrams) apart only by their original destination, so the
    Service needs a ClusterIP (a headless one has none: its clients dial pod IPs) and a port of `protocol`.
    """
    result = _mesh_parent(ref, resolver)
    kube = resolver.kube_service(ref.namespace, ref.name)
    if not result.accepted or kube is None:
        return result
    where = f"Service {ref.namespace}/{ref.name}"
    if not kube.cluster_ip or kube.cluster_ip == "None":
        return attrs.evolve(
            result,
            reason=UNSUPPORTED_VALUE,
            message=(
                f"{where} has no ClusterIP (headless, or not allocated yet): L4 routes match connections by the "
                "ClusterIP they were sent to; give the Service a ClusterIP"
            ),
        )
    ports = sorted({port.port for port in kube.ports if port.protocol == protocol})
    if ref.port:
        ports = [ref.port] if ref.port in ports else []
    if not ports:
        wanted = f"{protocol} port {ref.port}" if ref.port else f"{protocol} port"
        return attrs.evolve(result, reason=NO_MATCHING_PARENT, message=f"{where} has no {wanted}")
    return attrs.evolve(result, address=kube.cluster_ip, ports=tuple(ports))


@attrs.frozen(kw_only=True)
class Resolved:
    """A route with its parents attached and its backends resolved: what both directions build on."""

    route: Route
    parents: tuple[ParentResult, ...]
    backends: tuple[tuple[Backend, ...], ...]
    """Per rule, its backendRefs resolved."""
    mirrors: tuple[tuple[Backend, ...], ...]
    """Per rule, its mirrors' backendRefs resolved."""
    problems: tuple[str, ...]
    """Rules that cannot be served (an invalid regex) or answer 500 (an unsupported filter), described."""
    refused: tuple[str, ...] = ()
    """backendRefs whose own filters cannot apply to one backend (a redirect, rewrite or mirror), described: their
    share answers 500, and the route is not Accepted (the API's rule for a filter the implementation cannot do)."""

    def entries(
        self, *, host: str = "", listener_port: int = 0, listener_scheme: str = "", caller_namespace: str = ""
    ) -> list[Entry]:
        """Return an entry per match of every working rule, matched through route hostname `host` on an edge
        listener of `listener_port` serving `listener_scheme` (both left out for the mesh), for the callers of
        `caller_namespace` only when given (a GAMMA consumer route)."""
        return [
            Entry(
                route=self.route,
                rule=rule,
                match_index=index,
                backends=self.backends[rule.index],
                mirrors=self.mirrors[rule.index],
                host=host,
                listener_port=listener_port,
                listener_scheme=listener_scheme,
                caller_namespace=caller_namespace,
            )
            for rule in self.route.rules
            if not rule.problem
            for index in range(len(rule.matches))
        ]

    working: bool = attrs.field(init=False, eq=False)
    """True when at least one rule can be served."""

    @working.default
    def _working(self) -> bool:
        return any(not rule.problem for rule in self.route.rules)
