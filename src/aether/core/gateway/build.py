"""Building the Gateway API view: parse every object, check the edge's Gateways, attach routes to their parents,
order what attached by precedence, translate it to Envoy routes, and compute every object's status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
import immutables

from aether.core.events.kube import KubeObject
from aether.core.gateway import edge, mesh
from aether.core.gateway.attach import ParentResult, Resolved, attach_to_gateway, attach_to_service
from aether.core.gateway.contract import (
    EDGE_CONTROLLER,
    MESH_CONTROLLER,
    Condition,
    GatewayView,
    ObjectStatus,
    ParentStatus,
)
from aether.core.gateway.listeners import ListenerState, listener_states
from aether.core.gateway.model.gateways import (
    Gateway,
    GatewayClass,
    ObjectRejected,
    parse_gateway,
    parse_gateway_class,
)
from aether.core.gateway.model.grants import ReferenceGrant, parse_reference_grant
from aether.core.gateway.model.refs import ParentRef
from aether.core.gateway.model.routes import (
    GRPC_ROUTE,
    HTTP_ROUTE,
    ROUTE_KINDS,
    Route,
    RouteRejected,
    parse_route,
)
from aether.core.gateway.resolve import Resolver
from aether.core.gateway.status import (
    ACCEPTED,
    NO_MATCHING_PARENT,
    PARTIALLY_INVALID,
    PROGRAMMED,
    RESOLVED_REFS,
    TRUE,
    UNSUPPORTED_VALUE,
    condition,
)
from aether.core.order import sorted_items
from aether.core.state.state import State

MESH_ROUTE_KINDS = (HTTP_ROUTE, GRPC_ROUTE)
"""GAMMA kinds this projection routes; mesh TCP/TLS/UDP routes are reported as not supported yet."""


@attrs.frozen(kw_only=True)
class _Objects:
    classes: tuple[GatewayClass, ...]
    gateways: tuple[Gateway, ...]
    rejected: tuple[ObjectRejected, ...]
    routes: tuple[Route, ...]
    rejected_routes: tuple[RouteRejected, ...]


def _parse(objects: Mapping[str, KubeObject]) -> _Objects:
    classes: list[GatewayClass] = []
    gateways: list[Gateway] = []
    rejected: list[ObjectRejected] = []
    routes: list[Route] = []
    rejected_routes: list[RouteRejected] = []
    for _, item in sorted_items(objects):
        kind = item.meta.kind
        if kind == "GatewayClass":
            parsed_class = parse_gateway_class(item.meta, item.spec_json)
            (classes if isinstance(parsed_class, GatewayClass) else rejected).append(parsed_class)  # type: ignore[arg-type]
        elif kind == "Gateway":
            parsed_gateway = parse_gateway(item.meta, item.spec_json)
            (gateways if isinstance(parsed_gateway, Gateway) else rejected).append(parsed_gateway)  # type: ignore[arg-type]
        elif kind in ROUTE_KINDS:
            parsed = parse_route(kind, item.meta, item.spec_json)
            if isinstance(parsed, Route):
                routes.append(parsed)
            else:
                rejected_routes.append(parsed)
    routes.sort(key=lambda route: route.age)
    return _Objects(
        classes=tuple(classes),
        gateways=tuple(sorted(gateways, key=lambda gateway: gateway.age)),
        rejected=tuple(rejected),
        routes=tuple(routes),
        rejected_routes=tuple(rejected_routes),
    )


def _grants(objects: Mapping[str, KubeObject]) -> list[ReferenceGrant]:
    grants = (parse_reference_grant(item.meta, item.spec_json) for _, item in sorted_items(objects))
    return [grant for grant in grants if grant is not None]


class _Parents:
    """Attaches parentRefs: Services (GAMMA) and the edge's Gateways; any other parent is not ours."""

    def __init__(
        self, *, resolver: Resolver, listeners: Iterable[ListenerState], gateway_keys: Iterable[str]
    ) -> None:
        self._resolver = resolver
        self._by_gateway: dict[str, list[ListenerState]] = {}
        for state in listeners:
            self._by_gateway.setdefault(state.gateway.meta.key, []).append(state)
        self._known = frozenset(gateway_keys)
        """Every Gateway in the state, of any class: a reference to one of another class is not ours to judge."""

    def attach(self, route_kind: str, route: Route | None, ref: ParentRef) -> ParentResult | None:
        """Return what became of `ref` (None: not our parent)."""
        if ref.is_service:
            if route_kind not in MESH_ROUTE_KINDS:
                return ParentResult(
                    ref=ref,
                    controller=MESH_CONTROLLER,
                    reason=UNSUPPORTED_VALUE,
                    message=f"{route_kind}s with a Service parent are not projected yet (only HTTPRoute and GRPCRoute)",
                )
            return attach_to_service(ref, self._resolver)
        if not ref.is_gateway:
            return None
        key = f"Gateway/{ref.namespace}/{ref.name}"
        listeners = self._by_gateway.get(key)
        if listeners is None:
            if key in self._known:
                return None
            return ParentResult(
                ref=ref,
                controller=EDGE_CONTROLLER,
                reason=NO_MATCHING_PARENT,
                message=f"Gateway {ref.namespace}/{ref.name} not found",
            )
        if route is None:
            return ParentResult(ref=ref, controller=EDGE_CONTROLLER)
        return attach_to_gateway(route, ref, listeners)


