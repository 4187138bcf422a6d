"""Gateway API matches as Envoy `RouteMatch` messages (paths, headers, query parameters, methods, gRPC methods)."""

from __future__ import annotations

import re
from typing import Any

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.type.matcher.v3 import regex_pb2, string_pb2

from aether.core.gateway.model.matches import EXACT, PATH_PREFIX, GRPCMatch, HTTPMatch, ValueMatch

METHOD_HEADER = ":method"
CONTENT_TYPE = "content-type"
GRPC_CONTENT_TYPE = "application/grpc"
"""gRPC requests carry `application/grpc` or `application/grpc+<codec>`: what keeps GRPCRoutes off HTTP requests."""


def _string(kind: str, value: str) -> Any:
    if kind == EXACT:
        return string_pb2.StringMatcher(exact=value)
    return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=value))


def header_matcher(match: ValueMatch) -> Any:
    """Return the Envoy header matcher of a header match (the name lower-cased: HTTP/2 and Envoy's spelling)."""
    return rc.HeaderMatcher(name=match.name.lower(), string_match=_string(match.type, match.value))


def trimmed_prefix(value: str) -> str:
    """Return a PathPrefix without its trailing slashes (`/` becomes empty): the API ignores a trailing `/`."""
    return value.rstrip("/")


def http_route_match(match: HTTPMatch) -> Any:
    """Return the RouteMatch of an HTTPRoute match.

    PathPrefix matches whole path elements (`/abc` matches `/abc` and `/abc/x`, not `/abcd`), which is what
    Envoy's `path_separated_prefix` does; the prefix `/` is a plain prefix.
    """
    result = rc.RouteMatch()
    path = match.path
    if path.type == EXACT:
        result.path = path.value
    elif path.type == PATH_PREFIX:
        prefix = trimmed_prefix(path.value)
        if prefix:
            result.path_separated_prefix = prefix
        else:
            result.prefix = "/"
    else:
        result.safe_regex.regex = path.value
    result.headers.extend(header_matcher(item) for item in match.headers)
    if match.method:
        result.headers.append(
            rc.HeaderMatcher(name=METHOD_HEADER, string_match=string_pb2.StringMatcher(exact=match.method))
        )
    result.query_parameters.extend(
        rc.QueryParameterMatcher(name=item.name, string_match=_string(item.type, item.value))
        for item in match.query_params
    )
    return result


def grpc_route_match(match: GRPCMatch) -> Any:
    """Return the RouteMatch of a GRPCRoute match: the `/<service>/<method>` path, headers, and the gRPC content type.

    An exact service and method is an exact path, a service alone a prefix, anything else a regex.
    """
    result = rc.RouteMatch()
    if match.type == EXACT and match.service and match.method:
        result.path = f"/{match.service}/{match.method}"
    elif match.type == EXACT and match.service:
        result.prefix = f"/{match.service}/"
    elif match.type == EXACT and match.method:
        result.safe_regex.regex = f"/[^/]+/{re.escape(match.method)}"
    elif match.service or match.method:
        result.safe_regex.regex = f"/({match.service or '[^/]+'})/({match.method or '[^/]+'})"
    else:
        result.prefix = "/"
    result.headers.append(
        rc.HeaderMatcher(name=CONTENT_TYPE, string_match=string_pb2.StringMatcher(prefix=GRPC_CONTENT_TYPE))
    )
    result.headers.extend(header_matcher(item) for item in match.headers)
    return result
