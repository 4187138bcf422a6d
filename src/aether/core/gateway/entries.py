"""What a matched rule does, as the view's routes: forward (weighted, mirrored, rewritten, with timeouts and
retries), redirect, or answer 500.

The unit is an `Entry`: one match of one rule of one route, its backends resolved (what precedence orders). A
rule's backends that did not resolve keep their share of the traffic and answer it 500 (the API's rule): that share
is a route of its own placed just before the forwarding one, the same match taking `unresolved weight / total
weight` of the requests and answering 500; what it does not take falls through to the forwarding route over the
resolved backends. Every route thus names a cluster of a resolved backend or answers directly, whatever resolves.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence

import attrs

from aether.core.gateway import ir
from aether.core.gateway.model.filters import HeaderModifier, PathModifier, per_backend_refused
from aether.core.gateway.model.matches import PATH_PREFIX, GRPCMatch, HTTPMatch
from aether.core.gateway.model.routes import Route, Rule
from aether.core.gateway.resolve import Backend
from aether.core.gateway.route_matches import route_match, trimmed_prefix

UNRESOLVED_STATUS = 500
_MILLION = 1_000_000
_SCHEME_PORTS = {"http": 80, "https": 443}
_ALL = (100, 100)
"""A mirror's default fraction: every request."""


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
    listener_port: int = 0
    """The port of the edge listener the entry is served on (what a redirect keeps); 0 for mesh entries."""
    listener_scheme: str = ""
    """`http` or `https`: the scheme the edge listener serves; empty for mesh entries."""
    caller_namespace: str = ""
    """A GAMMA consumer route's namespace: the entry takes the requests of that namespace's callers only."""

    @property
    def match(self) -> HTTPMatch | GRPCMatch:
        """The entry's match."""
        return self.rule.matches[self.match_index]

    @property
    def name(self) -> str:
        """The route name: `<kind>/<ns>/<name>/rule/<i>/match/<j>` (what an operator greps a dump for)."""
        return f"{self.route.key}/rule/{self.rule.index}/match/{self.match_index}"


def _changes(modifier: HeaderModifier | None) -> ir.HeaderChanges | None:
    if modifier is None:
        return None
    return ir.HeaderChanges(set=modifier.set, add=modifier.add, remove=modifier.remove)


def _path_rewrite(modifier: PathModifier, match: HTTPMatch | GRPCMatch) -> ir.PathRewrite | None:
    """Return the path part of a redirect or forward; None when the path stays.

    ReplacePrefixMatch swaps whole path elements: prefix `/foo` with `/bar` turns `/foo/x` into `/bar/x`; with
    `/` into `/x`; prefix `/` with `/bar` turns `/x` into `/bar/x`.
    """
    if modifier.type == "ReplaceFullPath":
        return ir.PathRewrite(kind=ir.REPLACE_FULL_PATH, value=modifier.value)
    # Invariant: the model accepts ReplacePrefixMatch only on a PathPrefix match.
    assert isinstance(match, HTTPMatch)
    assert match.path.type == PATH_PREFIX
    prefix, replacement = trimmed_prefix(match.path.value), trimmed_prefix(modifier.value)
    if prefix and replacement:
        return ir.PathRewrite(kind=ir.REPLACE_PREFIX, value=replacement)
    if prefix:
        return ir.PathRewrite(kind=ir.REPLACE_REGEX, pattern=f"^{re.escape(prefix)}/*", value="/")
    if replacement:
        return ir.PathRewrite(kind=ir.REPLACE_REGEX, pattern="^/", value=f"{replacement}/")
    return None


def _redirect(entry: Entry) -> ir.Redirect:
    redirect = entry.rule.filters.redirect
    assert redirect is not None
    # The API: no port given means the scheme's well-known port when the scheme changes, else the listener's port;
    # and Location SHOULD NOT name the well-known port of the scheme it has. So the port is always decided here
    # (the edge strips the port a client put in Host, which never decides), and a well-known one is named by naming
    # none. A mesh entry has no listener: without a port or scheme the request's own port stays.
    port = redirect.port or _SCHEME_PORTS.get(redirect.scheme, 0) or entry.listener_port
    scheme = redirect.scheme or entry.listener_scheme
    return ir.Redirect(
        status_code=redirect.status_code,
        scheme=redirect.scheme,
        hostname=redirect.hostname,
        port=port if port != _SCHEME_PORTS.get(scheme) else 0,
        path=_path_rewrite(redirect.path, entry.match) if redirect.path is not None else None,
    )


