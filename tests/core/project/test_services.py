"""Tests of `aether.core.project.services`: which clusters, load assignments and vhosts a service gets."""

from __future__ import annotations

import immutables
from envoy.config.route.v3 import route_pb2

from aether.core.events import Endpoint, Protocol
from aether.core.project.dependencies import ServiceDemand
from aether.core.project.routes import route_configuration_parts
from aether.core.project.services import ServiceContext, ServiceProjection, project_service
from aether.core.project.tls import PLAINTEXT
from aether.core.snapshot import EMPTY_PIECE
from aether.core.state.registry import ServiceEndpoints
from aether.testing import make_endpoint
from tests.core.project._helpers import decode, names_of

CONTEXT = ServiceContext(
    mesh_domain="aether.internal", trust_domain="aether.internal", identity=PLAINTEXT, locality=None
)
DECLARED = ServiceDemand(declared=True)


def _endpoints(*items: Endpoint) -> ServiceEndpoints:
    return immutables.Map(((item.protocol, item.ip), item) for item in items)


def _vhosts(projection: ServiceProjection) -> list[tuple[str, list[str], str]]:
    table = route_pb2.RouteConfiguration()
    table.ParseFromString(b"".join(route_configuration_parts("t", projection.vhosts.parts)))
    return [(vhost.name, list(vhost.domains), vhost.routes[0].route.cluster) for vhost in table.virtual_hosts]


def test_an_http_service_gets_a_cluster_per_extra_port() -> None:
    """The primary-port cluster plus one per extra advertised port, each with its load assignment and vhost."""
    projection = project_service(
        "shop/api",
        _endpoints(
            make_endpoint("10.0.0.1", service="shop/api", ports=(8080, 8443)),
            make_endpoint("10.0.0.2", service="shop/api", ports=(8080,)),
        ),
        DECLARED,
        in_catalog=True,
        context=CONTEXT,
    )
    assert [(r.type_url.rsplit(".", 1)[-1], r.name, r.references) for r in projection.resources] == [
        ("Cluster", "api.shop.aether.internal", ("api.shop.aether.internal",)),
        ("ClusterLoadAssignment", "api.shop.aether.internal", ()),
        ("Cluster", "api.shop.aether.internal:8443", ("api.shop.aether.internal:8443",)),
        ("ClusterLoadAssignment", "api.shop.aether.internal:8443", ()),
    ]
    port_members = decode(projection.resources[3]).endpoints[0].lb_endpoints
    assert [item.endpoint.address.socket_address.address for item in port_members] == ["10.0.0.1"]
    assert _vhosts(projection) == [
        (
            "api.shop.aether.internal",
            ["api.shop.aether.internal", "api.shop.aether.internal:8080"],
            "api.shop.aether.internal",
        ),
        ("api.shop.aether.internal:8443", ["api.shop.aether.internal:8443"], "api.shop.aether.internal:8443"),
    ]
    assert projection.not_found == ()


def test_a_tcp_service_gets_its_tcp_cluster_only() -> None:
    """Only TCP endpoints: `tcp:<fqdn>`, no HTTP cluster and no virtual host."""
    projection = project_service(
        "shop/cache",
        _endpoints(make_endpoint("10.0.0.3", service="shop/cache", protocol=Protocol.TCP, port=6379)),
        DECLARED,
        in_catalog=True,
        context=CONTEXT,
    )
    assert names_of(projection.resources) == [
        "tcp:cache.shop.aether.internal",
        "tcp:cache.shop.aether.internal",
    ]
    assert projection.vhosts == EMPTY_PIECE


def test_a_declared_service_without_endpoints_gets_an_empty_http_cluster() -> None:
    """A declared upstream not registered yet (not even in the catalog) gets its cluster and vhost already."""
    projection = project_service("shop/new", None, DECLARED, in_catalog=False, context=CONTEXT)
    assert names_of(projection.resources) == ["new.shop.aether.internal", "new.shop.aether.internal"]
    assert not decode(projection.resources[1]).endpoints
    assert _vhosts(projection) == [
        ("new.shop.aether.internal", ["new.shop.aether.internal"], "new.shop.aether.internal")
    ]


def test_a_requested_service_outside_the_catalog_is_not_found() -> None:
    """Requested on demand only, and unknown to the registry: nothing, and every requested name is not found."""
    demand = ServiceDemand(
        declared=False, requested=("ghost.shop.aether.internal", "ghost.shop.aether.internal:80")
    )
    projection = project_service("shop/ghost", None, demand, in_catalog=False, context=CONTEXT)
    assert (projection.resources, projection.vhosts, projection.not_found) == (
        (),
        EMPTY_PIECE,
        demand.requested,
    )
    quiet = project_service(
        "shop/ghost", None, ServiceDemand(declared=False), in_catalog=False, context=CONTEXT
    )
    assert (quiet.resources, quiet.vhosts, quiet.not_found) == ((), EMPTY_PIECE, ())


def test_a_requested_primary_port_gets_its_exact_cluster() -> None:
    """`<fqdn>:<primary port>` asked for on demand is served under that exact name (no extra vhost); a port the
    service does not advertise, or a UDP name, is not found."""
    demand = ServiceDemand(
        declared=False,
        requested=(
            "db.shop.aether.internal:5432",
            "db.shop.aether.internal:9999",
            "udp:db.shop.aether.internal",
        ),
    )
    projection = project_service(
        "shop/db",
        _endpoints(make_endpoint("10.0.0.2", service="shop/db", port=5432)),
        demand,
        in_catalog=True,
        context=CONTEXT,
    )
    assert sorted(set(names_of(projection.resources))) == [
        "db.shop.aether.internal",
        "db.shop.aether.internal:5432",
    ]
    assert [name for name, _, _ in _vhosts(projection)] == ["db.shop.aether.internal"]
    assert projection.not_found == ("db.shop.aether.internal:9999", "udp:db.shop.aether.internal")
