"""The Gateway API projector: parse every object, check the edge's Gateways, attach routes to their parents, order
what attached by precedence, translate it to the view's routes (`aether.core.gateway.ir`), and compute every
object's status; incrementally.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs
import immutables

from aether.core.events.kube import KubeObject
from aether.core.gateway import edge, frontends, mesh_l4, udp_routes
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
from aether.core.gateway.edge import EdgeBuilder
from aether.core.gateway.listeners import ListenerState, listener_states
from aether.core.gateway.memo import Memo
from aether.core.gateway.mesh import MeshBuilder
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
from aether.core.gateway.ordered import Ordered, route_order
from aether.core.gateway.resolve import Backend, Resolver
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
from aether.core.state.kube import KubeState, changed_since
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
        self._attached: dict[tuple[str, str, tuple[str, ...], ParentRef], ParentResult] = {}
        """Each Gateway attachment: a function of the route's kind, namespace and hostnames and the reference (many
        routes share them), given these listeners and namespaces."""

    def attach(self, route_kind: str, route: Route | None, ref: ParentRef) -> ParentResult | None:
        """Return what became of `ref` (None: not our parent)."""
        if ref.is_service:
            if route_kind in MESH_L4_KINDS:
                protocol = "UDP" if route_kind == UDP_ROUTE else "TCP"
                return attach_l4_to_service(ref, self._resolver, protocol=protocol)
            return attach_to_service(ref, self._resolver)
        if not ref.is_gateway:
            return None
        attachment = None if route is None else (route.kind, route.meta.namespace, route.hostnames, ref)
        if attachment is not None:
            # Stored only below, for a Gateway with listeners: a hit needs no lookup of the Gateway.
            held = self._attached.get(attachment)
            if held is not None:
                return held
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
        if route is None or attachment is None:
            return ParentResult(ref=ref, controller=EDGE_CONTROLLER)
        held = self._attached[attachment] = attach_to_gateway(
            route, ref, listeners, namespace_labels=self._resolver.namespace_labels(route.meta.namespace)
        )
        return held


def _resolve(route: Route, parents: _Parents, resolver: Resolver) -> Resolved:
    results = tuple(
        result for ref in route.parents if (result := parents.attach(route.kind, route, ref)) is not None
    )
    services = frozenset([(ref.namespace, ref.name) for ref in route.parents if ref.is_service])
    kind, namespace = route.kind, route.meta.namespace
    # One pass over the rules (most routes have one): backends, mirrors, problems, refused backendRef filters.
    rule_backends: list[tuple[Backend, ...]] = []
    rule_mirrors: list[tuple[Backend, ...]] = []
    problems: list[str] = []
    refused: list[str] = []
    for rule in route.rules:
        rule_filters = rule.filters
        rule_backends.append(
            tuple(
                [
                    resolver.backend(ref, route_kind=kind, route_namespace=namespace, parents=services)
                    for ref in rule.backends
                ]
            )
        )
        rule_mirrors.append(
            tuple(
                [
                    resolver.backend(mirror.backend, route_kind=kind, route_namespace=namespace)
                    for mirror in rule_filters.mirrors
                ]
            )
            if rule_filters.mirrors
            else ()
        )
        if rule.problem:
            problems.append(f"spec.rules[{rule.index}] dropped: {rule.problem}")
        elif rule_filters.unsupported:
            problems.append(
                f"spec.rules[{rule.index}] answers 500: filter {', '.join(rule_filters.unsupported)} is not supported"
            )
        if rule.backend_filters:
            refused.extend(rule.backend_filter_refusals())
    backends = tuple(rule_backends)
    if kind == UDP_ROUTE:
        backends = tuple(
            tuple(udp_routes.udp_backend(backend, resolver.services) for backend in rule) for rule in backends
        )
    elif kind in MESH_L4_KINDS and any(
        result.accepted and result.controller == MESH_CONTROLLER for result in results
    ):
        backends = tuple(tuple(resolver.tcp_backend(backend) for backend in rule) for rule in backends)
    mirrors = tuple(rule_mirrors)
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
        self._resolved_count = 0
        self._last: GatewayView | None = None
        self._token: object = None
        self._inputs: tuple[object, ...] = ()
        self._parents: _Parents | None = None
        self._resolver: Resolver | None = None
        self._edge_gateways: list[Gateway] = []
        self._order: Ordered[Resolved] = Ordered()
        self._mesh = MeshBuilder(memo=self._memo)
        self._edge = EdgeBuilder((), memo=self._memo)
        self._rejected: dict[str, RouteRejected] = {}
        self._frontends: dict[str, tuple[frontends.MeshFrontend, ...]] = {}
        self._shadowed: dict[str, tuple[str, ...]] = {}
        self._l4 = mesh_l4.MeshL4Result(routing={}, shadowed={}, backend_services=frozenset())
        self._udp = udp_routes.mesh_udp_routing((), services=immutables.Map())
        self._udp_wanted: tuple[str, ...] = ()
        self._udp_clusters: dict[str, udp_routes.UdpRouteCluster] = {}
        self._status: immutables.Map[str, ObjectStatus] = immutables.Map()
        self._status_changes: frozenset[str] | None = None
        self._statistics = GatewayStatistics(views=0, routes=0, parsed=0, resolved=0, translated=0, built=0)

    def statistics(self) -> GatewayStatistics:
        """Return what the projector did, as of its last view."""
        return self._statistics

    def status_changes(self) -> frozenset[str] | None:
        """Return the keys whose status the last view may have changed against the view before it (a key whose
        status went is among them); None when it was built from scratch (any may have)."""
        return self._status_changes

    def _parsed_object(self, key: str, item: KubeObject) -> object:
        """`item` (the object at `key`) parsed: the last view's parse while it is the same object, else parsed now."""
        held = self._parsed.get(key)
        if held is not None and held[0] is item:
            return held[1]
        self._parsed_count += 1
        return _parse_object(item)

    def _parse(self, objects: Mapping[str, KubeObject]) -> _Objects:
        classes: list[GatewayClass] = []
        gateways: list[Gateway] = []
        rejected: list[ObjectRejected] = []
        routes: list[Route] = []
        rejected_routes: list[RouteRejected] = []
        parsed_now: dict[str, tuple[KubeObject, object]] = {}
        # Map order is not meaningful: every list built here is sorted below (routes by age, the rest by key).
        for key, item in objects.items():
            parsed = self._parsed_object(key, item)
            parsed_now[key] = (item, parsed)
            if isinstance(parsed, Route):  # most objects are routes
                routes.append(parsed)
            elif isinstance(parsed, GatewayClass):
                classes.append(parsed)
            elif isinstance(parsed, Gateway):
                gateways.append(parsed)
            elif isinstance(parsed, ObjectRejected):
                rejected.append(parsed)
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
            self._resolved, self._statuses, self._last = {}, {}, None
        self._memo.reset_counters()
        self._parsed_count = 0
        inputs = (kube.services, state.pods, kube.reference_grants, kube.namespaces, kube.tls_secrets)
        changed = None
        if self._last is not None and all(a is b for a, b in zip(inputs, self._inputs, strict=True)):
            changed = changed_since(kube, self._token)
            if changed is not None and not all(key.partition("/")[0] in ROUTE_KINDS for key in changed):
                changed = None  # a GatewayClass or Gateway changed: its listeners are every route's parents
        view = self._full(state) if changed is None else self._routes_changed(state, changed)
        self._token = None if kube.gateway_changes is None else kube.gateway_changes.token
        self._inputs = inputs
        self._last = view
        return view

    def _full(self, state: State) -> GatewayView:
        kube = state.kube
        memo = self._memo
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
        self._parents, self._resolver = parents, resolver
        self._edge_gateways = edge_gateways
        resolved_count = 0
        resolved_now: dict[str, tuple[tuple[object, ...], Resolved]] = {}
        self._order = Ordered()
        self._mesh = MeshBuilder(memo=memo)
        self._edge = EdgeBuilder(states, memo=memo)
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
            self._add(item)
        self._resolved = resolved_now
        self._rejected = {item.meta.key: item for item in objects.rejected_routes}
        self._resolved_count = resolved_count
        self._frontends = {}
        self._shadowed = {}
        return self._finish(kube, changed=None, l4_changed=True, base=statuses)

    def _add(self, item: Resolved) -> None:
        self._order.add(route_order(item.route), item)
        self._mesh.add(item)
        self._edge.add(item)

    def _remove(self, item: Resolved) -> None:
        self._order.remove(route_order(item.route))
        self._mesh.remove(item.route.key)
        self._edge.remove(item.route.key)

    def _routes_changed(self, state: State, changed: set[str]) -> GatewayView:
        """The view after routes `changed` (keys; nothing else): only they are parsed and resolved, and only what
        they touch is rebuilt."""
        objects = state.kube.gateway_objects
        parents, resolver = self._parents, self._resolver
        # Invariant: a view was built from scratch before (`view` comes here only with a previous view).
        assert parents is not None, "no view to change; this is a bug"
        assert resolver is not None, "no view to change; this is a bug"
        l4_changed = False
        self._resolved_count = 0
        for key in sorted(changed):
            item = objects.get(key)
            if item is None:
                self._parsed.pop(key, None)
                parsed: object = None
            else:
                parsed = self._parsed_object(key, item)
                self._parsed[key] = (item, parsed)
            self._rejected.pop(key, None)
            if isinstance(parsed, RouteRejected):
                self._rejected[key] = parsed
            held = self._resolved.get(key)
            resolved: Resolved | None = None
            if isinstance(parsed, Route):
                if held is not None and held[0][0] is parsed:
                    resolved = held[1]
                else:
                    resolved = _resolve(parsed, parents, resolver)
                    self._resolved_count += 1
                    if held is not None and resolved == held[1]:
                        resolved = held[1]
                self._resolved[key] = ((parsed, self._shared), resolved)
            else:
                self._resolved.pop(key, None)
            if held is not None and held[1] is resolved:
                continue
            for kind in (held[1].route.kind if held else "", resolved.route.kind if resolved else ""):
                l4_changed = l4_changed or kind in MESH_L4_KINDS
            if held is not None:
                self._remove(held[1])
            if resolved is not None:
                self._add(resolved)
        self._memo.forget(key for key in changed if key not in self._resolved)
        return self._finish(state.kube, changed=changed, l4_changed=l4_changed, base={})

    def _finish(
        self, kube: KubeState, *, changed: set[str] | None, l4_changed: bool, base: dict[str, ObjectStatus]
    ) -> GatewayView:
        """Build the view from the builders, recomputing the statuses of `changed` routes (None: every object's)
        and of those whose lost matches changed."""
        memo = self._memo
        resolved = self._order.values()
        mesh_changed = self._mesh.changed
        mesh_result = self._mesh.result()
        if l4_changed:
            self._l4 = mesh_l4.mesh_l4_routing(resolved, mesh_domain=memo.mesh_domain)
            self._udp = udp_routes.mesh_udp_routing(resolved, services=kube.services)
        l4_result, udp_result = self._l4, self._udp
        edge_result = self._edge.result()
        services = mesh_changed if changed is not None else set(self._mesh.members)
        for service in services:
            members = self._mesh.members.get(service)
            built = (
                frontends.service_frontends(service, members.values(), services=kube.services, memo=memo)
                if members is not None
                else ()
            )
            if built:
                self._frontends[service] = built
            else:
                self._frontends.pop(service, None)
        udp_wanted = tuple(
            route.route
            for listener in edge_result.listeners
            if listener.protocol == "UDP"
            for route in listener.l4_routes[:1]
        )
        if changed is None or l4_changed or udp_wanted != self._udp_wanted:
            self._udp_clusters = udp_routes.edge_udp_clusters(udp_wanted, resolved, services=kube.services)
        self._udp_wanted = udp_wanted

        shadowed: dict[str, tuple[str, ...]] = {}
        for source in (mesh_result.shadowed, l4_result.shadowed, udp_result.shadowed, edge_result.shadowed):
            for key, notes in source.items():
                shadowed[key] = (*shadowed.get(key, ()), *notes)
        previous = self._shadowed
        self._shadowed = shadowed
        if changed is None:
            affected: Iterable[str] = self._resolved
        else:
            affected = changed | {
                key for key in previous.keys() | shadowed.keys() if previous.get(key) != shadowed.get(key)
            }
        statuses = base
        for key in affected:
            held = self._resolved.get(key)
            if held is None:
                self._statuses.pop(key, None)
                continue
            item = held[1]
            lost = shadowed.get(key, ())
            held_status = self._statuses.get(key)
            if held_status is not None and held_status[0][0] is item and held_status[0][1] == lost:
                status = held_status[1]
            else:
                status = _route_status(item, lost)
            self._statuses[key] = ((item, lost), status)
            statuses[key] = status
        if changed is None:
            self._statuses = {key: self._statuses[key] for key in self._resolved}
            rejected: Iterable[str] = self._rejected
        else:
            rejected = [key for key in changed if key in self._rejected]
        for key in rejected:
            assert self._parents is not None, "a rejected route before any view; this is a bug"
            statuses[key] = _rejected_route_status(self._rejected[key], self._parents)
        statuses.update(edge.gateway_statuses(self._edge_gateways, self._states, edge_result.attached))
        if changed is None:
            self._status = immutables.Map(statuses)
            self._status_changes = None
            memo.sweep(set(self._resolved))
        else:
            self._status_changes = frozenset(changed | statuses.keys())
            with self._status.mutate() as status_map:
                for key in changed:
                    if key not in statuses:
                        status_map.pop(key, None)
                for key, value in statuses.items():
                    status_map[key] = value
                self._status = status_map.finish()
            memo.sweep_units()
        self._statistics = GatewayStatistics(
            views=self._statistics.views + 1,
            routes=len(self._resolved),
            parsed=self._parsed_count,
            resolved=self._resolved_count,
            translated=memo.translated,
            built=memo.built,
        )

        return GatewayView(
            mesh_routes=immutables.Map(mesh_result.routing),
            edge_listeners=edge_result.listeners,
            backend_services=edge_result.backend_services,
            backend_clusters=edge_result.backend_clusters,
            backend_selectors=immutables.Map(edge_result.backend_selectors),
            mesh_backend_services=(
                mesh_result.backend_services | l4_result.backend_services | udp_result.backend_services
            ),
            mesh_l4=immutables.Map(l4_result.routing),
            mesh_udp=immutables.Map(udp_result.routing),
            mesh_frontends=immutables.Map(sorted(self._frontends.items())),
            udp_clusters=immutables.Map(self._udp_clusters),
            status=self._status,
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
