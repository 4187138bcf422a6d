"""Tests of `aether.core.project.routes`: service virtual hosts, the catch-all, assembled route tables."""

from __future__ import annotations

import pytest
from envoy.config.route.v3 import route_pb2
from google.protobuf import wrappers_pb2

from aether.core.project.outcome import idempotent_method_matcher, retry_policy
from aether.core.project.routes import (
    catch_all_vhost,
    inbound_route_configuration,
    route_configuration_parts,
    service_vhost,
    service_vhost_entry,
    vhost_entry,
)
from aether.core.snapshot import ROUTE_TYPE, Resource
from tests.core.project._helpers import as_dict


def test_a_service_vhost_routes_idempotent_methods_first() -> None:
    """Two routes to the cluster: idempotent methods (retrying unanswered too) first, then every method."""
    vhost = service_vhost(
        "db.shop.aether.internal", domains=["db.shop.aether.internal"], cluster="db.shop.aether.internal"
    )
    document = as_dict(vhost)
    assert document["domains"] == ["db.shop.aether.internal"]
    first, second = vhost.routes
    assert list(first.match.headers) == [idempotent_method_matcher()]
    assert first.route.retry_policy == retry_policy(idempotent=True)
    assert not second.match.headers
    assert second.route.retry_policy == retry_policy(idempotent=False)
    assert {route.route.cluster for route in vhost.routes} == {"db.shop.aether.internal"}


def test_the_catch_all_discovers_mesh_names_on_demand() -> None:
    """Liveness, then the mesh-name routes to the caller's `quic:` cluster (when its listener named one) or to
    `cluster_header: :authority`, then a 404 with a clear body."""
    vhost = catch_all_vhost(mesh_domain="aether.internal", passthrough=False)
    assert (vhost.name, list(vhost.domains)) == ("on_demand_catch_all", ["*"])
    live, quic_idempotent, quic_any, idempotent, any_method, last = vhost.routes
    assert (live.match.path, live.direct_response.status) == ("/-/-/live", 200)
    for route in (quic_idempotent, quic_any):
        assert route.route.cluster_header == "x-aether-quic-cluster"
        assert [item.name for item in route.match.headers][:2] == [":authority", "x-aether-quic-cluster"]
    for route in (idempotent, any_method):
        assert route.route.cluster_header == ":authority"
        assert route.match.headers[0].name == ":authority"
        assert route.match.headers[0].string_match.safe_regex.regex == (
            r"^[a-z0-9-]+\.[a-z0-9-]+\.aether\.internal(:[0-9]+)?$"
        )
    assert idempotent.route.retry_policy == retry_policy(idempotent=True)
    assert last.direct_response.status == 404
    assert last.direct_response.body.inline_string == (
        "aether: the Host header names no mesh service; expected <serviceAccount>.<namespace>.aether.internal[:<port>]\n"
    )


def test_the_capture_catch_all_passes_the_rest_through() -> None:
    """On `cap_http`, what is not for the mesh goes to its original destination, without a timeout."""
    last = catch_all_vhost(mesh_domain="aether.internal", passthrough=True).routes[-1]
    assert as_dict(last) == {
        "match": {"prefix": "/"},
        "route": {"cluster": "passthrough_original_dst", "timeout": "0s"},
    }


def test_an_assembled_route_table_is_the_message_s_own_serialization() -> None:
    """Joining cached vhost entries gives exactly the bytes (and the Resource) of serializing the whole table."""
    vhosts = [
        service_vhost(
            f"s{index}.ns.aether.internal", domains=[f"s{index}.ns.aether.internal"], cluster=f"c{index}"
        )
        for index in range(200)  # long enough for multi-byte lengths
    ]
    vhosts.append(catch_all_vhost(mesh_domain="aether.internal", passthrough=True))
    body = b"".join(route_configuration_parts("cap_http", [vhost_entry(vhost) for vhost in vhosts]))
    message = route_pb2.RouteConfiguration(
        name="cap_http",
        virtual_hosts=vhosts,
        validate_clusters=wrappers_pb2.BoolValue(value=False),
        request_headers_to_remove=["x-aether-quic-cluster"],
    )
    assert body == message.SerializeToString(deterministic=True)
    assert Resource.from_body(ROUTE_TYPE, name="cap_http", body=body, references=()) == Resource.from_message(
        message
    )


def test_the_inbound_table_routes_by_port_and_strips_forged_outcomes() -> None:
    """Authority-port routes first, then the default; the app cannot set the outcome header."""
    assert as_dict(
        inbound_route_configuration([("9090", "app_web-1.default_9090"), (None, "app_web-1.default_8080")])
    ) == {
        "name": "in_http",
        "virtual_hosts": [
            {
                "name": "app",
                "domains": ["*"],
                "routes": [
                    {
                        "match": {
                            "prefix": "/",
                            "headers": [{"name": ":authority", "string_match": {"suffix": ":9090"}}],
                        },
                        "route": {"cluster": "app_web-1.default_9090", "timeout": "0s"},
                    },
                    {
                        "match": {"prefix": "/"},
                        "route": {"cluster": "app_web-1.default_8080", "timeout": "0s"},
                    },
                ],
            }
        ],
        "response_headers_to_remove": ["x-aether-outcome"],
        "validate_clusters": False,
    }


@pytest.mark.parametrize("quic", [False, True])
def test_a_service_vhost_entry_in_parts_is_the_vhost_serialized(quic: bool) -> None:
    """The parts join into the entry of the whole virtual host; the `quic:` routes are one object every service
    shares."""
    domains = ["web.default.aether.internal", "web.default.aether.internal:8080"]
    cluster = "web.default.aether.internal"
    parts = service_vhost_entry(cluster, domains=domains, cluster=cluster, quic=quic)
    assert b"".join(parts) == vhost_entry(service_vhost(cluster, domains=domains, cluster=cluster, quic=quic))
    other = service_vhost_entry("db.default.aether.internal", domains=["db"], cluster="db", quic=quic)
    assert (parts[1] is other[1]) == quic
