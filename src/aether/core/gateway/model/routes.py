"""Routes: HTTPRoute, GRPCRoute, TCPRoute, TLSRoute and UDPRoute as one typed model, parsed from the spec JSON.

A route that breaks the API's schema or CEL rules is rejected whole (`RouteRejected`): the API server refuses such
objects, so none of it is trusted. A rule whose regular expression Envoy would refuse (the dialect is ours to
choose, so this is not a schema matter) is dropped alone and marks the route partially invalid.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from aether.core.events.kube import ObjectMeta
from aether.core.gateway.model.fields import (
    SpecInvalid,
    duration_ms,
    hostnames,
    integer,
    items,
    obj,
    text,
    unique,
)
from aether.core.gateway.model.filters import (
    GRPC_FILTERS,
    HTTP_FILTERS,
    NO_FILTERS,
    PER_BACKEND_FILTERS,
    Filters,
    filters,
    per_backend_refused,
)
from aether.core.gateway.model.matches import (
    DEFAULT_GRPC_MATCH,
    DEFAULT_HTTP_MATCH,
    PATH_PREFIX,
    GRPCMatch,
    HTTPMatch,
    RegexInvalid,
    grpc_match,
    http_match,
)
from aether.core.gateway.model.refs import BackendRef, ParentRef, backend_refs, parent_refs

HTTP_ROUTE = "HTTPRoute"
GRPC_ROUTE = "GRPCRoute"
TCP_ROUTE = "TCPRoute"
TLS_ROUTE = "TLSRoute"
UDP_ROUTE = "UDPRoute"
ROUTE_KINDS = (HTTP_ROUTE, GRPC_ROUTE, TCP_ROUTE, TLS_ROUTE, UDP_ROUTE)
L4_KINDS = (TCP_ROUTE, TLS_ROUTE, UDP_ROUTE)

MAX_RULES = 16
MAX_MATCHES_PER_RULE = 64
MAX_GRPC_MATCHES_PER_RULE = 8
MAX_MATCHES = 128


@attrs.frozen(kw_only=True)
class Retry:
    """An HTTPRoute rule's `retry`: status codes, attempts and the backoff base."""

    codes: tuple[int, ...] = ()
    attempts: int | None = None
    backoff_ms: int | None = None


@attrs.frozen(kw_only=True)
class Rule:
    """One rule of a route. L4 rules have no matches, filters, timeouts or retry."""

    index: int
    """The rule's position in the route (precedence's last tie-breaker)."""
    name: str = ""
    matches: tuple[HTTPMatch | GRPCMatch, ...] = ()
    filters: Filters = NO_FILTERS
    backends: tuple[BackendRef, ...] = ()
    backend_filters: tuple[Filters, ...] = ()
    """The filters of each backendRef, in order (what is done only to the requests sent to that backend); empty
    when no backendRef has any."""
    request_timeout_ms: int | None = None
    backend_timeout_ms: int | None = None
    retry: Retry | None = None
    problem: str = ""
    """Why the rule is dropped (an expression Envoy would refuse); empty for a working rule."""

    def filters_of(self, backend: int) -> Filters:
        """Return the own filters of the rule's backendRef at index `backend`."""
        return self.backend_filters[backend] if self.backend_filters else NO_FILTERS

    def backend_filter_refusals(self) -> tuple[str, ...]:
        """The status message for each backendRef whose own filters cannot be applied to it alone (its requests
        are answered 500; the route is `Accepted=False / UnsupportedValue`, and the admission webhook denies it with
        the same words)."""
        if not self.backend_filters:
            return ()  # no backendRef has filters of its own
        return tuple(
            f"spec.rules[{self.index}].backendRefs[{index}].filters: {', '.join(kinds)} cannot be applied to one "
            f"backendRef (only {' and '.join(sorted(PER_BACKEND_FILTERS))} can; put it in the rule's filters), so "
            "the requests for that backend are answered 500"
            for index in range(len(self.backends))
            if (kinds := per_backend_refused(self.filters_of(index)))
        )


