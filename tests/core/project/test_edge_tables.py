"""Tests of `aether.core.project.edge_tables`: route tables assembled from kept virtual host and route entries."""

from __future__ import annotations

import attrs

from aether.core.gateway import ir
from aether.core.project.edge import TablePlan, table_message
from aether.core.project.edge_tables import EdgeTables, EdgeTablesStatistics
from aether.core.snapshot import ROUTE_TYPE, Resource


def _route(path: str, *, cluster: str = "web.default.aether.internal") -> ir.HTTPRoute:
    return ir.HTTPRoute(
        name=f"HTTPRoute/default/r/rule/0/match/{path}",
        match=ir.RouteMatch(path=ir.StringMatch(kind=ir.PREFIX, value=path)),
        action=ir.Forward(destinations=(ir.Destination(cluster=cluster, weight=1),)),
    )


def _vhost(name: str, *domains: str, paths: tuple[str, ...] = ("/",)) -> ir.VirtualHost:
    return ir.VirtualHost(name=name, domains=domains, routes=tuple(_route(path) for path in paths))


def _expected(plan: TablePlan) -> Resource:
    return Resource.from_message(table_message(plan))


def test_a_table_is_the_bytes_of_its_message_with_domains_names_and_misdirected_hosts_settled() -> None:
    """Duplicate domains and names dropped, `edge_misdirected` after the virtual hosts, `edge_not_found` last
    unless `*` is claimed: the same bytes and digest as the table message."""
    plans = [
        TablePlan(
            name="edge_8443_a.example",
            vhosts=(
                _vhost("a", "a.example", "b.example", paths=("/x", "/")),
                _vhost("b", "B.example", "c.example"),
                _vhost("a", "d.example"),
            ),
            misdirected=("c.example", "e.example"),
        ),
        TablePlan(name="edge_8080", vhosts=(_vhost("any", "*"),)),
        TablePlan(name="edge_8081", vhosts=()),
    ]
    built = EdgeTables().resources(plans)
    expected = [_expected(plan) for plan in plans]
    assert built == expected
    assert [item.body for item in built] == [item.body for item in expected]
    assert built[0].type_url == ROUTE_TYPE


def test_the_same_virtual_hosts_give_the_same_resources_without_serializing() -> None:
    """A second call with the very same virtual host objects serializes nothing and returns the same resources."""
    tables = EdgeTables()
    plans = [TablePlan(name="edge_8080", vhosts=(_vhost("a", "a.example", paths=("/1", "/2")),))]
    first = tables.resources(plans)
    again = tables.resources([attrs.evolve(plans[0])])
    assert again[0] is first[0]
    assert tables.statistics() == EdgeTablesStatistics(tables=0, virtual_hosts=0, routes=0)


def test_a_virtual_host_given_anew_serializes_only_its_new_routes() -> None:
    """One route replaced in one of two virtual hosts: that route serialized, that virtual host joined, the table
    assembled, and its bytes are the message's."""
    tables = EdgeTables()
    kept = _vhost("b", "b.example", paths=("/b",))
    changing = _vhost("a", "a.example", paths=("/1", "/2", "/3"))
    tables.resources([TablePlan(name="edge_8080", vhosts=(changing, kept))])
    routes = changing.routes
    changed = attrs.evolve(
        changing, routes=(routes[0], _route("/2", cluster="api.default.aether.internal"), routes[2])
    )
    plan = TablePlan(name="edge_8080", vhosts=(changed, kept))
    (table,) = tables.resources([plan])
    assert tables.statistics() == EdgeTablesStatistics(tables=1, virtual_hosts=1, routes=1)
    expected = _expected(plan)
    assert (table, table.body) == (expected, expected.body)


def test_a_domain_taken_by_an_earlier_virtual_host_rejoins_the_entry_without_serializing_routes() -> None:
    """The same virtual host object keeping fewer domains (an earlier one now claims one): its entry is joined
    again from its routes' entries."""
    tables = EdgeTables()
    shared = _vhost("b", "a.example", "b.example", paths=("/1", "/2"))
    tables.resources([TablePlan(name="edge_8080", vhosts=(shared,))])
    plan = TablePlan(name="edge_8080", vhosts=(_vhost("a", "a.example"), shared))
    (table,) = tables.resources([plan])
    assert tables.statistics() == EdgeTablesStatistics(tables=1, virtual_hosts=2, routes=1)
    assert table.body == _expected(plan).body