def _forward(entry: Entry, destinations: Sequence[ir.Destination], *, mesh_domain: str) -> ir.Forward:
    rule = entry.rule
    request, backend = rule.request_timeout_ms, rule.backend_timeout_ms
    rewrite = rule.filters.rewrite
    retry = rule.retry
    return _shared_forward(
        tuple(destinations),
        # backendRequest bounds each attempt, never the request: retries go on while the request timeout lasts.
        # Without one, the attempts bound the request (0, since the data plane's default could cut one short).
        request if request is not None else 0 if backend else None,
        backend or 0,
        None
        if retry is None
        else ir.Retry(codes=retry.codes, attempts=retry.attempts, backoff_ms=retry.backoff_ms or 0),
        rewrite.hostname if rewrite is not None else "",
        (
            _path_rewrite(rewrite.path, entry.match)
            if rewrite is not None and rewrite.path is not None
            else None
        ),
        tuple(
            ir.Mirror(
                cluster=backend_ref.cluster_name(mesh_domain=mesh_domain),
                per_million=(
                    None
                    if (mirror.numerator, mirror.denominator) == _ALL
                    else mirror.numerator * _MILLION // mirror.denominator
                ),
            )
            for mirror, backend_ref in zip(rule.filters.mirrors, entry.mirrors, strict=True)
            if backend_ref.service
        )
        if rule.filters.mirrors
        else (),
    )


@functools.lru_cache(maxsize=4096)  # a pure function of values; routes to the same backends share one Forward
def _shared_forward(
    destinations: tuple[ir.Destination, ...],
    timeout_ms: int | None,
    per_try_timeout_ms: int,
    retry: ir.Retry | None,
    host_rewrite: str,
    path_rewrite: ir.PathRewrite | None,
    mirrors: tuple[ir.Mirror, ...],
) -> ir.Forward:
    return ir.Forward(
        destinations=destinations,
        timeout_ms=timeout_ms,
        per_try_timeout_ms=per_try_timeout_ms,
        retry=retry,
        host_rewrite=host_rewrite,
        path_rewrite=path_rewrite,
        mirrors=mirrors,
    )


@functools.lru_cache(maxsize=4096)  # a pure function of values; routes share their backends
def _plain_destination(backend: Backend, mesh_domain: str) -> ir.Destination:
    """The destination of a backend without changes of its own."""
    return ir.Destination(
        cluster=backend.cluster_name(mesh_domain=mesh_domain),
        weight=backend.ref.weight,
        selector=backend.selector,
    )


def _then(first: ir.HeaderChanges | None, later: ir.HeaderChanges | None) -> ir.HeaderChanges | None:
    if first is None or later is None:
        return first or later
    return first.then(later)


def _refused(entry: Entry) -> dict[int, tuple[str, ...]]:
    """Return, per backendRef index, the filter types of its own it has that cannot apply to it alone."""
    if not entry.rule.backend_filters:
        return {}  # no backendRef has filters of its own
    found = {index: per_backend_refused(entry.rule.filters_of(index)) for index in range(len(entry.backends))}
    return {index: kinds for index, kinds in found.items() if kinds}


def _refusal(refused: dict[int, tuple[str, ...]]) -> str:
    return "; ".join(
        f"backendRefs[{index}] has filter {', '.join(kinds)}, which cannot apply to one backend"
        for index, kinds in sorted(refused.items())
    )


