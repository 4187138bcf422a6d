"""What a matched rule does, as Envoy routes: forward (weighted, mirrored, rewritten, with timeouts and retries),
redirect, or answer 500.

A rule's backends that did not resolve keep their share of the traffic and answer it 500 (the API's rule). Envoy's
weighted clusters cannot answer locally, so that share is a route of its own placed just before the forwarding one:
the same match plus a `runtime_fraction` of `unresolved weight / total weight`, answering 500; what it does not take
falls through to the forwarding route over the resolved backends. Every route thus names an emitted cluster or
answers directly, whatever resolves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs
from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2

from aether.core.gateway.matching import grpc_route_match, http_route_match, trimmed_prefix
from aether.core.gateway.model.filters import HeaderModifier, PathModifier
from aether.core.gateway.model.matches import PATH_PREFIX, GRPCMatch, HTTPMatch
from aether.core.gateway.model.routes import Route, Rule
from aether.core.gateway.resolve import Backend
from aether.core.project.messages import milliseconds
from aether.core.project.names import IDEMPOTENT_METHODS, http_cluster_name
from aether.core.project.outcome import idempotent_method_matcher, retry_policy

UNRESOLVED_STATUS = 500
_MILLION = 1_000_000
_REDIRECT_CODES = {
    301: rc.RedirectAction.MOVED_PERMANENTLY,
    302: rc.RedirectAction.FOUND,
    303: rc.RedirectAction.SEE_OTHER,
    307: rc.RedirectAction.TEMPORARY_REDIRECT,
    308: rc.RedirectAction.PERMANENT_REDIRECT,
}
_SCHEME_PORTS = {"http": 80, "https": 443}
EDGE_RETRY_ON = "connect-failure,refused-stream,reset-before-request"
"""What an edge route retries on when a rule asks for retries: failures where the backend never processed the request
(the API's SHOULD), plus the rule's status codes."""


@attrs.frozen(kw_only=True)
class Entry:
    """One match of one rule of one route, with its backends resolved: the unit precedence orders."""

    route: Route
    rule: Rule
    match_index: int
    backends: tuple[Backend, ...] = ()
    mirrors: tuple[Backend, ...] = ()
    """The resolved backend of each of the rule's mirrors, in order."""
    host: str = ""
    """The route hostname this entry matched a domain with (edge precedence); empty for mesh entries."""

    @property
    def match(self) -> HTTPMatch | GRPCMatch:
        """The entry's match."""
        return self.rule.matches[self.match_index]

    @property
    def name(self) -> str:
        """The Envoy route name: `<kind>/<ns>/<name>/rule/<i>/match/<j>` (what an operator greps a dump for)."""
        return f"{self.route.key}/rule/{self.rule.index}/match/{self.match_index}"


def _direct(status: int, body: str) -> Any:
    return rc.DirectResponseAction(status=status, body=base_pb2.DataSource(inline_string=body))


def _headers(modifier: HeaderModifier) -> list[Any]:
    options = [
        base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=name.lower(), value=value),
            append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
        )
        for name, value in modifier.set
    ]
    options.extend(
        base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=name.lower(), value=value),
            append_action=base_pb2.HeaderValueOption.APPEND_IF_EXISTS_OR_ADD,
        )
        for name, value in modifier.add
    )
    return options


def _path_rewrite(modifier: PathModifier, match: HTTPMatch | GRPCMatch, target: Any) -> None:
    """Set the path part of a redirect or forward (`target`: a RedirectAction or RouteAction).

    ReplacePrefixMatch swaps whole path elements: prefix `/foo` with `/bar` turns `/foo/x` into `/bar/x`; with
    `/` into `/x`; prefix `/` with `/bar` turns `/x` into `/bar/x`.
    """
    if modifier.type == "ReplaceFullPath":
        if hasattr(target, "path_redirect"):
            target.path_redirect = modifier.value
        else:
            target.regex_rewrite.pattern.regex = "^.*$"
            target.regex_rewrite.substitution = modifier.value
        return
    assert isinstance(match, HTTPMatch)
    assert match.path.type == PATH_PREFIX
    prefix, replacement = trimmed_prefix(match.path.value), trimmed_prefix(modifier.value)
    if prefix and replacement:
        target.prefix_rewrite = replacement
    elif prefix:
        target.regex_rewrite.pattern.regex = f"^{re.escape(prefix)}/*"
        target.regex_rewrite.substitution = "/"
    elif replacement:
        target.regex_rewrite.pattern.regex = "^/"
        target.regex_rewrite.substitution = f"{replacement}/"