@attrs.frozen(kw_only=True)
class Route:
    """A parsed route of any kind."""

    kind: str
    meta: ObjectMeta
    parents: tuple[ParentRef, ...] = ()
    hostnames: tuple[str, ...] = ()
    rules: tuple[Rule, ...] = ()
    key: str = attrs.field(init=False, eq=False)
    """`<kind>/<namespace>/<name>` (computed once: precedence and status read it for every entry)."""
    age: tuple[str, str, str] = attrs.field(init=False, eq=False)
    """The cross-route tie-breaker: oldest creationTimestamp, then `<namespace>/<name>` (smaller first)."""

    @key.default
    def _key(self) -> str:
        return self.meta.key

    @age.default
    def _age(self) -> tuple[str, str, str]:
        return (self.meta.creation_timestamp, self.meta.namespace, self.meta.name)


@attrs.frozen(kw_only=True)
class RouteRejected:
    """A route the API's schema refuses: what is wrong, and the parentRefs we could read (for its status)."""

    kind: str
    meta: ObjectMeta
    reason: str
    message: str
    parents: tuple[ParentRef, ...] = ()


def _retry(value: Any, path: str) -> Retry | None:
    if value is None:
        return None
    fields = obj(value, path)
    codes = tuple(
        integer(code, f"{path}.codes[{index}]", low=400, high=599)
        for index, code in enumerate(items(fields.get("codes"), f"{path}.codes", max_items=64))
    )
    attempts = fields.get("attempts")
    return Retry(
        codes=tuple(sorted(set(codes))),
        attempts=integer(attempts, f"{path}.attempts", low=0, high=2**31 - 1)
        if attempts is not None
        else None,
        backoff_ms=duration_ms(fields.get("backoff"), f"{path}.backoff"),
    )


def _prefix_replacement_rule(rule: Rule, path: str) -> None:
    """The CEL rule: a ReplacePrefixMatch redirect or rewrite needs exactly one PathPrefix match."""
    for which, modifier in (
        ("RequestRedirect", rule.filters.redirect.path if rule.filters.redirect else None),
        ("URLRewrite", rule.filters.rewrite.path if rule.filters.rewrite else None),
    ):
        if modifier is None or modifier.type != "ReplacePrefixMatch":
            continue
        only = rule.matches[0] if len(rule.matches) == 1 else None
        if not isinstance(only, HTTPMatch) or only.path.type != PATH_PREFIX:
            raise SpecInvalid(
                path,
                f"When using {which} filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified",
            )


def _rule(kind: str, value: Any, path: str, *, index: int, namespace: str) -> Rule:
    fields = obj(value, path)
    # Paths are spelled only for what is given (an absent field takes its default without one).
    name = fields.get("name")
    name = "" if name is None else text(name, f"{path}.name", max_length=253)
    if kind in L4_KINDS:
        backends = backend_refs(
            fields.get("backendRefs"), f"{path}.backendRefs", namespace=namespace, min_items=1
        )
        return Rule(index=index, name=name, backends=backends)
    grpc = kind == GRPC_ROUTE
    raw_matches = fields.get("matches")
    if raw_matches is not None:
        raw_matches = items(
            raw_matches,
            f"{path}.matches",
            max_items=MAX_GRPC_MATCHES_PER_RULE if grpc else MAX_MATCHES_PER_RULE,
        )
    allowed = GRPC_FILTERS if grpc else HTTP_FILTERS
    raw_filters = fields.get("filters")
    rule_filters = (
        NO_FILTERS
        if raw_filters is None
        else filters(raw_filters, f"{path}.filters", namespace=namespace, allowed=allowed)
    )
    raw_backends = fields.get("backendRefs")
    backends = (
        () if raw_backends is None else backend_refs(raw_backends, f"{path}.backendRefs", namespace=namespace)
    )
    # `backend_refs` read each backendRef as an object (or refused it): its own filters are read from it.
    per_backend = [
        NO_FILTERS
        if (own := raw.get("filters")) is None
        else filters(own, f"{path}.backendRefs[{at}].filters", namespace=namespace, allowed=allowed)
        for at, raw in enumerate(raw_backends or ())
    ]
    if backends and rule_filters.redirect is not None:
        raise SpecInvalid(path, "RequestRedirect filter must not be used together with backendRefs")
    raw_timeouts = None if grpc else fields.get("timeouts")
    request = backend = None
    if raw_timeouts is not None:
        timeouts = obj(raw_timeouts, f"{path}.timeouts")
        request = duration_ms(timeouts.get("request"), f"{path}.timeouts.request")
        backend = duration_ms(timeouts.get("backendRequest"), f"{path}.timeouts.backendRequest")
        if request and backend is not None and backend > request:
            raise SpecInvalid(
                f"{path}.timeouts", "backendRequest timeout cannot be longer than request timeout"
            )
    problem = ""
    matches: tuple[HTTPMatch | GRPCMatch, ...]
    try:
        if grpc:
            matches = tuple(
                [grpc_match(raw, f"{path}.matches[{at}]") for at, raw in enumerate(raw_matches or ())]
            )
        else:
            matches = tuple(
                [http_match(raw, f"{path}.matches[{at}]") for at, raw in enumerate(raw_matches or ())]
            )
    except RegexInvalid as error:
        matches, problem = (), str(error)
    if not matches and not problem:
        matches = (DEFAULT_GRPC_MATCH,) if grpc else (DEFAULT_HTTP_MATCH,)
    rule = Rule(
        index=index,
        name=name,
        matches=matches,
        filters=rule_filters,
        backends=backends,
        backend_filters=tuple(per_backend) if any(item is not NO_FILTERS for item in per_backend) else (),
        request_timeout_ms=request,
        backend_timeout_ms=backend,
        retry=None
        if grpc or (raw_retry := fields.get("retry")) is None
        else _retry(raw_retry, f"{path}.retry"),
        problem=problem,
    )
    if not problem and (rule_filters.redirect is not None or rule_filters.rewrite is not None):
        _prefix_replacement_rule(rule, path)
    return rule


