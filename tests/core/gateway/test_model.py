"""Parsing Gateway API objects: what the API's schema and CEL rules refuse is refused with the API's reason and a
message naming the field, the rule and the value; what they allow parses into the typed model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aether.core.events.kube import ObjectMeta
from aether.core.gateway.model import (
    BackendRef,
    GRPCMatch,
    HTTPMatch,
    ObjectRejected,
    ParentRef,
    PathMatch,
    ReferenceGrant,
    Route,
    RouteRejected,
    ValueMatch,
    parse_gateway,
    parse_gateway_class,
    parse_reference_grant,
    parse_route,
)

EDGE = [{"name": "edge"}]


def _rule(**rule: Any) -> dict[str, Any]:
    return {"parentRefs": EDGE, "rules": [rule]}


def _filters(*filters: Any) -> dict[str, Any]:
    return _rule(filters=list(filters))


def _meta(kind: str) -> ObjectMeta:
    return ObjectMeta(kind=kind, namespace="default", name="r", generation=3)


def _rejected(kind: str, spec: Any) -> str:
    parsed = parse_route(kind, _meta(kind), json.dumps(spec))
    assert isinstance(parsed, RouteRejected), parsed
    assert parsed.reason == "UnsupportedValue"
    return parsed.message


ROUTE_REJECTIONS = [
    ("HTTPRoute", {"rules": "x"}, "spec.rules: must be an array (got 'x')"),
    ("HTTPRoute", ["a"], "spec: must be an object (got ['a'])"),
    (
        "HTTPRoute",
        {"parentRefs": [{"name": "a", "port": "80"}]},
        "spec.parentRefs[0].port: must be an integer (got '80')",
    ),
    (
        "HTTPRoute",
        {"parentRefs": [{"name": "a", "port": True}]},
        "spec.parentRefs[0].port: must be an integer (got True)",
    ),
    (
        "HTTPRoute",
        {"parentRefs": [{"name": "a", "kind": 7}]},
        "spec.parentRefs[0].kind: must be a string (got 7)",
    ),
    (
        "HTTPRoute",
        {"parentRefs": [{"name": ""}]},
        "spec.parentRefs[0].name: must be at least 1 character(s) (got '')",
    ),
    ("HTTPRoute", {"parentRefs": [{"kind": "Gateway"}]}, "spec.parentRefs[0].name: is required"),
    (
        "HTTPRoute",
        {"parentRefs": [{"name": "a"}, {"name": "a"}]},
        "spec.parentRefs: sectionName or port must be specified when parentRefs includes 2 or more references to the "
        "same parent (got 'a')",
    ),
    ("HTTPRoute", {"parentRefs": ["edge"]}, "spec.parentRefs[0]: must be an object (got 'edge')"),
    (
        "HTTPRoute",
        {"parentRefs": [{"name": "a" * 254}]},
        f"spec.parentRefs[0].name: must be at most 253 characters (got {'a' * 254!r})",
    ),
    (
        "HTTPRoute",
        _rule(matches=[{"headers": [{"name": "a:b", "value": "1"}]}]),
        "spec.rules[0].matches[0].headers[0].name: must be an HTTP header name (token characters, no ':') (got 'a:b')",
    ),
    (
        "HTTPRoute",
        _rule(matches=[{"headers": [{"name": "x-a", "value": "1"}, {"name": "x-a", "value": "2"}]}]),
        "spec.rules[0].matches[0].headers: header names must be unique (got 'x-a')",
    ),
    (
        "HTTPRoute",
        _rule(timeouts={"request": "10 seconds"}),
        "spec.rules[0].timeouts.request: must be a Gateway API duration like '10s' or '1m30s' (got '10 seconds')",
    ),
    (
        "HTTPRoute",
        {"rules": [{"name": "same"}, {"name": "same"}]},
        "spec.rules: rule names must be unique (got 'same')",
    ),
    (
        "HTTPRoute",
        _filters({"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplaceFullPath"}}}),
        "spec.rules[0].filters[0].urlRewrite.path: replaceFullPath must be specified when type is set to "
        "'ReplaceFullPath'",
    ),
    (
        "HTTPRoute",
        _filters(
            {
                "type": "URLRewrite",
                "urlRewrite": {
                    "path": {"type": "ReplaceFullPath", "replaceFullPath": "/a", "replacePrefixMatch": "/b"}
                },
            }
        ),
        "spec.rules[0].filters[0].urlRewrite.path: only replaceFullPath may be specified when type is set to "
        "'ReplaceFullPath'",
    ),
    (
        "HTTPRoute",
        _filters(
            {
                "type": "URLRewrite",
                "urlRewrite": {"path": {"type": "ReplaceFullPath", "replaceFullPath": "a"}},
            }
        ),
        "spec.rules[0].filters[0].urlRewrite.path.replaceFullPath: must be an absolute path starting with '/' "
        "(got 'a')",
    ),
    (
        "HTTPRoute",
        _filters({"type": "RequestRedirect", "requestRedirect": {"hostname": "*.example.com"}}),
        "spec.rules[0].filters[0].requestRedirect.hostname: must be a precise hostname (no wildcard) "
        "(got '*.example.com')",
    ),
    (
        "HTTPRoute",
        _filters({"type": "URLRewrite", "urlRewrite": {"hostname": "*.example.com"}}),
        "spec.rules[0].filters[0].urlRewrite.hostname: must be a precise hostname (no wildcard) (got '*.example.com')",
    ),
    (
        "HTTPRoute",
        _filters(
            {
                "type": "RequestMirror",
                "requestMirror": {
                    "backendRef": {"name": "v", "port": 80},
                    "percent": 5,
                    "fraction": {"numerator": 1},
                },
            }
        ),
        "spec.rules[0].filters[0].requestMirror: only one of percent or fraction may be specified",
    ),
    (
        "HTTPRoute",
        _filters(
            {
                "type": "RequestMirror",
                "requestMirror": {
                    "backendRef": {"name": "v", "port": 80},
                    "fraction": {"numerator": 3, "denominator": 2},
                },
            }
        ),
        "spec.rules[0].filters[0].requestMirror.fraction: numerator must be less than or equal to denominator",
    ),
    (
        "HTTPRoute",
        _filters({"type": "RequestHeaderModifier", "responseHeaderModifier": {}}),
        "spec.rules[0].filters[0]: filter.responseHeaderModifier must be nil if the filter.type is not "
        "ResponseHeaderModifier",
    ),
    (
        "HTTPRoute",
        _filters({"type": "RequestHeaderModifier"}),
        "spec.rules[0].filters[0]: filter.requestHeaderModifier must be specified for RequestHeaderModifier "
        "filter.type",
    ),
    (
        "HTTPRoute",
        _filters(
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {}},
            {"type": "RequestHeaderModifier", "requestHeaderModifier": {}},
        ),
        "spec.rules[0].filters: RequestHeaderModifier filter cannot be repeated",
    ),
    (
        "HTTPRoute",
        _filters({"type": "CORS", "cors": {}}, {"type": "CORS", "cors": {}}),
        "spec.rules[0].filters: CORS filter cannot be repeated",
    ),
    (
        "HTTPRoute",
        _filters({"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": ["a", "A"]}}),
        "spec.rules[0].filters[0].requestHeaderModifier.remove: header names must be unique (got 'a')",
    ),
    (
        "HTTPRoute",
        _rule(matches=[{"path": {"type": "Exact", "value": "/a/.."}}]),
        "spec.rules[0].matches[0].path.value: must not end with '/..' (got '/a/..')",
    ),
    (
        "HTTPRoute",
        _rule(matches=[{"path": {"type": "Exact", "value": "/a b"}}]),
        "spec.rules[0].matches[0].path.value: must only contain valid path characters (got '/a b')",
    ),
    (
        "GRPCRoute",
        _rule(matches=[{"method": {"service": "bad service"}}]),
        "spec.rules[0].matches[0].method.service: must only contain valid characters (a gRPC service name) "
        "(got 'bad service')",
    ),
    (
        "GRPCRoute",
        _rule(matches=[{"method": {"method": "bad-method"}}]),
        "spec.rules[0].matches[0].method.method: must only contain valid characters (a gRPC method name) "
        "(got 'bad-method')",
    ),
    (
        "GRPCRoute",
        _rule(matches=[{"method": {"service": "a.B"}}] * 9),
        "spec.rules[0].matches: must have at most 8 items (got 9)",
    ),
    (
        "TCPRoute",
        {"parentRefs": EDGE, "rules": [{"backendRefs": []}]},
        "spec.rules[0].backendRefs: must have at least 1 item(s) (got 0)",
    ),
    (
        "TCPRoute",
        {"parentRefs": EDGE, "rules": [{"backendRefs": [{"name": "a", "port": 1}]}] * 2},
        "spec.rules: must have at most 1 items (got 2)",
    ),
]


@pytest.mark.parametrize(("kind", "spec", "message"), ROUTE_REJECTIONS)
def test_route_schema_violations_are_refused_with_the_rule(kind: str, spec: Any, message: str) -> None:
    """Each schema or CEL violation rejects the route with a message naming field, rule and value."""
    assert _rejected(kind, spec) == message


def test_a_route_that_is_not_json_is_refused() -> None:
    """A spec that does not parse (never folded, but the parser is total) is refused, not raised."""
    parsed = parse_route("HTTPRoute", _meta("HTTPRoute"), "{nope")
    assert parsed == RouteRejected(
        kind="HTTPRoute",
        meta=_meta("HTTPRoute"),
        reason="UnsupportedValue",
        message="spec: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    )


def test_a_rejected_route_keeps_the_parents_it_could_read() -> None:
    """Status can still be reported per parent when the rest of the spec is refused."""
    parsed = parse_route("HTTPRoute", _meta("HTTPRoute"), json.dumps({"parentRefs": EDGE, "rules": "x"}))
    assert isinstance(parsed, RouteRejected)
    assert parsed.parents == (
        ParentRef(group="gateway.networking.k8s.io", kind="Gateway", namespace="default", name="edge"),
    )


def test_an_invalid_grpc_regex_drops_its_rule_only() -> None:
    """An expression RE2 refuses is the implementation's call: the rule carries the problem, the route parses."""
    spec = {
        "parentRefs": EDGE,
        "rules": [{"matches": [{"method": {"type": "RegularExpression", "method": "("}}]}, {}],
    }
    parsed = parse_route("GRPCRoute", _meta("GRPCRoute"), json.dumps(spec))
    assert isinstance(parsed, Route)
    assert [rule.problem for rule in parsed.rules] == [
        "spec.rules[0].matches[0].method.method: invalid regular expression: missing ), unterminated subpattern at "
        "position 0 (got '(')",
        "",
    ]
    assert parsed.rules[1].matches == (GRPCMatch(),)


