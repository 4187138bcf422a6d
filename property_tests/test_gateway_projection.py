"""Properties of the Gateway API projection over arbitrary (valid and invalid) routes, gateways and grants: it never
raises, every route forwards to a cluster the view emits or answers itself, the emitted order respects precedence
(checked by a comparator written from the API's text, on the raw specs, apart from the implementation), the node
projector stays equal to a full projection, and a sample of outputs passes real Envoy's validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from envoy.config.listener.v3 import listener_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aether.core.events import Event
from aether.core.gateway import GatewayProjector, GatewayView, gateway_view
from aether.core.mesh_names import http_cluster_name
from aether.core.project import NodeProjector, project_node
from aether.core.project.gateway_routes import envoy_route_list, envoy_virtual_host
from aether.core.snapshot import CLUSTER_TYPE, LISTENER_TYPE, Snapshot
from aether.core.state import State
from aether.testing import AT, fold_events
from property_tests.gateway_strategies import base_events, gateway_events, tied_routes

EVENTS = st.one_of(st.lists(gateway_events(), max_size=12), tied_routes())


def _state(events: list[Event]) -> State:
    return fold_events(*base_events(), *events)


def _clusters(route: Any) -> set[str] | None:
    """The clusters a route forwards or mirrors to; None when it answers itself (direct response or redirect)."""
    if route.HasField("direct_response") or route.HasField("redirect"):
        return None
    action = route.route
    names = {action.cluster} if action.cluster else set()
    names.update(item.name for item in action.weighted_clusters.clusters)
    names.update(item.cluster for item in action.request_mirror_policies)
    return names


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS)
def test_every_route_names_an_emitted_cluster_or_answers_itself(events: list[Event]) -> None:
    """Whatever the objects, the view is built, and no route (as Envoy gets it) names a cluster nobody emits."""
    view = gateway_view(_state(events))
    for listener in view.edge_listeners:
        for vhost in listener.virtual_hosts:
            for route in envoy_virtual_host(vhost).routes:
                names = _clusters(route)
                assert names is None or (names and names <= view.backend_clusters)
    for routing in view.mesh_routes.values():
        emitted = {
            http_cluster_name(item, mesh_domain="aether.internal") for item in routing.backend_services
        }
        for route in envoy_route_list(routing.all_routes, mesh=True):
            names = _clusters(route)
            assert names is None or (names and names <= emitted)


# --- the independent precedence comparator (from the API's text, on the raw JSON) ---


def _covers(pattern: str, host: str) -> bool:
    if pattern == host:
        return True
    return pattern.startswith("*.") and host.endswith(pattern[1:]) and len(host) > len(pattern) - 1


def _hostname_rank(hostnames: list[str], domain: str) -> tuple[int, int]:
    """Characters in the matching non-wildcard hostname, then characters in the matching hostname."""
    best = (0, 0)
    for name in hostnames:
        if _covers(name, domain):
            best = max(best, (0 if name.startswith("*") else len(name), len(name)))
    return best


def _http_rank(match: dict[str, Any]) -> tuple[int, ...]:
    """Exact, then (our documented choice) RegularExpression, then PathPrefix by characters; method; headers; query."""
    path = match.get("path") or {}
    kind, value = path.get("type", "PathPrefix"), path.get("value", "/")
    characters = len(value.rstrip("/")) if kind == "PathPrefix" else len(value)
    order = {"Exact": 3, "RegularExpression": 2, "PathPrefix": 1}[kind]
    return (
        order,
        characters,
        int("method" in match),
        len(match.get("headers", [])),
        len(match.get("queryParams", [])),
    )


def _grpc_rank(match: dict[str, Any]) -> tuple[int, ...]:
    """Characters of the matching (exact) service, then of the method, then header matches."""
    method = match.get("method") or {}
    exact = method.get("type", "Exact") == "Exact"
    service, name = method.get("service", ""), method.get("method", "")
    return (
        int(exact and bool(service)),
        len(service),
        int(exact and bool(name)),
        len(name),
        len(match.get("headers", [])),
    )


def _sort_key(state: State, route_name: str, domain: str | None) -> tuple[Any, ...]:
    kind, namespace, name, _, rule, _, match = route_name.split("/")
    item = state.kube.gateway_objects[f"{kind}/{namespace}/{name}"]
    spec = json.loads(item.spec_json)
    rules = spec.get("rules") or [{}]
    matches = rules[int(rule)].get("matches") or [{}]
    raw = matches[int(match)]
    rank = _grpc_rank(raw) if kind == "GRPCRoute" else _http_rank(raw)
    host = (0, 0) if domain is None else _hostname_rank(spec.get("hostnames", []), domain)
    # Larger ranks first; then the oldest route, then namespace/name, then rule and match order.
    return (
        kind != "GRPCRoute",
        tuple(-value for value in host),
        tuple(-value for value in rank),
        item.meta.creation_timestamp,
        namespace,
        name,
        int(rule),
        int(match),
    )


def _names(routes: Any) -> list[str]:
    """The routes' names with the consecutive repeats of one match (500 share, retry variants) collapsed."""
    names: list[str] = []
    for route in routes:
        if not names or names[-1] != route.name:
            names.append(route.name)
    return names


