"""The Gateway API view's routes and virtual hosts (`aether.core.gateway.ir`) as Envoy routes: forward (weighted,
mirrored, rewritten, with timeouts and retries), redirect, or answer directly.

What is the data plane's and not the API's is decided here: a mesh route retries by outcome
(`aether.core.project.outcome`), split into a route for idempotent methods (which also replays unanswered requests)
and one for the others when its match does not fix the method; an edge route retries only when its rule asks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2

from aether.core.gateway import ir
from aether.core.project.gateway_matches import envoy_match
from aether.core.project.messages import milliseconds
from aether.core.project.names import IDEMPOTENT_METHODS
from aether.core.project.outcome import idempotent_method_matcher, retry_policy
from aether.core.project.subsets import metadata_match

_REDIRECT_CODES = {
    301: rc.RedirectAction.MOVED_PERMANENTLY,
    302: rc.RedirectAction.FOUND,
    303: rc.RedirectAction.SEE_OTHER,
    307: rc.RedirectAction.TEMPORARY_REDIRECT,
    308: rc.RedirectAction.PERMANENT_REDIRECT,
}
EDGE_RETRY_ON = "connect-failure,refused-stream,reset"
"""What an edge route retries on when a rule asks for retries, beside the rule's status codes: connection errors (the
API's MAY: a failed connect, a refused stream, a reset or disconnect before or after the request was sent, and an
attempt past its per-try timeout, which Envoy counts as a reset)."""
EDGE_DEFAULT_ATTEMPTS = 1
"""The retries of an edge rule that asks for retries without saying how many (the API leaves it to us)."""


def _direct(response: ir.DirectResponse) -> Any:
    return rc.DirectResponseAction(
        status=response.status, body=base_pb2.DataSource(inline_string=response.body)
    )


def _headers(changes: ir.HeaderChanges) -> list[Any]:
    options = [
        base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=name.lower(), value=value),
            append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
        )
        for name, value in changes.set
    ]
    options.extend(
        base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=name.lower(), value=value),
            append_action=base_pb2.HeaderValueOption.APPEND_IF_EXISTS_OR_ADD,
        )
        for name, value in changes.add
    )
    return options


def _path_rewrite(rewrite: ir.PathRewrite, target: Any) -> None:
    """Set the path part of a redirect or forward (`target`: a RedirectAction or RouteAction)."""
    if rewrite.kind == ir.REPLACE_FULL_PATH:
        if isinstance(target, rc.RedirectAction):
            target.path_redirect = rewrite.value
        else:
            target.regex_rewrite.pattern.regex = "^.*$"
            target.regex_rewrite.substitution = rewrite.value
    elif rewrite.kind == ir.REPLACE_PREFIX:
        target.prefix_rewrite = rewrite.value
    else:
        assert rewrite.kind == ir.REPLACE_REGEX, f"path rewrite kind {rewrite.kind!r}: this is a bug"
        target.regex_rewrite.pattern.regex = rewrite.pattern
        target.regex_rewrite.substitution = rewrite.value


def _redirect(redirect: ir.Redirect) -> Any:
    # Envoy writes any `port_redirect` it is given (`:443` included): the view names a port only when the Location
    # must carry it.
    action = rc.RedirectAction(response_code=_REDIRECT_CODES[redirect.status_code])
    if redirect.scheme:
        action.scheme_redirect = redirect.scheme
    if redirect.hostname:
        action.host_redirect = redirect.hostname
    if redirect.port:
        action.port_redirect = redirect.port
    if redirect.path is not None:
        _path_rewrite(redirect.path, action)
    return action


def _edge_retry(forward: ir.Forward) -> Any | None:
    retry = forward.retry
    if retry is None and not forward.per_try_timeout_ms:
        return None
    policy = rc.RetryPolicy(num_retries=wrappers_pb2.UInt32Value(value=0))
    if retry is not None:
        policy.retry_on = EDGE_RETRY_ON + (",retriable-status-codes" if retry.codes else "")
        policy.retriable_status_codes.extend(retry.codes)
        policy.num_retries.value = EDGE_DEFAULT_ATTEMPTS if retry.attempts is None else retry.attempts
        if retry.backoff_ms:
            policy.retry_back_off.base_interval.CopyFrom(milliseconds(retry.backoff_ms))
    if forward.per_try_timeout_ms:
        policy.per_try_timeout.CopyFrom(milliseconds(forward.per_try_timeout_ms))
    return policy


def _mesh_retry(forward: ir.Forward, *, idempotent: bool) -> Any:
    """The retry-by-outcome policy (`aether.core.project.outcome`), with the rule's own retry fields on top."""
    policy = rc.RetryPolicy()
    policy.CopyFrom(retry_policy(idempotent=idempotent))
    retry = forward.retry
    if retry is not None:
        if retry.attempts is not None:
            policy.num_retries.value = retry.attempts
        codes = sorted({*policy.retriable_status_codes, *retry.codes})
        del policy.retriable_status_codes[:]
        policy.retriable_status_codes.extend(codes)
        if retry.backoff_ms:
            policy.retry_back_off.base_interval.CopyFrom(milliseconds(retry.backoff_ms))
            maximum = max(policy.retry_back_off.max_interval.ToMilliseconds(), retry.backoff_ms)
            policy.retry_back_off.max_interval.CopyFrom(milliseconds(maximum))
    if forward.per_try_timeout_ms:
        policy.per_try_timeout.CopyFrom(milliseconds(forward.per_try_timeout_ms))
    return policy


