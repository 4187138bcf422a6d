"""The view's routes as Envoy routes: the mesh's retries by outcome and idempotent split, edge retries, redirects,
direct answers and virtual hosts."""

from __future__ import annotations

from envoy.config.route.v3 import route_components_pb2 as rc

from aether.core.gateway import ir
from aether.core.project.gateway_routes import EDGE_RETRY_ON, envoy_routes, envoy_virtual_host
from aether.core.project.outcome import idempotent_method_matcher, retry_policy

WEB = "web.default.aether.internal"
ANY_PATH = ir.RouteMatch(path=ir.StringMatch(kind=ir.PREFIX, value="/"))


def _route(action: ir.Action, *, method: str = "") -> ir.HTTPRoute:
    return ir.HTTPRoute(
        name="HTTPRoute/default/r/rule/0/match/0", match=ANY_PATH, action=action, method=method
    )


FORWARD = ir.Forward(destinations=(ir.Destination(cluster=WEB, weight=1),))


def test_a_mesh_route_of_any_method_splits_idempotent_methods_first() -> None:
    """Without a method, the idempotent methods get their own route first (replaying unanswered requests)."""
    first, second = envoy_routes(_route(FORWARD), mesh=True)
    assert list(first.match.headers) == [idempotent_method_matcher()]
    assert first.route.retry_policy == retry_policy(idempotent=True)
    assert list(second.match.headers) == []
    assert second.route.retry_policy == retry_policy(idempotent=False)
    assert {first.route.cluster, second.route.cluster} == {WEB}


def test_a_mesh_route_with_a_known_method_is_one_route() -> None:
    """A method the match fixes (POST for gRPC) decides the retry policy: no split."""
    (post,) = envoy_routes(_route(FORWARD, method="POST"), mesh=True)
    assert post.route.retry_policy == retry_policy(idempotent=False)
    (get,) = envoy_routes(_route(FORWARD, method="GET"), mesh=True)
    assert get.route.retry_policy == retry_policy(idempotent=True)


def test_the_rule_retry_fields_override_the_outcome_policy() -> None:
    """Attempts, codes (merged with 503) and backoff of the rule win over the mesh's defaults."""
    forward = ir.Forward(
        destinations=FORWARD.destinations, retry=ir.Retry(codes=(502,), attempts=5, backoff_ms=1000)
    )
    (route,) = envoy_routes(_route(forward, method="GET"), mesh=True)
    policy = route.route.retry_policy
    assert (policy.num_retries.value, list(policy.retriable_status_codes)) == (5, [502, 503])
    assert policy.retry_back_off.base_interval.ToMilliseconds() == 1000
    assert policy.retry_back_off.max_interval.ToMilliseconds() == 1000


def test_an_edge_route_retries_only_when_its_rule_asks() -> None:
    """No retry field and no backend timeout: no policy; retry without attempts: one retry on our failure set."""
    (plain,) = envoy_routes(_route(FORWARD), mesh=False)
    assert not plain.route.HasField("retry_policy")
    forward = ir.Forward(
        destinations=FORWARD.destinations, retry=ir.Retry(codes=(503,)), per_try_timeout_ms=250
    )
    (retried,) = envoy_routes(_route(forward), mesh=False)
    policy = retried.route.retry_policy
    assert policy.retry_on == EDGE_RETRY_ON + ",retriable-status-codes"
    assert (policy.num_retries.value, list(policy.retriable_status_codes)) == (1, [503])
    assert policy.per_try_timeout.ToMilliseconds() == 250


def test_redirects_and_direct_answers_are_one_route_in_the_mesh_too() -> None:
    """A route answering itself is never split: there is nothing to retry."""
    redirect = ir.Redirect(
        status_code=301, scheme="https", path=ir.PathRewrite(kind=ir.REPLACE_FULL_PATH, value="/new")
    )
    (route,) = envoy_routes(_route(redirect), mesh=True)
    assert route.redirect == rc.RedirectAction(
        response_code=rc.RedirectAction.MOVED_PERMANENTLY, scheme_redirect="https", path_redirect="/new"
    )
    (answer,) = envoy_routes(_route(ir.DirectResponse(status=500, body="no\n")), mesh=True)
    assert (answer.direct_response.status, answer.direct_response.body.inline_string) == (500, "no\n")


def test_a_full_path_rewrite_of_a_forward_is_a_regex_rewrite() -> None:
    """Envoy's route action has no full-path rewrite: `^.*$` is substituted."""
    forward = ir.Forward(
        destinations=FORWARD.destinations, path_rewrite=ir.PathRewrite(kind=ir.REPLACE_FULL_PATH, value="/x")
    )
    (route,) = envoy_routes(_route(forward), mesh=False)
    assert (route.route.regex_rewrite.pattern.regex, route.route.regex_rewrite.substitution) == ("^.*$", "/x")


def test_a_virtual_host_keeps_its_name_domains_and_route_order() -> None:
    """An edge virtual host's routes come in the view's order, each as edge routes."""
    routes = (_route(FORWARD), _route(ir.DirectResponse(status=500, body="no\n")))
    vhost = envoy_virtual_host(
        ir.VirtualHost(name="default/gw/http/a.example", domains=("a.example",), routes=routes)
    )
    assert (vhost.name, list(vhost.domains)) == ("default/gw/http/a.example", ["a.example"])
    assert [route.WhichOneof("action") for route in vhost.routes] == ["route", "direct_response"]