def entry_routes(entry: Entry, *, mesh_domain: str) -> tuple[ir.HTTPRoute, ...]:
    """Return the routes of one entry, in the order they must be tried.

    A backendRef's own header filters change only the requests sent to it: its destination carries the rule's
    changes and then its own, and the route none. A backendRef whose own filters cannot apply to it alone (a
    redirect, rewrite or mirror) is never sent to without them: its share answers 500, as an unresolved one's.

    Args:
        entry: The match and its rule, backends resolved.
        mesh_domain: The mesh domain (cluster names).
    """
    rule = entry.rule
    filters = rule.filters
    given = entry.match
    match = route_match(given)
    if entry.caller_namespace:
        match = attrs.evolve(match, caller_namespace=entry.caller_namespace)
    rule_request, rule_response = _changes(filters.request_headers), _changes(filters.response_headers)
    name, method = entry.name, given.method if isinstance(given, HTTPMatch) else "POST"

    def route(
        action: ir.Action,
        *,
        tested: ir.RouteMatch = match,
        request: ir.HeaderChanges | None = rule_request,
        response: ir.HeaderChanges | None = rule_response,
    ) -> ir.HTTPRoute:
        return ir.HTTPRoute(
            name=name,
            match=tested,
            action=action,
            method=method,
            request_headers=request,
            response_headers=response,
        )

    if filters.unsupported:
        return (
            route(
                ir.DirectResponse(
                    status=UNRESOLVED_STATUS,
                    body=f"aether: filter {', '.join(filters.unsupported)} is not supported\n",
                )
            ),
        )
    if filters.redirect is not None:
        return (route(_redirect(entry)),)
    refused = _refused(entry)
    usable: list[tuple[int, Backend]] = []
    unresolved = 0
    for index, item in enumerate(entry.backends):
        if not item.service or index in refused:
            unresolved += item.ref.weight
        elif item.ref.weight > 0:
            usable.append((index, item))
    own = (
        [
            (
                _changes(rule.filters_of(index).request_headers),
                _changes(rule.filters_of(index).response_headers),
            )
            for index, _ in usable
        ]
        if rule.backend_filters
        else [(None, None)] * len(usable)  # no backendRef has filters of its own
    )
    per_destination = len(usable) > 1 and any(changes != (None, None) for changes in own)
    resolved = (
        [
            ir.Destination(
                cluster=item.cluster_name(mesh_domain=mesh_domain),
                weight=item.ref.weight,
                selector=item.selector,
                request_headers=_then(rule_request, request),
                response_headers=_then(rule_response, response),
            )
            for (_, item), (request, response) in zip(usable, own, strict=True)
        ]
        if per_destination
        else [_plain_destination(item, mesh_domain) for _, item in usable]
    )
    if not resolved:
        why = (
            "no backend"
            if not entry.backends
            else _refusal(refused)
            if refused
            else "no backend resolved"
            if unresolved
            else "every backend has weight 0"
        )
        body = f"aether: {entry.route.key} rule {rule.index}: {why}\n"
        return (route(ir.DirectResponse(status=UNRESOLVED_STATUS, body=body)),)
    request, response = own[0] if len(own) == 1 else (None, None)
    forward = route(
        _forward(entry, resolved, mesh_domain=mesh_domain),
        request=None if per_destination else _then(rule_request, request),
        response=None if per_destination else _then(rule_response, response),
    )
    if not unresolved:
        return (forward,)
    share = route(
        ir.DirectResponse(
            status=UNRESOLVED_STATUS,
            body=f"aether: {entry.route.key} rule {rule.index}: {_refusal(refused) if refused else 'backend not resolved'}\n",
        ),
        tested=attrs.evolve(
            match, per_million=unresolved * _MILLION // sum(item.ref.weight for item in entry.backends)
        ),
    )
    return (share, forward)


def translate(
    entries: Iterable[Entry], *, routes_of: Callable[[Entry], tuple[ir.HTTPRoute, ...]]
) -> tuple[list[ir.HTTPRoute], set[str]]:
    """Return the routes of `entries` (already in precedence order), each from `routes_of`, and the mesh services
    they send to."""
    routes: list[ir.HTTPRoute] = []
    services: set[str] = set()
    for entry in entries:
        routes.extend(routes_of(entry))
        services.update(sent_services(entry))
    return routes, services


def sent_services(entry: Entry) -> frozenset[str]:
    """Return the mesh services the routes of `entry` send or mirror to."""
    filters = entry.rule.filters
    if filters.redirect is not None or filters.unsupported:
        return frozenset()
    # A backend whose own filters are refused is never sent to: its cluster is not needed.
    refused = _refused(entry)
    sent = (
        tuple([item for index, item in enumerate(entry.backends) if index not in refused])
        if refused
        else entry.backends
    )
    return _services(sent, entry.mirrors)


@functools.lru_cache(maxsize=4096)  # a pure function of values; routes repeat the same backends
def _services(backends: tuple[Backend, ...], mirrors: tuple[Backend, ...]) -> frozenset[str]:
    # A slice backend's cluster is not a mesh service's: no mesh service is demanded for it.
    return frozenset(item.service for item in (*backends, *mirrors) if item.service and not item.cluster)