def _assert_ordered(state: State, names: list[str], domain: str | None) -> None:
    keys = [_sort_key(state, name, domain) for name in names]
    assert keys == sorted(keys), f"routes out of precedence order for {domain!r}: {names}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS)
def test_emitted_order_respects_precedence(events: list[Event]) -> None:
    """In every virtual host and every mesh service, routes come in the API's precedence order (gRPC first)."""
    state = _state(events)
    view = gateway_view(state)
    for listener in view.edge_listeners:
        for vhost in listener.virtual_hosts:
            (domain,) = vhost.domains
            _assert_ordered(state, _names(vhost.routes), domain)
    for routing in view.mesh_routes.values():
        _assert_ordered(state, _names(routing.all_routes), None)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS, seen=st.lists(st.booleans(), min_size=12, max_size=12))
def test_node_projector_with_routes_equals_a_full_projection(events: list[Event], seen: list[bool]) -> None:
    """A projector that saw some intermediate states projects what `project_node` projects from scratch."""
    projector = NodeProjector(node_name="node-a")
    state = _state([])
    projector.project(state, now=AT)
    for event, project_now in zip(events, seen, strict=False):
        state = fold_events(event, state=state)
        if project_now:
            assert projector.project(state, now=AT) == project_node(state, node_name="node-a", now=AT)
    snapshot = projector.project(state, now=AT)
    assert snapshot == project_node(state, node_name="node-a", now=AT)
    assert snapshot.consistent() == ()
    assert _proxied_clusters(snapshot) <= set(snapshot.of_type(CLUSTER_TYPE))


def _proxied_clusters(snapshot: Snapshot) -> set[str]:
    """The clusters the listeners' `tcp_proxy` filters name (GAMMA L4 chains, pass-through)."""
    names: set[str] = set()
    for resource in snapshot.of_type(LISTENER_TYPE).values():
        listener = listener_pb2.Listener.FromString(resource.body)
        for chain in [*listener.filter_chains, listener.default_filter_chain]:
            for item in chain.filters:
                proxy = tcp_proxy_pb2.TcpProxy()
                if item.typed_config.Unpack(proxy):
                    names.add(proxy.cluster) if proxy.cluster else names.update(
                        weighted.name for weighted in proxy.weighted_clusters.clusters
                    )
    return names


_SAMPLE: list[tuple[str, GatewayView]] = []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS)
def _collect_sample(events: list[Event]) -> None:
    _SAMPLE.append((f"example-{len(_SAMPLE)}", gateway_view(_state(events))))


def test_a_sample_of_outputs_passes_envoy_validation(tmp_path: Path) -> None:
    """Forty generated views, in one bootstrap, are accepted by `envoy --mode validate` (validate_clusters on)."""
    from tests.integration.gateway_bootstrap import validate_views

    _SAMPLE.clear()
    _collect_sample()
    assert len(_SAMPLE) == 40
    validate_views(_SAMPLE, tmp_path)