def test_defaults_fill_what_the_api_defaults() -> None:
    """No rules: one rule matching every request; no match type: PathPrefix; no weight: 1; no namespace: the route's."""
    parsed = parse_route("HTTPRoute", _meta("HTTPRoute"), json.dumps({"parentRefs": EDGE}))
    assert isinstance(parsed, Route)
    assert [rule.matches for rule in parsed.rules] == [(HTTPMatch(),)]
    spec = _rule(
        matches=[
            {
                "path": {"value": "/a"},
                "headers": [{"name": "X-A", "value": "1"}, {"name": "x-a", "value": "2"}],
            }
        ],
        backendRefs=[{"name": "web", "port": 80}],
    )
    parsed = parse_route("HTTPRoute", _meta("HTTPRoute"), json.dumps(spec))
    assert isinstance(parsed, Route)
    (rule,) = parsed.rules
    assert rule.matches == (
        HTTPMatch(
            path=PathMatch(type="PathPrefix", value="/a"),
            headers=(ValueMatch(type="Exact", name="x-a", value="1"),),
        ),
    )
    assert rule.backends == (BackendRef(namespace="default", name="web", port=80, weight=1),)


GATEWAY_REJECTIONS = [
    ({"listeners": [{"name": "l", "port": 80, "protocol": "HTTP"}]}, "spec.gatewayClassName: is required"),
    ({"gatewayClassName": "aether", "listeners": []}, "spec.listeners: must have at least 1 item(s) (got 0)"),
    (
        {"tls": {"certificateRefs": [{"name": "c"}]}},
        "spec.listeners[0]: tls must not be specified for protocols ['HTTP', 'TCP', 'UDP']",
    ),
    ({"protocol": "HTTPS"}, "spec.listeners[0]: tls must be specified for protocols ['HTTPS', 'TLS']"),
    (
        {"protocol": "HTTPS", "tls": {"mode": "Terminate"}},
        "spec.listeners[0].tls: certificateRefs or options must be specified when mode is Terminate",
    ),
    (
        {"protocol": "HTTPS", "tls": {"mode": "Passthrough"}},
        "spec.listeners[0].tls.mode: must be Terminate for protocol HTTPS (got 'Passthrough')",
    ),
    (
        {"protocol": "UDP", "hostname": "a.example.com"},
        "spec.listeners[0]: hostname must not be specified for protocols ['TCP', 'UDP']",
    ),
    ({"port": 0}, "spec.listeners[0].port: must be between 1 and 65535 (got 0)"),
    (
        {"allowedRoutes": {"namespaces": {"from": "Others"}}},
        "spec.listeners[0].allowedRoutes.namespaces.from: must be one of ['All', 'Same', 'Selector'] (got 'Others')",
    ),
    (
        {
            "allowedRoutes": {
                "namespaces": {
                    "from": "Selector",
                    "selector": {"matchExpressions": [{"key": "k", "operator": "Near"}]},
                }
            }
        },
        "spec.listeners[0].allowedRoutes.namespaces.selector.matchExpressions[0].operator: must be one of "
        "['DoesNotExist', 'Exists', 'In', 'NotIn'] (got 'Near')",
    ),
    (
        {
            "gatewayClassName": "aether",
            "listeners": [
                {"name": "l", "port": 80, "protocol": "HTTP"},
                {"name": "l", "port": 81, "protocol": "HTTP"},
            ],
        },
        "spec.listeners: Listener name must be unique (got 'l')",
    ),
    (
        {
            "gatewayClassName": "aether",
            "listeners": [
                {"name": "a", "port": 80, "protocol": "HTTP"},
                {"name": "b", "port": 80, "protocol": "HTTP"},
            ],
        },
        "spec.listeners: Combination of port, protocol and hostname must be unique (got '80/HTTP/')",
    ),
]


