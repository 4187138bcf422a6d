"""Tests of `aether.core.project.endpoints`: load assignments, health, weights, locality and priority."""

from __future__ import annotations

from aether.core.events import Health
from aether.core.project.endpoints import (
    ELSEWHERE,
    SAME_REGION,
    SAME_ZONE,
    load_assignment,
    node_locality,
    priority,
)
from aether.testing import make_endpoint
from tests.core.project._helpers import as_dict


def test_the_node_s_locality_is_that_of_the_endpoints_it_hosts() -> None:
    """The first (sorted) region/zone of endpoints on the node; unknown without a node name or a region."""
    endpoints = [
        make_endpoint("10.0.0.9", node_name="node-b", region="us", zone="us-a"),
        make_endpoint("10.0.0.2", node_name="node-a", region="eu", zone="eu-b"),
        make_endpoint("10.0.0.1", node_name="node-a", region="eu", zone="eu-a"),
        make_endpoint("10.0.0.3", node_name="node-a"),
    ]
    assert node_locality(endpoints, node_name="node-a") == ("eu", "eu-a")
    assert node_locality(endpoints, node_name="") is None
    assert node_locality(endpoints, node_name="node-c") is None


def test_priority_prefers_the_zone_then_the_region() -> None:
    """0 in the node's zone, 1 in its region, 2 elsewhere, and 0 for everyone when the locality is unknown."""
    locality = ("eu", "eu-a")
    assert priority(make_endpoint(region="eu", zone="eu-a"), locality=locality) == SAME_ZONE
    assert priority(make_endpoint(region="eu", zone="eu-b"), locality=locality) == SAME_REGION
    assert priority(make_endpoint(region="us", zone="eu-a"), locality=locality) == ELSEWHERE
    assert priority(make_endpoint(region="us", zone="us-a"), locality=None) == SAME_ZONE


def test_a_load_assignment_groups_endpoints_by_priority_and_locality() -> None:
    """Endpoints dial the mesh inbound port, carry their health and weight, and group by (priority, locality)."""
    message = load_assignment(
        "db.shop.aether.internal",
        [
            make_endpoint("10.0.1.2", region="us", zone="us-a", health=Health.DRAINING),
            make_endpoint(
                "10.0.0.3", region="eu", zone="eu-a", health=Health.UNSPECIFIED, weight=4_000_000_000
            ),
            make_endpoint("10.0.0.2", region="eu", zone="eu-a", health=Health.UNHEALTHY, weight=7),
        ],
        locality=("eu", "eu-a"),
    )
    assert as_dict(message) == {
        "cluster_name": "db.shop.aether.internal",
        "endpoints": [
            {
                "locality": {"region": "eu", "zone": "eu-a"},
                "lb_endpoints": [
                    {
                        "endpoint": {
                            "address": {"socket_address": {"address": "10.0.0.2", "port_value": 18008}}
                        },
                        "health_status": "UNHEALTHY",
                        "load_balancing_weight": 7,
                    },
                    {
                        "endpoint": {
                            "address": {"socket_address": {"address": "10.0.0.3", "port_value": 18008}}
                        },
                        "health_status": "HEALTHY",
                        "load_balancing_weight": 1_000_000,
                    },
                ],
            },
            {
                "locality": {"region": "us", "zone": "us-a"},
                "priority": 2,
                "lb_endpoints": [
                    {
                        "endpoint": {
                            "address": {"socket_address": {"address": "10.0.1.2", "port_value": 18008}}
                        },
                        "health_status": "DRAINING",
                        "load_balancing_weight": 1024,
                    }
                ],
            },
        ],
    }


def test_an_empty_load_assignment_names_its_cluster() -> None:
    """A cluster without endpoints still gets its (empty) assignment, so Envoy does not wait for one."""
    assert as_dict(load_assignment("x.y.aether.internal", [], locality=None)) == {
        "cluster_name": "x.y.aether.internal"
    }
