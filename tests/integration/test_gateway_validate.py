"""Every golden Gateway API case's routes pass real Envoy's (1.40) validation, and validation does catch a bad one."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from aether.core.gateway import MeshRouting, ir
from tests.golden.test_gateway_golden import CASES, project_case
from tests.integration.gateway_bootstrap import validate_views


def test_every_golden_case_passes_envoy_validation(tmp_path: Path) -> None:
    """All the golden cases' mesh and edge HTTP routes, in one bootstrap, are accepted by `envoy --mode validate`."""
    output = validate_views([(case, project_case(case)) for case in CASES], tmp_path)
    assert "configuration" in output
    assert "OK" in output


def test_validation_catches_a_route_to_a_missing_cluster(tmp_path: Path) -> None:
    """A route naming a cluster nobody emits is refused: the check above is not vacuous."""
    view = project_case("gamma-route-replaces-the-service-routes")
    broken = ir.HTTPRoute(
        name="broken",
        match=ir.RouteMatch(path=ir.StringMatch(kind=ir.PREFIX, value="/")),
        action=ir.Forward(destinations=(ir.Destination(cluster="nobody.default.aether.internal", weight=1),)),
    )
    routing = view.mesh_routes["default/web"]
    view = attrs.evolve(
        view, mesh_routes={"default/web": attrs.evolve(routing, http_routes=(*routing.http_routes, broken))}
    )
    assert isinstance(routing, MeshRouting)
    with pytest.raises(AssertionError, match="envoy rejected the routes"):
        validate_views([("broken", view)], tmp_path)