@pytest.mark.parametrize(
    "spec",
    [
        # Regression examples hypothesis found (kept so that they run on every run).
        {
            "parentRefs": [{"name": "edge", "namespace": "edge"}],
            "rules": [{"matches": [{"path": {"type": "RegularExpression", "value": "/(a)\\1"}}]}],
        },
    ],
)
def test_regressions(spec: dict[str, Any]) -> None:
    """Specs that once broke a property still satisfy them."""
    from aether.core.events.kube import KubeObject, ObjectMeta
    from aether.core.reduce.kube import canonical_json
    from aether.testing import builders

    meta = ObjectMeta(
        kind="HTTPRoute", namespace="default", name="regression", creation_timestamp="2024-01-01T00:00:00Z"
    )
    state = _state([builders.gateway_object_upserted(KubeObject(meta=meta, spec_json=canonical_json(spec)))])
    assert gateway_view(state).status[meta.key].parents


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS, seen=st.lists(st.booleans(), min_size=12, max_size=12))
def test_gateway_projector_equals_a_fresh_view(events: list[Event], seen: list[bool]) -> None:
    """A projector that saw some intermediate states builds what a fresh `gateway_view` builds."""
    projector = GatewayProjector()
    state = _state([])
    projector.view(state)
    for event, project_now in zip(events, seen, strict=False):
        state = fold_events(event, state=state)
        if project_now:
            assert projector.view(state) == gateway_view(state)
    assert projector.view(state) == gateway_view(state)


_SPEC_KEYS = [
    "parentRefs",
    "rules",
    "matches",
    "path",
    "type",
    "value",
    "name",
    "port",
    "weight",
    "backendRefs",
    "filters",
    "hostnames",
    "headers",
    "kind",
    "group",
    "namespace",
    "listeners",
    "protocol",
    "hostname",
    "tls",
    "mode",
    "certificateRefs",
    "allowedRoutes",
    "gatewayClassName",
    "controllerName",
    "from",
    "to",
    "method",
    "timeouts",
    "requestRedirect",
    "urlRewrite",
    "requestMirror",
    "backendRef",
    "sectionName",
    "retry",
    "queryParams",
]
"""Field names of the Gateway API kinds, so that arbitrary JSON keeps hitting the fields the parsers read."""
_KINDS = [
    "GatewayClass",
    "Gateway",
    "HTTPRoute",
    "GRPCRoute",
    "TCPRoute",
    "TLSRoute",
    "UDPRoute",
    "ReferenceGrant",
]
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 70000)
    | st.sampled_from(["", "/", "a", "*.x.io", "Exact", "Service", "web", "HTTP", "aether"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(_SPEC_KEYS), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(
        st.tuples(st.sampled_from(_KINDS), st.dictionaries(st.sampled_from(_SPEC_KEYS), _JSON, max_size=5)),
        max_size=6,
    )
)
def test_arbitrary_json_specs_never_break_the_view(specs: list[tuple[str, dict[str, Any]]]) -> None:
    """Objects whose specs are any JSON at all: the view is still built, and every route has a status."""
    from aether.testing import builders
    from aether.testing.gateway_objects import gateway_api_object

    events: list[Event] = []
    for index, (kind, spec) in enumerate(specs):
        item = gateway_api_object(kind, f"o{index}", spec)
        upsert = (
            builders.reference_grant_upserted
            if kind == "ReferenceGrant"
            else builders.gateway_object_upserted
        )
        events.append(upsert(item))
    view = gateway_view(_state(events))
    for index, (kind, _) in enumerate(specs):
        if kind.endswith("Route"):
            assert f"{kind}/default/o{index}" in view.status


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS)
def test_no_domain_or_sni_name_is_given_twice_on_a_port(events: list[Event]) -> None:
    """Envoy never receives one domain twice on a port, nor one SNI name twice on a TLS listener."""
    view = gateway_view(_state(events))
    domains: dict[int, list[str]] = {}
    for listener in view.edge_listeners:
        for vhost in listener.virtual_hosts:
            domains.setdefault(listener.port, []).extend(vhost.domains)
        names = [name for route in listener.l4_routes for name in route.hostnames]
        assert len(names) == len(set(names))
    for port, seen in domains.items():
        assert len(seen) == len(set(seen)), f"port {port}: {seen}"
