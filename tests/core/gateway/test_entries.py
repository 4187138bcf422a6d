"""A matched rule as the view's routes: the share of unresolved backends, redirects, rewrites, timeouts, mirrors."""

from __future__ import annotations

import json
from typing import Any

from aether.core.events.kube import ObjectMeta
from aether.core.gateway import ir
from aether.core.gateway.entries import Entry, entry_routes
from aether.core.gateway.model import Route, parse_route
from aether.core.gateway.resolve import Backend

MESH_DOMAIN = "aether.internal"
WEB = "web.default.aether.internal"
ANY_PATH = ir.RouteMatch(path=ir.StringMatch(kind=ir.PREFIX, value="/"))
NAME = "HTTPRoute/default/r/rule/0/match/0"


def _entry(rule: dict[str, Any], *, resolved: tuple[str, ...] = ("default/web",)) -> Entry:
    """The first match of the only rule of an HTTPRoute, its backends resolved to `resolved` ('' unresolved)."""
    meta = ObjectMeta(kind="HTTPRoute", namespace="default", name="r", generation=1)
    route = parse_route("HTTPRoute", meta, json.dumps({"rules": [rule]}))
    assert isinstance(route, Route), route
    (parsed,) = route.rules
    backends = tuple(
        Backend(ref=ref, service=service, reason="" if service else "BackendNotFound")
        for ref, service in zip(parsed.backends, resolved, strict=True)
    )
    mirrors = tuple(Backend(ref=item.backend, service="default/copy") for item in parsed.filters.mirrors)
    return Entry(route=route, rule=parsed, match_index=0, backends=backends, mirrors=mirrors)


def test_unresolved_backends_keep_their_share_and_answer_it_500() -> None:
    """Weight 3 resolved and 1 unresolved: a route answering 500 takes a quarter, the rest is forwarded."""
    rule = {"backendRefs": [{"name": "web", "port": 80, "weight": 3}, {"name": "gone", "port": 80}]}
    share, forward = entry_routes(_entry(rule, resolved=("default/web", "")), mesh_domain=MESH_DOMAIN)
    assert share == ir.HTTPRoute(
        name=NAME,
        match=ir.RouteMatch(path=ANY_PATH.path, per_million=250_000),
        action=ir.DirectResponse(
            status=500, body="aether: HTTPRoute/default/r rule 0: backend not resolved\n"
        ),
    )
    assert forward == ir.HTTPRoute(
        name=NAME, match=ANY_PATH, action=ir.Forward(destinations=(ir.Destination(cluster=WEB, weight=3),))
    )


def test_a_rule_without_a_usable_backend_answers_500_with_why() -> None:
    """Every backend of weight 0: one route answering 500, saying so."""
    rule = {"backendRefs": [{"name": "web", "port": 80, "weight": 0}]}
    (route,) = entry_routes(_entry(rule), mesh_domain=MESH_DOMAIN)
    assert route.action == ir.DirectResponse(
        status=500, body="aether: HTTPRoute/default/r rule 0: every backend has weight 0\n"
    )


def test_a_redirect_names_a_port_only_when_it_is_not_the_schemes_own() -> None:
    """To https without a port the Location names none; port 8443 it names; a prefix rewrite keeps segments."""

    def redirect(**fields: Any) -> ir.Action:
        rule = {
            "matches": [{"path": {"type": "PathPrefix", "value": "/old"}}],
            "filters": [{"type": "RequestRedirect", "requestRedirect": fields}],
        }
        (route,) = entry_routes(_entry(rule, resolved=()), mesh_domain=MESH_DOMAIN)
        return route.action

    assert redirect(scheme="https") == ir.Redirect(status_code=302, scheme="https")
    assert redirect(scheme="http", port=80) == ir.Redirect(status_code=302, scheme="http")
    assert redirect(hostname="b.example", port=8443, statusCode=301) == ir.Redirect(
        status_code=301, hostname="b.example", port=8443
    )
    assert redirect(path={"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}) == ir.Redirect(
        status_code=302, path=ir.PathRewrite(kind=ir.REPLACE_REGEX, pattern="^/old/*", value="/")
    )


def test_a_forward_carries_timeouts_retry_rewrite_and_mirrors() -> None:
    """The request timeout bounds the whole request, backendRequest each try; rewrites and mirrors are resolved."""
    rule = {
        "matches": [{"path": {"type": "PathPrefix", "value": "/api"}}],
        "backendRefs": [{"name": "web", "port": 80}],
        "timeouts": {"request": "10s", "backendRequest": "2s"},
        "retry": {"codes": [502], "attempts": 3, "backoff": "100ms"},
        "filters": [
            {
                "type": "URLRewrite",
                "urlRewrite": {
                    "hostname": "internal",
                    "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2"},
                },
            },
            {
                "type": "RequestMirror",
                "requestMirror": {"backendRef": {"name": "copy", "port": 80}, "percent": 5},
            },
        ],
    }
    (route,) = entry_routes(_entry(rule), mesh_domain=MESH_DOMAIN)
    assert route.action == ir.Forward(
        destinations=(ir.Destination(cluster=WEB, weight=1),),
        timeout_ms=10_000,
        per_try_timeout_ms=2_000,
        retry=ir.Retry(codes=(502,), attempts=3, backoff_ms=100),
        host_rewrite="internal",
        path_rewrite=ir.PathRewrite(kind=ir.REPLACE_PREFIX, value="/v2"),
        mirrors=(ir.Mirror(cluster="copy.default.aether.internal", per_million=50_000),),
    )
    assert route.clusters == (WEB, "copy.default.aether.internal")


