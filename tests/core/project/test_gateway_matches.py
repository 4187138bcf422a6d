"""The view's route matches as Envoy RouteMatch messages."""

from __future__ import annotations

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from envoy.type.v3 import percent_pb2

from aether.core.gateway import ir
from aether.core.project.gateway_matches import envoy_match


def test_each_path_kind_is_its_envoy_path_specifier() -> None:
    """Exact is `path`, Prefix `prefix`, SegmentPrefix `path_separated_prefix`, RegularExpression `safe_regex`."""
    paths = [
        envoy_match(ir.RouteMatch(path=ir.StringMatch(kind=kind, value="/a"))).WhichOneof("path_specifier")
        for kind in ir.PATH_KINDS
    ]
    assert paths == ["path", "prefix", "path_separated_prefix", "safe_regex"]


def test_headers_are_lower_cased_query_parameters_are_not_and_a_share_is_a_runtime_fraction() -> None:
    """Header names take Envoy's lower case, query names stay exact; a share of millionths is a fraction."""
    match = ir.RouteMatch(
        path=ir.StringMatch(kind=ir.EXACT, value="/a"),
        headers=(
            ir.NamedMatch(name="X-Env", match=ir.StringMatch(kind=ir.REGULAR_EXPRESSION, value="p.*")),
            ir.NamedMatch(
                name="content-type", match=ir.StringMatch(kind=ir.PREFIX, value="application/grpc")
            ),
        ),
        query_params=(ir.NamedMatch(name="Page", match=ir.StringMatch(kind=ir.EXACT, value="1")),),
        per_million=250_000,
    )
    expected = rc.RouteMatch(
        path="/a",
        headers=[
            rc.HeaderMatcher(
                name="x-env",
                string_match=string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex="p.*")),
            ),
            rc.HeaderMatcher(
                name="content-type", string_match=string_pb2.StringMatcher(prefix="application/grpc")
            ),
        ],
        query_parameters=[
            rc.QueryParameterMatcher(name="Page", string_match=string_pb2.StringMatcher(exact="1"))
        ],
    )
    expected.runtime_fraction.default_value.CopyFrom(
        percent_pb2.FractionalPercent(numerator=250_000, denominator=percent_pb2.FractionalPercent.MILLION)
    )
    assert envoy_match(match) == expected