def _redirect(entry: Entry) -> Any:
    redirect = entry.rule.filters.redirect
    assert redirect is not None
    action = rc.RedirectAction(response_code=_REDIRECT_CODES[redirect.status_code])
    if redirect.scheme:
        action.scheme_redirect = redirect.scheme
    if redirect.hostname:
        action.host_redirect = redirect.hostname
    # The API: no port given means the scheme's well-known port when the scheme changes, else the request's own
    # port; and Location SHOULD NOT name a scheme's well-known port. Envoy writes any `port_redirect` it is given
    # (`:443` included), so a well-known port is expressed by giving none: with a hostname the Location then has
    # no port; without one Envoy keeps the request's port unless it was its own scheme's default.
    port = redirect.port or _SCHEME_PORTS.get(redirect.scheme, 0)
    if port and port != _SCHEME_PORTS.get(redirect.scheme):
        action.port_redirect = port
    if redirect.path is not None:
        _path_rewrite(redirect.path, entry.match, action)
    return action


def _edge_retry(rule: Rule) -> Any | None:
    retry = rule.retry
    if retry is None and not rule.backend_timeout_ms:
        return None
    policy = rc.RetryPolicy(num_retries=wrappers_pb2.UInt32Value(value=0))
    if retry is not None:
        policy.retry_on = EDGE_RETRY_ON + (",retriable-status-codes" if retry.codes else "")
        policy.retriable_status_codes.extend(retry.codes)
        policy.num_retries.value = 1 if retry.attempts is None else retry.attempts
        if retry.backoff_ms:
            policy.retry_back_off.base_interval.CopyFrom(milliseconds(retry.backoff_ms))
    if rule.backend_timeout_ms:
        policy.per_try_timeout.CopyFrom(milliseconds(rule.backend_timeout_ms))
    return policy


def _mesh_retry(rule: Rule, *, idempotent: bool) -> Any:
    """The retry-by-outcome policy (`aether.core.project.outcome`), with the rule's own retry fields on top."""
    policy = rc.RetryPolicy()
    policy.CopyFrom(retry_policy(idempotent=idempotent))
    retry = rule.retry
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
    if rule.backend_timeout_ms:
        policy.per_try_timeout.CopyFrom(milliseconds(rule.backend_timeout_ms))
    return policy


def _forward(entry: Entry, clusters: list[tuple[str, int]], *, mesh_domain: str, l7: bool = True) -> Any:
    rule = entry.rule
    action = rc.RouteAction()
    if len(clusters) == 1:
        action.cluster = clusters[0][0]
    else:
        action.weighted_clusters.clusters.extend(
            rc.WeightedCluster.ClusterWeight(name=name, weight=wrappers_pb2.UInt32Value(value=weight))
            for name, weight in clusters
        )
    request, backend = rule.request_timeout_ms, rule.backend_timeout_ms
    if request is not None:
        action.timeout.CopyFrom(milliseconds(request))
    elif backend:
        action.timeout.CopyFrom(milliseconds(backend))
    rewrite = rule.filters.rewrite
    if rewrite is not None and l7:
        if rewrite.hostname:
            action.host_rewrite_literal = rewrite.hostname
        if rewrite.path is not None:
            _path_rewrite(rewrite.path, entry.match, action)
    for mirror, backend_ref in zip(rule.filters.mirrors, entry.mirrors, strict=True):
        if not backend_ref.service:
            continue
        policy = action.request_mirror_policies.add(
            cluster=http_cluster_name(backend_ref.service, mesh_domain=mesh_domain)
        )
        if (mirror.numerator, mirror.denominator) != (100, 100):
            policy.runtime_fraction.default_value.CopyFrom(
                percent_pb2.FractionalPercent(
                    numerator=mirror.numerator * _MILLION // mirror.denominator,
                    denominator=percent_pb2.FractionalPercent.MILLION,
                )
            )
    return action