def test_a_backend_timeout_alone_bounds_each_attempt_and_not_the_request() -> None:
    """Without a request timeout, backendRequest bounds each attempt and the request has no timeout of its own (the
    attempts bound it); `0s` request disables the request's timeout."""
    rule: dict[str, Any] = {
        "backendRefs": [{"name": "web", "port": 80}],
        "timeouts": {"backendRequest": "2s"},
    }
    (route,) = entry_routes(_entry(rule), mesh_domain=MESH_DOMAIN)
    assert isinstance(route.action, ir.Forward)
    assert (route.action.timeout_ms, route.action.per_try_timeout_ms) == (0, 2_000)
    rule["timeouts"] = {"request": "0s"}
    (route,) = entry_routes(_entry(rule), mesh_domain=MESH_DOMAIN)
    assert isinstance(route.action, ir.Forward)
    assert (route.action.timeout_ms, route.action.per_try_timeout_ms) == (0, 0)


def test_header_changes_then_applies_the_later_changes_after_the_first() -> None:
    """What the later changes set or remove drops the first's sets and appends of that header; appends add up."""
    first = ir.HeaderChanges(
        set=(("X-A", "1"), ("x-b", "1")), add=(("x-c", "1"), ("x-d", "1")), remove=("x-e",)
    )
    later = ir.HeaderChanges(set=(("x-a", "2"),), add=(("x-c", "2"),), remove=("X-D", "x-e", "x-b"))
    assert first.then(later) == ir.HeaderChanges(
        set=(("x-a", "2"),),
        add=(("x-c", "1"), ("x-c", "2")),
        remove=("x-e", "X-D", "x-b"),
    )


def test_a_backend_with_a_filter_it_cannot_apply_alone_answers_its_share_500() -> None:
    """A backendRef with its own URLRewrite takes no traffic: its share answers 500, saying why."""
    rule = {
        "backendRefs": [
            {"name": "web", "port": 80},
            {
                "name": "api",
                "port": 80,
                "filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": "x.example"}}],
            },
        ]
    }
    share, forward = entry_routes(
        _entry(rule, resolved=("default/web", "default/api")), mesh_domain=MESH_DOMAIN
    )
    assert share.action == ir.DirectResponse(
        status=500,
        body="aether: HTTPRoute/default/r rule 0: backendRefs[1] has filter URLRewrite, which cannot apply to one "
        "backend\n",
    )
    assert share.match.per_million == 500_000
    assert forward.clusters == (WEB,)
    (only,) = entry_routes(
        _entry({"backendRefs": rule["backendRefs"][1:]}, resolved=("default/api",)), mesh_domain=MESH_DOMAIN
    )
    assert only.action == ir.DirectResponse(
        status=500,
        body="aether: HTTPRoute/default/r rule 0: backendRefs[0] has filter URLRewrite, which cannot apply to one "
        "backend\n",
    )


def test_entries_to_the_same_backends_share_their_forward() -> None:
    """Two routes forwarding to the same backend get one Forward object (equal to a fresh one), so what is kept per
    forward (a virtual host's clusters and selector keys) is computed once; a rule of its own (a timeout) gets its
    own."""
    rule = {"backendRefs": [{"name": "web", "port": 80}]}
    (first,) = entry_routes(_entry(rule), mesh_domain=MESH_DOMAIN)
    (second,) = entry_routes(_entry(rule), mesh_domain=MESH_DOMAIN)
    assert first.action is second.action
    assert first.action == ir.Forward(destinations=(ir.Destination(cluster=WEB, weight=1),))
    (timed,) = entry_routes(_entry({**rule, "timeouts": {"request": "1s"}}), mesh_domain=MESH_DOMAIN)
    assert timed.action == ir.Forward(destinations=(ir.Destination(cluster=WEB, weight=1),), timeout_ms=1000)