@pytest.mark.parametrize(("spec", "message"), GATEWAY_REJECTIONS)
def test_gateway_schema_violations_are_refused_with_the_rule(spec: dict[str, Any], message: str) -> None:
    """A listener-level dict is one HTTP listener on port 80 with those fields changed; others are whole specs."""
    if "gatewayClassName" not in spec and "listeners" not in spec:
        spec = {
            "gatewayClassName": "aether",
            "listeners": [{"name": "l", "port": 80, "protocol": "HTTP", **spec}],
        }
    meta = ObjectMeta(kind="Gateway", namespace="edge", name="g")
    parsed = parse_gateway(meta, json.dumps(spec))
    assert isinstance(parsed, ObjectRejected)
    assert parsed.message == message


def test_gateway_and_class_that_are_not_json_are_refused() -> None:
    """The parsers are total over any text."""
    gateway = parse_gateway(ObjectMeta(kind="Gateway", namespace="edge", name="g"), "{")
    assert isinstance(gateway, ObjectRejected)
    assert gateway.message.startswith("spec: not JSON: ")
    meta = ObjectMeta(kind="GatewayClass", name="c")
    assert parse_gateway_class(meta, "{}") == ObjectRejected(
        meta=meta, reason="UnsupportedValue", message="spec.controllerName: is required"
    )
    assert isinstance(parse_gateway_class(meta, "{"), ObjectRejected)


