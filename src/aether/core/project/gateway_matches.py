"""The Gateway API view's route matches (`aether.core.gateway.ir`) as Envoy `RouteMatch` messages."""

from __future__ import annotations

import re
from typing import Any

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.type.matcher.v3 import filter_state_pb2, regex_pb2, string_pb2
from envoy.type.v3 import percent_pb2

from aether.core.gateway import ir
from aether.core.project.names import SOURCE_IDENTITY_KEY


def string_matcher(match: ir.StringMatch) -> Any:
    """Return the Envoy string matcher of an exact, prefix or regular-expression test."""
    if match.kind == ir.EXACT:
        return string_pb2.StringMatcher(exact=match.value)
    if match.kind == ir.PREFIX:
        return string_pb2.StringMatcher(prefix=match.value)
    assert match.kind == ir.REGULAR_EXPRESSION, f"string match kind {match.kind!r}: this is a bug"
    return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=match.value))


def header_matcher(match: ir.NamedMatch) -> Any:
    """Return the Envoy header matcher of a header test (the name lower-cased: HTTP/2 and Envoy's spelling)."""
    return rc.HeaderMatcher(name=match.name.lower(), string_match=string_matcher(match.match))


def envoy_match(match: ir.RouteMatch) -> Any:
    """Return the RouteMatch of a route's match: path, headers, query parameters and the share it takes."""
    result = rc.RouteMatch()
    path = match.path
    if path.kind == ir.EXACT:
        result.path = path.value
    elif path.kind == ir.PREFIX:
        result.prefix = path.value
    elif path.kind == ir.SEGMENT_PREFIX:
        result.path_separated_prefix = path.value
    else:
        assert path.kind == ir.REGULAR_EXPRESSION, f"path match kind {path.kind!r}: this is a bug"
        result.safe_regex.regex = path.value
    result.headers.extend(header_matcher(item) for item in match.headers)
    result.query_parameters.extend(
        rc.QueryParameterMatcher(name=item.name, string_match=string_matcher(item.match))
        for item in match.query_params
    )
    if match.caller_namespace:
        # The caller's listener records its SPIFFE ID (`spiffe://<trust domain>/ns/<ns>/sa/<sa>`) in the filter
        # state: a consumer route takes the requests of its namespace's pods only.
        pattern = f"^spiffe://[^/]+/ns/{re.escape(match.caller_namespace)}/sa/[^/]+$"
        result.filter_state.append(
            filter_state_pb2.FilterStateMatcher(
                key=SOURCE_IDENTITY_KEY,
                string_match=string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=pattern)),
            )
        )
    if match.per_million is not None:
        result.runtime_fraction.default_value.CopyFrom(
            percent_pb2.FractionalPercent(
                numerator=match.per_million, denominator=percent_pb2.FractionalPercent.MILLION
            )
        )
    return result
