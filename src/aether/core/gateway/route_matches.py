"""Gateway API matches (paths, headers, query parameters, methods, gRPC methods) as the view's route matches."""

from __future__ import annotations

import functools
import re

from aether.core.gateway import ir
from aether.core.gateway.model.matches import (
    EXACT,
    PATH_PREFIX,
    REGULAR_EXPRESSION,
    GRPCMatch,
    HTTPMatch,
    ValueMatch,
)

METHOD_HEADER = ":method"
CONTENT_TYPE = "content-type"
GRPC_CONTENT_TYPE = "application/grpc"
"""gRPC requests carry `application/grpc` or `application/grpc+<codec>`: what keeps GRPCRoutes off HTTP requests."""

_VALUE_KINDS = {EXACT: ir.EXACT, REGULAR_EXPRESSION: ir.REGULAR_EXPRESSION}


@functools.lru_cache(maxsize=4096)  # a pure function of a value; header matches repeat across the routes
def _named(match: ValueMatch) -> ir.NamedMatch:
    return ir.NamedMatch(
        name=match.name, match=ir.StringMatch(kind=_VALUE_KINDS[match.type], value=match.value)
    )


def trimmed_prefix(value: str) -> str:
    """Return a PathPrefix without its trailing slashes (`/` becomes empty): the API ignores a trailing `/`."""
    return value.rstrip("/")


def http_route_match(match: HTTPMatch) -> ir.RouteMatch:
    """Return the match of an HTTPRoute match.

    PathPrefix matches whole path elements (`/abc` matches `/abc` and `/abc/x`, not `/abcd`): a segment prefix;
    the prefix `/` is a plain prefix. The method is a `:method` header test after the rule's header tests.
    """
    path = match.path
    if path.type == EXACT:
        tested = ir.StringMatch(kind=ir.EXACT, value=path.value)
    elif path.type == PATH_PREFIX:
        prefix = trimmed_prefix(path.value)
        tested = (
            ir.StringMatch(kind=ir.SEGMENT_PREFIX, value=prefix)
            if prefix
            else ir.StringMatch(kind=ir.PREFIX, value="/")
        )
    else:
        tested = ir.StringMatch(kind=ir.REGULAR_EXPRESSION, value=path.value)
    headers = [_named(item) for item in match.headers]
    if match.method:
        headers.append(
            ir.NamedMatch(name=METHOD_HEADER, match=ir.StringMatch(kind=ir.EXACT, value=match.method))
        )
    return ir.RouteMatch(
        path=tested,
        headers=tuple(headers),
        query_params=tuple([_named(item) for item in match.query_params]) if match.query_params else (),
    )


def grpc_route_match(match: GRPCMatch) -> ir.RouteMatch:
    """Return the match of a GRPCRoute match: the `/<service>/<method>` path, the gRPC content type, headers.

    An exact service and method is an exact path, a service alone a prefix, anything else a regex.
    """
    if match.type == EXACT and match.service and match.method:
        path = ir.StringMatch(kind=ir.EXACT, value=f"/{match.service}/{match.method}")
    elif match.type == EXACT and match.service:
        path = ir.StringMatch(kind=ir.PREFIX, value=f"/{match.service}/")
    elif match.type == EXACT and match.method:
        path = ir.StringMatch(kind=ir.REGULAR_EXPRESSION, value=f"/[^/]+/{re.escape(match.method)}")
    elif match.service or match.method:
        path = ir.StringMatch(
            kind=ir.REGULAR_EXPRESSION, value=f"/({match.service or '[^/]+'})/({match.method or '[^/]+'})"
        )
    else:
        path = ir.StringMatch(kind=ir.PREFIX, value="/")
    content_type = ir.NamedMatch(
        name=CONTENT_TYPE, match=ir.StringMatch(kind=ir.PREFIX, value=GRPC_CONTENT_TYPE)
    )
    return ir.RouteMatch(path=path, headers=(content_type, *(_named(item) for item in match.headers)))


def route_match(match: HTTPMatch | GRPCMatch) -> ir.RouteMatch:
    """Return the match of an HTTPRoute or GRPCRoute match."""
    return http_route_match(match) if isinstance(match, HTTPMatch) else grpc_route_match(match)