def test_reference_grants_parse_or_grant_nothing() -> None:
    """A valid grant permits what it lists; an invalid one is None (it grants nothing)."""
    meta = ObjectMeta(kind="ReferenceGrant", namespace="other", name="g")
    spec = {
        "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "default"}],
        "to": [{"kind": "Service", "name": "db"}],
    }
    grant = parse_reference_grant(meta, json.dumps(spec))
    assert grant == ReferenceGrant(
        meta=meta, from_=(("gateway.networking.k8s.io", "HTTPRoute", "default"),), to=(("", "Service", "db"),)
    )
    common = {
        "group": "gateway.networking.k8s.io",
        "kind": "HTTPRoute",
        "namespace": "default",
        "to_group": "",
    }
    assert grant.permits(**common, to_kind="Service", to_name="db")
    assert not grant.permits(**common, to_kind="Service", to_name="web")
    assert not grant.permits(**common, to_kind="Secret", to_name="db")
    assert parse_reference_grant(meta, json.dumps({"from": [], "to": [{"kind": "Service"}]})) is None
    assert parse_reference_grant(meta, "{") is None


def _parsed(spec: Any) -> Route:
    parsed = parse_route("HTTPRoute", _meta("HTTPRoute"), json.dumps(spec))
    assert isinstance(parsed, Route), parsed
    return parsed