def _forward(forward: ir.Forward) -> Any:
    action = rc.RouteAction()
    if len(forward.destinations) == 1:
        (only,) = forward.destinations
        action.cluster = only.cluster
        if only.selector:
            action.metadata_match.CopyFrom(metadata_match(only.selector))
    else:
        for item in forward.destinations:
            weighted = action.weighted_clusters.clusters.add(
                name=item.cluster, weight=wrappers_pb2.UInt32Value(value=item.weight)
            )
            if item.selector:
                # A Service's share goes to the pods it selects, whichever others share its identity's cluster.
                weighted.metadata_match.CopyFrom(metadata_match(item.selector))
            # A backendRef's own header filters: only the requests sent to it (and their answers) change.
            _header_options(weighted, request=item.request_headers, response=item.response_headers)
    if forward.timeout_ms is not None:
        action.timeout.CopyFrom(milliseconds(forward.timeout_ms))
    if forward.host_rewrite:
        action.host_rewrite_literal = forward.host_rewrite
    if forward.path_rewrite is not None:
        _path_rewrite(forward.path_rewrite, action)
    for mirror in forward.mirrors:
        policy = action.request_mirror_policies.add(cluster=mirror.cluster)
        if mirror.per_million is not None:
            policy.runtime_fraction.default_value.CopyFrom(
                percent_pb2.FractionalPercent(
                    numerator=mirror.per_million, denominator=percent_pb2.FractionalPercent.MILLION
                )
            )
    return action


def _header_options(
    target: Any, *, request: ir.HeaderChanges | None, response: ir.HeaderChanges | None
) -> None:
    """Set the header changes of `target`: a Route or a weighted cluster (their fields have the same names)."""
    if request is not None:
        target.request_headers_to_add.extend(_headers(request))
        target.request_headers_to_remove.extend(name.lower() for name in request.remove)
    if response is not None:
        target.response_headers_to_add.extend(_headers(response))
        target.response_headers_to_remove.extend(name.lower() for name in response.remove)


def _base(route: ir.HTTPRoute, match: Any) -> Any:
    result = rc.Route(name=route.name, match=match)
    _header_options(result, request=route.request_headers, response=route.response_headers)
    return result


def envoy_routes(route: ir.HTTPRoute, *, mesh: bool) -> list[Any]:
    """Return the Envoy routes of one route of the view, in the order Envoy must try them.

    Args:
        route: A route of a mesh service's routing or of an edge virtual host.
        mesh: True for a GAMMA route: retries by outcome, split into a route for idempotent methods and one for
            the others unless the match fixes the method.
    """
    match = envoy_match(route.match)
    action = route.action
    if isinstance(action, ir.DirectResponse):
        result = _base(route, match)
        result.direct_response.CopyFrom(_direct(action))
        return [result]
    if isinstance(action, ir.Redirect):
        result = _base(route, match)
        result.redirect.CopyFrom(_redirect(action))
        return [result]
    forward = _forward(action)
    if not mesh:
        policy = _edge_retry(action)
        if policy is not None:
            forward.retry_policy.CopyFrom(policy)
        result = _base(route, match)
        result.route.CopyFrom(forward)
        return [result]
    variants = (True, False) if not route.method else (route.method in IDEMPOTENT_METHODS,)
    results = []
    for idempotent in variants:
        variant_match = match
        if len(variants) == 2 and idempotent:
            variant_match = rc.RouteMatch()
            variant_match.CopyFrom(match)
            variant_match.headers.append(idempotent_method_matcher())
        result = _base(route, variant_match)
        result.route.CopyFrom(forward)
        result.route.retry_policy.CopyFrom(_mesh_retry(action, idempotent=idempotent))
        results.append(result)
    return results


def envoy_route_list(routes: Iterable[ir.HTTPRoute], *, mesh: bool) -> list[Any]:
    """Return the Envoy routes of `routes`, in order (see `envoy_routes`)."""
    return [item for route in routes for item in envoy_routes(route, mesh=mesh)]


def envoy_virtual_host(vhost: ir.VirtualHost) -> Any:
    """Return the Envoy virtual host of an edge virtual host of the view."""
    return rc.VirtualHost(
        name=vhost.name, domains=list(vhost.domains), routes=envoy_route_list(vhost.routes, mesh=False)
    )
