"""The Gateway API projector: parse every object, check the edge's Gateways, attach routes to their parents, order
what attached by precedence, translate it to the view's routes (`aether.core.gateway.ir`), and compute every
object's status; incrementally.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
import immutables

from aether.core.events.kube import KubeObject
from aether.core.gateway import edge, frontends, mesh, mesh_l4, udp_routes
from aether.core.gateway.attach import (
    ParentResult,
    Resolved,
    attach_l4_to_service,
    attach_to_gateway,
    attach_to_service,
)
from aether.core.gateway.contract import (
    EDGE_CONTROLLER,
    MESH_CONTROLLER,
    Condition,
    GatewayView,
    ObjectStatus,
    ParentStatus,
)
from aether.core.gateway.ir import selector_keys
from aether.core.gateway.listeners import ListenerState, listener_states
from aether.core.gateway.memo import Memo
from aether.core.gateway.model.gateways import (
    INVALID_PARAMETERS,
    Gateway,
    GatewayClass,
    ObjectRejected,
    parse_gateway,
    parse_gateway_class,
)
from aether.core.gateway.model.grants import ReferenceGrant, parse_reference_grant
from aether.core.gateway.model.refs import ParentRef
from aether.core.gateway.model.routes import (
    ROUTE_KINDS,
    TCP_ROUTE,
    TLS_ROUTE,
    UDP_ROUTE,
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

MESH_L4_KINDS = (TCP_ROUTE, TLS_ROUTE, UDP_ROUTE)
"""The GAMMA kinds routed by the destination their clients send to (a Service's ClusterIP and port)."""


@attrs.frozen(kw_only=True)
class _Objects:
    classes: tuple[GatewayClass, ...]
    gateways: tuple[Gateway, ...]
    rejected: tuple[ObjectRejected, ...]
    routes: tuple[Route, ...]
    rejected_routes: tuple[RouteRejected, ...]


def _grants(objects: Mapping[str, KubeObject]) -> list[ReferenceGrant]:
    grants = (parse_reference_grant(item.meta, item.spec_json) for _, item in sorted_items(objects))
    return [grant for grant in grants if grant is not None]


class _Parents:
    """Attaches parentRefs: Services (GAMMA) and the edge's Gateways; any other parent is not ours."""

    def __init__(
        self,
        *,
        resolver: Resolver,
        listeners: Iterable[ListenerState],
        known: frozenset[str],
        refused: Mapping[str, str],
    ) -> None:
        self._resolver = resolver
        self._by_gateway: dict[str, list[ListenerState]] = {}
        for state in listeners:
            self._by_gateway.setdefault(state.gateway.meta.key, []).append(state)
        self._known = known
        """Every Gateway in the state, of any class: a reference to one of another class is not ours to judge."""
        self._refused = refused
        """The edge's Gateways the schema refuses, with why."""

    def attach(self, route_kind: str, route: Route | None, ref: ParentRef) -> ParentResult | None:
        """Return what became of `ref` (None: not our parent)."""
        if ref.is_service:
            if route_kind in MESH_L4_KINDS:
                protocol = "UDP" if route_kind == UDP_ROUTE else "TCP"
                return attach_l4_to_service(ref, self._resolver, protocol=protocol)
            return attach_to_service(ref, self._resolver)
        if not ref.is_gateway:
            return None
        key = f"Gateway/{ref.namespace}/{ref.name}"
        listeners = self._by_gateway.get(key)
        if listeners is None:
            if key in self._refused:
                return ParentResult(
                    ref=ref,
                    controller=EDGE_CONTROLLER,
                    reason=NO_MATCHING_PARENT,
                    message=f"Gateway {ref.namespace}/{ref.name} is not accepted: {self._refused[key]}",
                )
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
        return attach_to_gateway(
            route, ref, listeners, namespace_labels=self._resolver.namespace_labels(route.meta.namespace)
        )


def _resolve(route: Route, parents: _Parents, resolver: Resolver) -> Resolved:
    results = tuple(
        result for ref in route.parents if (result := parents.attach(route.kind, route, ref)) is not None
    )
    services = frozenset((ref.namespace, ref.name) for ref in route.parents if ref.is_service)
    backends = tuple(
        tuple(
            resolver.backend(
                ref, route_kind=route.kind, route_namespace=route.meta.namespace, parents=services
            )
            for ref in rule.backends
        )
        for rule in route.rules
    )
    if route.kind == UDP_ROUTE:
        backends = tuple(
            tuple(udp_routes.udp_backend(backend, resolver.services) for backend in rule) for rule in backends
        )
    elif route.kind in MESH_L4_KINDS and any(
        result.accepted and result.controller == MESH_CONTROLLER for result in results
    ):
        backends = tuple(tuple(resolver.tcp_backend(backend) for backend in rule) for rule in backends)
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
    refused = [message for rule in route.rules for message in rule.backend_filter_refusals()]
    return Resolved(
        route=route,
        parents=results,
        backends=backends,
        mirrors=mirrors,
        problems=tuple(problems),
        refused=tuple(refused),
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
        elif not resolved.working or resolved.refused:
            accepted = condition(
                ACCEPTED,
                ok=False,
                reason=UNSUPPORTED_VALUE,
                message="; ".join(resolved.refused if resolved.working else resolved.problems),
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


@attrs.frozen(kw_only=True)
class GatewayStatistics:
    """What a `GatewayProjector` did."""

    views: int
    """Views built so far."""
    routes: int
    """Routes (parsed, of any kind) in the last view."""
    parsed: int
    """Gateway API objects the last view parsed (the others were reused)."""
    resolved: int
    """Routes the last view resolved (their parents and backends; the others were reused)."""
    translated: int
    """Route matches the last view translated to routes."""
    built: int
    """Virtual hosts and mesh routings the last view built."""


class GatewayProjector:
    """Builds Gateway API views, reusing what it built before from the same inputs.

    A deterministic memo, like `aether.core.project.NodeProjector`: a parsed object is reused while its Kubernetes
    object is the same object; a route's resolution while the route, the listeners, Services, pods and grants are
    the same; translations, virtual hosts and mesh routings through `Memo`; a route's status while its resolution
    and the conflicts it lost are. So `view(state)` equals `gateway_view(state)` for any sequence of states, and a
    change to one route costs about that route's share.
    """

    def __init__(self) -> None:
        self._memo = Memo(mesh_domain="")
        self._parsed: dict[str, tuple[KubeObject, object]] = {}
        self._grants: tuple[object, list[ReferenceGrant]] | None = None
        self._states: list[ListenerState] = []
        self._shared: tuple[object, ...] = (None, None, None, None, None, None)
        self._resolved: dict[str, tuple[tuple[object, ...], Resolved]] = {}
        self._statuses: dict[str, tuple[tuple[object, ...], ObjectStatus]] = {}
        self._parsed_count = 0
        self._statistics = GatewayStatistics(views=0, routes=0, parsed=0, resolved=0, translated=0, built=0)

    def statistics(self) -> GatewayStatistics:
        """Return what the projector did, as of its last view."""
        return self._statistics

    def _parse(self, objects: Mapping[str, KubeObject]) -> _Objects:
        classes: list[GatewayClass] = []
        gateways: list[Gateway] = []
        rejected: list[ObjectRejected] = []
        routes: list[Route] = []
        rejected_routes: list[RouteRejected] = []
        parsed_now: dict[str, tuple[KubeObject, object]] = {}
        # Map order is not meaningful: every list built here is sorted below (routes by age, the rest by key).
        for key, item in objects.items():
            held = self._parsed.get(key)
            if held is not None and held[0] is item:
                parsed = held[1]
            else:
                parsed = _parse_object(item)
                self._parsed_count += 1
            parsed_now[key] = (item, parsed)
            if isinstance(parsed, GatewayClass):
                classes.append(parsed)
            elif isinstance(parsed, Gateway):
                gateways.append(parsed)
            elif isinstance(parsed, ObjectRejected):
                rejected.append(parsed)
            elif isinstance(parsed, Route):
                routes.append(parsed)
            elif isinstance(parsed, RouteRejected):
                rejected_routes.append(parsed)
        self._parsed = parsed_now
        routes.sort(key=lambda route: (route.age, route.kind))
        return _Objects(
            classes=tuple(sorted(classes, key=lambda item: item.meta.key)),
            gateways=tuple(sorted(gateways, key=lambda gateway: (gateway.age, gateway.meta.key))),
            rejected=tuple(sorted(rejected, key=lambda item: item.meta.key)),
            routes=tuple(routes),
            rejected_routes=tuple(sorted(rejected_routes, key=lambda item: item.meta.key)),
        )

    def view(self, state: State) -> GatewayView:
        """Return the Gateway API view of `state`: equal to `gateway_view(state)`."""
        kube = state.kube
        mesh_domain = kube.mesh_config.mesh_domain
        if self._memo.mesh_domain != mesh_domain:
            self._memo = Memo(mesh_domain=mesh_domain)
            self._resolved, self._statuses = {}, {}
        memo = self._memo
        memo.reset_counters()
        self._parsed_count = 0
        objects = self._parse(kube.gateway_objects)
        if self._grants is None or self._grants[0] is not kube.reference_grants:
            self._grants = (kube.reference_grants, _grants(kube.reference_grants))
        resolver = Resolver(
            services=kube.services,
            pods=state.pods.values(),
            grants=self._grants[1],
            namespaces=kube.namespaces,
        )
        statuses: dict[str, ObjectStatus] = {}

        edge_classes = _class_statuses(objects.classes, statuses)
        edge_gateways = [gateway for gateway in objects.gateways if gateway.class_name in edge_classes]
        _rejected_gateway_statuses(objects.rejected, edge_classes, statuses)
        states = listener_states(edge_gateways, resolver, secrets=kube.tls_secrets)
        if states == self._states:
            states = self._states
        self._states = states
        known = frozenset(
            [gateway.meta.key for gateway in objects.gateways]
            + [item.meta.key for item in objects.rejected if item.meta.kind == "Gateway"]
        )
        refused = {
            item.meta.key: item.message
            for item in objects.rejected
            if item.meta.kind == "Gateway" and item.class_name in edge_classes
        }
        parents = _Parents(resolver=resolver, listeners=states, known=known, refused=refused)
        # What every route's resolution depends on besides the route: compared by identity (the state's maps), or
        # by equality and then interned (the small sets derived here), so one identity test per route suffices.
        previous = self._shared
        gateways_seen = (known, refused)
        if gateways_seen == previous[4]:
            gateways_seen = previous[4]
        shared: tuple[object, ...] = (
            states,
            kube.services,
            state.pods,
            kube.reference_grants,
            gateways_seen,
            kube.namespaces,
        )
        if all(a is b for a, b in zip(previous, shared, strict=True)):
            shared = previous
        self._shared = shared
        resolved = []
        resolved_count = 0
        resolved_now: dict[str, tuple[tuple[object, ...], Resolved]] = {}
        for route in objects.routes:
            inputs = (route, shared)
            held = self._resolved.get(route.key)
            if held is not None and held[0][0] is route and held[0][1] is shared:
                item = held[1]
            else:
                item = _resolve(route, parents, resolver)
                resolved_count += 1
                if held is not None and item == held[1]:
                    # Resolved the same (a pod or Service changed elsewhere): keep the object, so that every
                    # unit built from it is reused.
                    item = held[1]
            resolved_now[route.key] = (inputs, item)
            resolved.append(item)
        self._resolved = resolved_now

        mesh_result = mesh.mesh_routing(resolved, memo=memo)
        l4_result = mesh_l4.mesh_l4_routing(resolved, mesh_domain=mesh_domain)
        udp_result = udp_routes.mesh_udp_routing(resolved, services=kube.services)
        edge_result = edge.edge_listeners(resolved, states, memo=memo)

        statuses_now: dict[str, tuple[tuple[object, ...], ObjectStatus]] = {}
        for item in resolved:
            key = item.route.key
            shadowed = (
                *mesh_result.shadowed.get(key, ()),
                *l4_result.shadowed.get(key, ()),
                *udp_result.shadowed.get(key, ()),
                *edge_result.shadowed.get(key, ()),
            )
            held_status = self._statuses.get(key)
            if held_status is not None and held_status[0][0] is item and held_status[0][1] == shadowed:
                status = held_status[1]
            else:
                status = _route_status(item, shadowed)
            statuses_now[key] = ((item, shadowed), status)
            statuses[key] = status
        self._statuses = statuses_now
        for rejected_route in objects.rejected_routes:
            statuses[rejected_route.meta.key] = _rejected_route_status(rejected_route, parents)
        statuses.update(edge.gateway_statuses(edge_gateways, states, edge_result.attached))
        memo.sweep(set(resolved_now))
        self._statistics = GatewayStatistics(
            views=self._statistics.views + 1,
            routes=len(resolved),
            parsed=self._parsed_count,
            resolved=resolved_count,
            translated=memo.translated,
            built=memo.built,
        )

        return GatewayView(
            mesh_routes=immutables.Map(mesh_result.routing),
            edge_listeners=edge_result.listeners,
            backend_services=edge_result.backend_services,
            backend_clusters=edge_result.backend_clusters,
            backend_selectors=immutables.Map(
                selector_keys(
                    route
                    for listener in edge_result.listeners
                    for vhost in listener.virtual_hosts
                    for route in vhost.routes
                )
            ),
            mesh_backend_services=(
                mesh_result.backend_services | l4_result.backend_services | udp_result.backend_services
            ),
            mesh_l4=immutables.Map(l4_result.routing),
            mesh_udp=immutables.Map(udp_result.routing),
            mesh_frontends=immutables.Map(
                frontends.mesh_frontends(resolved, services=kube.services, memo=memo)
            ),
            udp_clusters=immutables.Map(
                udp_routes.edge_udp_clusters(
                    (
                        route.route
                        for listener in edge_result.listeners
                        if listener.protocol == "UDP"
                        for route in listener.l4_routes[:1]
                    ),
                    resolved,
                    services=kube.services,
                )
            ),
            status=immutables.Map(statuses),
        )


def _parse_object(item: KubeObject) -> object:
    """Return the typed model (or rejection) of one Gateway API object."""
    kind = item.meta.kind
    if kind == "GatewayClass":
        return parse_gateway_class(item.meta, item.spec_json)
    if kind == "Gateway":
        return parse_gateway(item.meta, item.spec_json)
    # Invariant: the reducers fold only the Gateway API kinds (`aether.core.reduce.kube.GATEWAY_KINDS`).
    assert kind in ROUTE_KINDS, f"{item.meta.key}: not a Gateway API kind; this is a bug"
    return parse_route(kind, item.meta, item.spec_json)


def _class_statuses(classes: Iterable[GatewayClass], statuses: dict[str, ObjectStatus]) -> set[str]:
    """Record the status of the edge's GatewayClasses; return their names."""
    edge_classes = set()
    for gateway_class in classes:
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
    return edge_classes


def _rejected_gateway_statuses(
    rejected: Iterable[ObjectRejected], edge_classes: set[str], statuses: dict[str, ObjectStatus]
) -> None:
    """Record the status of the edge's Gateways the schema refuses."""
    for item in rejected:
        meta = item.meta
        if meta.kind != "Gateway" or item.class_name not in edge_classes:
            continue
        # A parametersRef says so itself: the name it gives might contain "listeners".
        listeners = item.reason != INVALID_PARAMETERS and "listeners" in item.message
        reason = "ListenersNotValid" if listeners else INVALID_PARAMETERS
        statuses[meta.key] = ObjectStatus(
            kind=meta.kind,
            namespace=meta.namespace,
            name=meta.name,
            generation=meta.generation,
            conditions=(
                condition(
                    ACCEPTED, ok=False, reason=reason, message=item.message, generation=meta.generation
                ),
                condition(
                    PROGRAMMED, ok=False, reason="Invalid", message=item.message, generation=meta.generation
                ),
            ),
        )
