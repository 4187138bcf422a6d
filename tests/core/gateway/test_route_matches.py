"""Gateway API matches as the view's route matches: path kinds, header and query tests, the method, gRPC paths."""

from __future__ import annotations

import pytest

from aether.core.gateway import ir
from aether.core.gateway.model import GRPCMatch, HTTPMatch, PathMatch, ValueMatch
from aether.core.gateway.route_matches import grpc_route_match, http_route_match

GRPC = ir.NamedMatch(name="content-type", match=ir.StringMatch(kind=ir.PREFIX, value="application/grpc"))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (PathMatch(type="PathPrefix", value="/"), ir.StringMatch(kind=ir.PREFIX, value="/")),
        (PathMatch(type="PathPrefix", value="/api/"), ir.StringMatch(kind=ir.SEGMENT_PREFIX, value="/api")),
        (PathMatch(type="Exact", value="/a/"), ir.StringMatch(kind=ir.EXACT, value="/a/")),
        (
            PathMatch(type="RegularExpression", value="/v[0-9]+"),
            ir.StringMatch(kind=ir.REGULAR_EXPRESSION, value="/v[0-9]+"),
        ),
    ],
)
def test_an_http_path_becomes_a_path_test(path: PathMatch, expected: ir.StringMatch) -> None:
    """A PathPrefix matches whole segments (its trailing `/` ignored), `/` alone is a plain prefix."""
    assert http_route_match(HTTPMatch(path=path)) == ir.RouteMatch(path=expected)


def test_headers_then_the_method_then_query_parameters() -> None:
    """Header tests keep their order and spelling, the method follows as `:method`, query tests keep theirs."""
    match = HTTPMatch(
        method="PUT",
        headers=(ValueMatch(type="Exact", name="X-Env", value="prod"),),
        query_params=(ValueMatch(type="RegularExpression", name="Page", value="[0-9]+"),),
    )
    assert http_route_match(match) == ir.RouteMatch(
        path=ir.StringMatch(kind=ir.PREFIX, value="/"),
        headers=(
            ir.NamedMatch(name="X-Env", match=ir.StringMatch(kind=ir.EXACT, value="prod")),
            ir.NamedMatch(name=":method", match=ir.StringMatch(kind=ir.EXACT, value="PUT")),
        ),
        query_params=(
            ir.NamedMatch(name="Page", match=ir.StringMatch(kind=ir.REGULAR_EXPRESSION, value="[0-9]+")),
        ),
    )


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        (GRPCMatch(service="shop.Cart", method="Add"), ir.StringMatch(kind=ir.EXACT, value="/shop.Cart/Add")),
        (GRPCMatch(service="shop.Cart"), ir.StringMatch(kind=ir.PREFIX, value="/shop.Cart/")),
        (GRPCMatch(method="Add"), ir.StringMatch(kind=ir.REGULAR_EXPRESSION, value="/[^/]+/Add")),
        (
            GRPCMatch(type="RegularExpression", service="shop\\..*"),
            ir.StringMatch(kind=ir.REGULAR_EXPRESSION, value="/(shop\\..*)/([^/]+)"),
        ),
        (GRPCMatch(), ir.StringMatch(kind=ir.PREFIX, value="/")),
    ],
)
def test_a_grpc_method_becomes_a_path_test_on_grpc_requests_only(
    match: GRPCMatch, expected: ir.StringMatch
) -> None:
    """Service and method make the `/<service>/<method>` path; the gRPC content type comes first."""
    assert grpc_route_match(match) == ir.RouteMatch(path=expected, headers=(GRPC,))
