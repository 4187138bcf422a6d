"""The virtual host of each GAMMA frontend: only the routes naming that Service (and port), with precedence decided
among them, though another Service of the same service account has routes of its own."""

from __future__ import annotations

from aether.core.project.frontends import frontend_routes
from tests.core.gateway.test_frontends import _route, _view


def _routes_of(*routes: object) -> dict[tuple[str, int], list[str]]:
    view = _view(*routes)
    found = frontend_routes(view.mesh_frontends["default/echo"], mesh_domain="aether.internal")
    return {
        (item.address, item.port): sorted(
            {route.name.split("/rule/")[0] or route.name for route in item.virtual_host().routes}
        )
        for item in found
    }


def test_each_frontend_takes_only_the_routes_naming_it() -> None:
    """echo-v1 and echo-v2 share a service account, so one routing holds both routes; each address gets its own."""
    assert _routes_of(_route("a", "echo-v2"), _route("b", "echo-v1", port=80)) == {
        ("10.96.9.1", 80): ["HTTPRoute/default/b"],
        ("10.96.9.2", 80): ["HTTPRoute/default/a"],
        ("10.96.9.2", 9000): ["HTTPRoute/default/a"],
    }


def test_every_frontend_virtual_host_matches_any_host() -> None:
    """The destination chose the frontend: its virtual host takes every Host."""
    view = _view(_route("a", "echo-v2"))
    found = frontend_routes(view.mesh_frontends["default/echo"], mesh_domain="aether.internal")
    assert {tuple(item.virtual_host().domains) for item in found} == {("*",)}
    assert [item.virtual_host().name for item in found] == [
        "frontend:10.96.9.2:80",
        "frontend:10.96.9.2:9000",
    ]
