"""`aether.controller.status_diff`'s Gateway addresses: what a load balancer's ingress becomes, and bad shapes."""

from __future__ import annotations

from typing import Any

import pytest

from aether.controller.status_diff import gateway_addresses


@pytest.mark.parametrize(
    ("service", "expected"),
    [
        pytest.param(None, [], id="no-service"),
        pytest.param({"status": {}}, [], id="no-load-balancer-yet"),
        pytest.param(
            {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7", "hostname": "a.example"}]}}},
            [{"type": "IPAddress", "value": "203.0.113.7"}, {"type": "Hostname", "value": "a.example"}],
            id="ip-and-hostname",
        ),
        pytest.param(
            {"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}, {"ip": "203.0.113.7"}]}}},
            [{"type": "IPAddress", "value": "203.0.113.7"}],
            id="each-once",
        ),
        pytest.param({"status": {"loadBalancer": {"ingress": "203.0.113.7"}}}, [], id="ingress-not-a-list"),
        pytest.param(
            {
                "status": {
                    "loadBalancer": {"ingress": ["x", {"ip": 7}, {"hostname": ""}, {"ip": "192.0.2.1"}]}
                }
            },
            [{"type": "IPAddress", "value": "192.0.2.1"}],
            id="malformed-entries-skipped",
        ),
        pytest.param({"status": "pending"}, [], id="status-not-a-mapping"),
    ],
)
def test_gateway_addresses_are_the_ingress_of_the_edge_service(
    service: dict[str, Any] | None, expected: list[dict[str, str]]
) -> None:
    assert gateway_addresses(service) == expected