def _rules(kind: str, spec: Any, *, namespace: str) -> tuple[Rule, ...]:
    if kind in L4_KINDS:
        # The v1 L4 routes: exactly one rule.
        raw = items(spec.get("rules"), "spec.rules", max_items=1, min_items=1)
    else:
        raw = items(spec.get("rules"), "spec.rules", max_items=MAX_RULES)
        if not raw:
            raw = [{}]  # the API's default: one rule matching every request
    total = 0
    for at, rule in enumerate(raw):
        given = (rule if type(rule) is dict else obj(rule, f"spec.rules[{at}]")).get("matches")
        if given is not None:
            total += len(items(given, f"spec.rules[{at}].matches", max_items=MAX_MATCHES))
    if total > MAX_MATCHES:
        raise SpecInvalid(
            "spec.rules",
            f"While 16 rules and 64 matches per rule are allowed, the total number of matches across all rules in a route must be less than {MAX_MATCHES}",
            value=total,
        )
    rules = tuple(
        [
            _rule(kind, rule, f"spec.rules[{index}]", index=index, namespace=namespace)
            for index, rule in enumerate(raw)
        ]
    )
    names = [rule.name for rule in rules if rule.name]
    if len(names) > 1:
        unique(names, "spec.rules", what="rule names")
    return rules


def parse_route(kind: str, meta: ObjectMeta, spec_json: str) -> Route | RouteRejected:
    """Return the route of `kind` the spec describes, or why the API's schema refuses it."""
    parents: tuple[ParentRef, ...] = ()
    try:
        spec = obj(json.loads(spec_json), "spec")
        parents = parent_refs(spec.get("parentRefs"), "spec.parentRefs", namespace=meta.namespace)
        names: tuple[str, ...] = ()
        if kind != TCP_ROUTE and kind != UDP_ROUTE:
            names = hostnames(
                spec.get("hostnames"), "spec.hostnames", max_items=1024 if kind == TLS_ROUTE else 16
            )
            if kind == TLS_ROUTE and not names:
                raise SpecInvalid("spec.hostnames", "must have at least 1 item(s)", value=0)
        return Route(
            kind=kind,
            meta=meta,
            parents=parents,
            hostnames=names,
            rules=_rules(kind, spec, namespace=meta.namespace),
        )
    except SpecInvalid as error:
        return RouteRejected(kind=kind, meta=meta, reason=error.reason, message=str(error), parents=parents)
    except ValueError as error:  # JSON that does not parse (the log keeps whatever was observed)
        return RouteRejected(
            kind=kind, meta=meta, reason="UnsupportedValue", message=f"spec: not JSON: {error}"
        )