def _resolve(route: Route, parents: _Parents, resolver: Resolver) -> Resolved:
    results = tuple(
        result for ref in route.parents if (result := parents.attach(route.kind, route, ref)) is not None
    )
    backends = tuple(
        tuple(
            resolver.backend(ref, route_kind=route.kind, route_namespace=route.meta.namespace)
            for ref in rule.backends
        )
        for rule in route.rules
    )
    mirrors = tuple(
        tuple(
            resolver.backend(mirror.backend, route_kind=route.kind, route_namespace=route.meta.namespace)
            for mirror in rule.filters.mirrors
        )
        for rule in route.rules
    )
    problems = []
    for rule in route.rules:
        if rule.problem:
            problems.append(f"spec.rules[{rule.index}] dropped: {rule.problem}")
        elif rule.filters.unsupported:
            problems.append(
                f"spec.rules[{rule.index}] answers 500: filter {', '.join(rule.filters.unsupported)} is not supported"
            )
    return Resolved(
        route=route, parents=results, backends=backends, mirrors=mirrors, problems=tuple(problems)
    )


def _refs_condition(resolved: Resolved) -> Condition:
    generation = resolved.route.meta.generation
    failed = [item for rule in (*resolved.backends, *resolved.mirrors) for item in rule if not item.service]
    if not failed:
        return condition(RESOLVED_REFS, ok=True, generation=generation)
    return condition(
        RESOLVED_REFS,
        ok=False,
        reason=failed[0].reason,
        message="; ".join(item.message for item in failed),
        generation=generation,
    )


def _parent_status(result: ParentResult, conditions: Iterable[Condition]) -> ParentStatus:
    ref = result.ref
    return ParentStatus(
        controller_name=result.controller,
        group=ref.group,
        kind=ref.kind,
        namespace=ref.namespace,
        name=ref.name,
        section_name=ref.section_name,
        port=ref.port,
        conditions=tuple(conditions),
    )


def _route_status(resolved: Resolved, shadowed: Iterable[str]) -> ObjectStatus:
    meta = resolved.route.meta
    generation = meta.generation
    refs = _refs_condition(resolved)
    notes = [*resolved.problems, *shadowed]
    parents = []
    for result in resolved.parents:
        if not result.accepted:
            accepted = condition(
                ACCEPTED, ok=False, reason=result.reason, message=result.message, generation=generation
            )
        elif not resolved.working:
            accepted = condition(
                ACCEPTED,
                ok=False,
                reason=UNSUPPORTED_VALUE,
                message="; ".join(resolved.problems),
                generation=generation,
            )
        else:
            accepted = condition(ACCEPTED, ok=True, generation=generation)
        conditions = [accepted, refs]
        if notes and accepted.status == "True":
            conditions.append(
                Condition(
                    type=PARTIALLY_INVALID,
                    status=TRUE,
                    reason=UNSUPPORTED_VALUE,
                    message="; ".join(notes),
                    observed_generation=generation,
                )
            )
        parents.append(_parent_status(result, conditions))
    return ObjectStatus(
        kind=meta.kind,
        namespace=meta.namespace,
        name=meta.name,
        generation=generation,
        parents=tuple(parents),
    )