@pytest.mark.parametrize(
    ("valid", "invalid", "message"),
    [
        (
            {"parentRefs": [{"name": "edge", "port": 80}]},
            {"parentRefs": [{"name": "edge", "port": True}]},
            "spec.parentRefs[0].port: must be an integer (got True)",
        ),
        (
            {"parentRefs": [{"name": "edge", "port": 80}]},
            {"parentRefs": [{"name": "edge", "port": 80.0}]},
            "spec.parentRefs[0].port: must be an integer (got 80.0)",
        ),
        (
            _rule(backendRefs=[{"name": "a", "port": 1, "weight": 1}]),
            _rule(backendRefs=[{"name": "a", "port": 1, "weight": True}]),
            "spec.rules[0].backendRefs[0].weight: must be an integer (got True)",
        ),
        (
            _rule(matches=[{"headers": [{"name": "x", "value": "1"}]}]),
            _rule(matches=[{"headers": [{"name": "x", "value": 1}]}]),
            "spec.rules[0].matches[0].headers[0].value: must be a string (got 1)",
        ),
    ],
)
def test_a_value_equal_to_a_valid_one_but_of_another_type_is_still_refused(
    valid: Any, invalid: Any, message: str
) -> None:
    """References, hostnames and header matches are parsed once per distinct value: `True` and `80.0` equal `1`
    and `80` in Python, yet after the valid spelling parsed the other is refused, with the same message as always."""
    _parsed(valid)
    assert _rejected("HTTPRoute", invalid) == message
    assert _rejected("HTTPRoute", invalid) == message


def test_routes_with_equal_references_share_their_parsed_values() -> None:
    """Routes that repeat a parentRef, backendRef, hostnames or header match get the same parsed objects (what
    later memos compare by identity), equal to what a route of its own would get."""
    spec = {
        "parentRefs": [{"name": "edge"}],
        "hostnames": ["a.example.com"],
        "rules": [
            {
                "matches": [{"headers": [{"name": "X-Tenant", "value": "t1"}]}],
                "backendRefs": [{"name": "svc", "port": 80}],
            }
        ],
    }
    first, second = _parsed(spec), _parsed(spec)
    assert first == second
    assert first.parents is second.parents
    assert first.hostnames is second.hostnames
    assert first.rules[0].backends is second.rules[0].backends
    assert first.rules[0].matches[0].headers is second.rules[0].matches[0].headers
    assert first.rules[0].matches[0].headers == (ValueMatch(type="Exact", name="x-tenant", value="t1"),)
    assert first.rules[0].backends == (BackendRef(namespace="default", name="svc", port=80),)


def test_references_with_nested_values_parse_each_time() -> None:
    """A backendRef with filters of its own (a nested value) is parsed as given, not shared."""
    own = [{"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "a", "value": "b"}]}}]
    spec = _rule(backendRefs=[{"name": "svc", "port": 80, "filters": own}])
    first, second = _parsed(spec), _parsed(spec)
    assert first == second
    assert first.rules[0].backends is not second.rules[0].backends