def _base(entry: Entry, match: Any) -> Any:
    route = rc.Route(name=entry.name, match=match)
    filters = entry.rule.filters
    if filters.request_headers is not None:
        route.request_headers_to_add.extend(_headers(filters.request_headers))
        route.request_headers_to_remove.extend(name.lower() for name in filters.request_headers.remove)
    if filters.response_headers is not None:
        route.response_headers_to_add.extend(_headers(filters.response_headers))
        route.response_headers_to_remove.extend(name.lower() for name in filters.response_headers.remove)
    return route


def envoy_match(entry: Entry) -> Any:
    """Return the entry's RouteMatch (HTTP or gRPC)."""
    match = entry.match
    return http_route_match(match) if isinstance(match, HTTPMatch) else grpc_route_match(match)


def envoy_routes(entry: Entry, *, mesh_domain: str, mesh: bool) -> list[Any]:
    """Return the Envoy routes of one entry, in the order Envoy must try them.

    Args:
        entry: The match and its rule, backends resolved.
        mesh_domain: The mesh domain (cluster names).
        mesh: True for a GAMMA route: retries by outcome (`aether.core.project.outcome`), split into a route for
            idempotent methods (which also replays unanswered requests) and one for the others.
    """
    rule = entry.rule
    match = envoy_match(entry)
    if rule.filters.unsupported:
        route = _base(entry, match)
        route.direct_response.CopyFrom(
            _direct(
                UNRESOLVED_STATUS, f"aether: filter {', '.join(rule.filters.unsupported)} is not supported\n"
            )
        )
        return [route]
    if rule.filters.redirect is not None:
        route = _base(entry, match)
        route.redirect.CopyFrom(_redirect(entry))
        return [route]
    total = sum(item.ref.weight for item in entry.backends)
    resolved = [
        (http_cluster_name(item.service, mesh_domain=mesh_domain), item.ref.weight)
        for item in entry.backends
        if item.service and item.ref.weight > 0
    ]
    unresolved = sum(item.ref.weight for item in entry.backends if not item.service)
    if not resolved:
        route = _base(entry, match)
        why = (
            "no backend"
            if not entry.backends
            else "no backend resolved"
            if unresolved
            else "every backend has weight 0"
        )
        route.direct_response.CopyFrom(
            _direct(UNRESOLVED_STATUS, f"aether: {entry.route.key} rule {rule.index}: {why}\n")
        )
        return [route]
    routes = []
    if unresolved:
        share = rc.RouteMatch()
        share.CopyFrom(match)
        share.runtime_fraction.default_value.CopyFrom(
            percent_pb2.FractionalPercent(
                numerator=unresolved * _MILLION // total, denominator=percent_pb2.FractionalPercent.MILLION
            )
        )
        route = _base(entry, share)
        route.direct_response.CopyFrom(
            _direct(UNRESOLVED_STATUS, f"aether: {entry.route.key} rule {rule.index}: backend not resolved\n")
        )
        routes.append(route)
    action = _forward(entry, resolved, mesh_domain=mesh_domain)
    if not mesh:
        policy = _edge_retry(rule)
        if policy is not None:
            action.retry_policy.CopyFrom(policy)
        route = _base(entry, match)
        route.route.CopyFrom(action)
        return [*routes, route]
    method = entry.match.method if isinstance(entry.match, HTTPMatch) else "POST"
    variants = (True, False) if not method else (method in IDEMPOTENT_METHODS,)
    for idempotent in variants:
        variant_match = match
        if len(variants) == 2 and idempotent:
            variant_match = rc.RouteMatch()
            variant_match.CopyFrom(match)
            variant_match.headers.append(idempotent_method_matcher())
        route = _base(entry, variant_match)
        route.route.CopyFrom(action)
        route.route.retry_policy.CopyFrom(_mesh_retry(rule, idempotent=idempotent))
        routes.append(route)
    return routes


def translate(
    entries: Iterable[Entry], *, routes_of: Callable[[Entry], list[Any]]
) -> tuple[list[Any], set[str]]:
    """Return the Envoy routes of `entries` (already in precedence order), each from `routes_of`, and the mesh
    services they send to."""
    routes: list[Any] = []
    services: set[str] = set()
    for entry in entries:
        routes.extend(routes_of(entry))
        if entry.rule.filters.redirect is None and not entry.rule.filters.unsupported:
            services.update(item.service for item in (*entry.backends, *entry.mirrors) if item.service)
    return routes, services