def _rejected_route_status(rejected: RouteRejected, parents: _Parents) -> ObjectStatus:
    meta = rejected.meta
    accepted = condition(
        ACCEPTED, ok=False, reason=rejected.reason, message=rejected.message, generation=meta.generation
    )
    results = [
        result for ref in rejected.parents if (result := parents.attach(rejected.kind, None, ref)) is not None
    ]
    return ObjectStatus(
        kind=meta.kind,
        namespace=meta.namespace,
        name=meta.name,
        generation=meta.generation,
        conditions=() if results else (accepted,),
        parents=tuple(_parent_status(result, (accepted,)) for result in results),
    )


def build_view(state: State) -> GatewayView:
    """Return the Gateway API view of `state` (see `aether.core.gateway.view`)."""
    kube = state.kube
    mesh_domain = kube.mesh_config.mesh_domain
    objects = _parse(kube.gateway_objects)
    resolver = Resolver(
        services=kube.services, pods=state.pods.values(), grants=_grants(kube.reference_grants)
    )
    statuses: dict[str, ObjectStatus] = {}

    edge_classes = set()
    for gateway_class in objects.classes:
        if gateway_class.controller_name != EDGE_CONTROLLER:
            continue
        edge_classes.add(gateway_class.meta.name)
        meta = gateway_class.meta
        statuses[meta.key] = ObjectStatus(
            kind=meta.kind,
            namespace=meta.namespace,
            name=meta.name,
            generation=meta.generation,
            conditions=(condition(ACCEPTED, ok=True, generation=meta.generation),),
        )
    edge_gateways = [gateway for gateway in objects.gateways if gateway.class_name in edge_classes]
    for rejected in objects.rejected:
        meta = rejected.meta
        if meta.kind == "Gateway" and rejected.class_name in edge_classes:
            reason = "ListenersNotValid" if "listeners" in rejected.message else "InvalidParameters"
            statuses[meta.key] = ObjectStatus(
                kind=meta.kind,
                namespace=meta.namespace,
                name=meta.name,
                generation=meta.generation,
                conditions=(
                    condition(
                        ACCEPTED,
                        ok=False,
                        reason=reason,
                        message=rejected.message,
                        generation=meta.generation,
                    ),
                    condition(
                        PROGRAMMED,
                        ok=False,
                        reason="Invalid",
                        message=rejected.message,
                        generation=meta.generation,
                    ),
                ),
            )
    states = listener_states(edge_gateways, resolver)
    parents = _Parents(
        resolver=resolver, listeners=states, gateway_keys=[gateway.meta.key for gateway in objects.gateways]
    )
    resolved = [_resolve(route, parents, resolver) for route in objects.routes]

    mesh_result = mesh.mesh_routing(resolved, mesh_domain=mesh_domain)
    edge_result = edge.edge_listeners(resolved, states, mesh_domain=mesh_domain)

    for item in resolved:
        shadowed = [
            *mesh_result.shadowed.get(item.route.key, ()),
            *edge_result.shadowed.get(item.route.key, ()),
        ]
        statuses[item.route.key] = _route_status(item, shadowed)
    for rejected_route in objects.rejected_routes:
        statuses[rejected_route.meta.key] = _rejected_route_status(rejected_route, parents)
    statuses.update(edge.gateway_statuses(edge_gateways, states, edge_result.attached))

    return GatewayView(
        mesh_routes=immutables.Map(mesh_result.routing),
        edge_listeners=edge_result.listeners,
        backend_services=edge_result.backend_services,
        backend_clusters=edge_result.backend_clusters,
        mesh_backend_services=mesh_result.backend_services,
        status=immutables.Map(statuses),
    )
