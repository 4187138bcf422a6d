"""Registration intents: one endpoint per local pod, at its first IP, with the settings of its annotations."""

from __future__ import annotations

import attrs

from aether.core.events.registry import Endpoint, EndpointKey, Protocol
from aether.core.project.registrations import (
    RegistrationDiff,
    local_endpoints,
    pod_endpoint,
    registration_diff,
    unwanted_ips,
)
from aether.testing import fold_events, make_pod, pod_added

NODE = "node-a"


def test_the_intents_are_one_endpoint_per_local_pod_at_its_first_ip() -> None:
    """Each local pod registers one endpoint at its first IP, with its annotations' settings and its labels."""
    state = fold_events(
        pod_added(
            make_pod(
                "db-0",
                namespace="shop",
                service_account="db",
                labels={"aether.io/managed": "true", "app": "db", "version": "v2"},
                ips=("10.0.0.3", "fd00::3"),
                node_name=NODE,
                annotations={
                    "endpoint.aether.io/protocol": "tcp",
                    "endpoint.aether.io/port": "5432",
                    "endpoint.aether.io/ports": "9100",
                    "endpoint.aether.io/weight": "7",
                },
            )
        ),
        pod_added(
            make_pod("web-9", namespace="shop", service_account="web", ips=("10.0.0.9",), node_name="other")
        ),
    )
    assert local_endpoints(state, node_name=NODE, cluster_name="c1") == {
        ("shop/db", Protocol.TCP, "10.0.0.3"): Endpoint(
            service="shop/db",
            protocol=Protocol.TCP,
            ip="10.0.0.3",
            port=5432,
            ports=(9100,),
            weight=7,
            health_check_mode=state.pods["shop/db-0"].config.health_check_mode,
            namespace="shop",
            pod_name="db-0",
            node_name=NODE,
            cluster_name="c1",
            labels={"aether.io/managed": "true", "app": "db", "version": "v2"},
        )
    }


def test_a_pod_without_an_ip_registers_nothing_and_a_shared_ip_registers_once() -> None:
    state = fold_events(
        pod_added(
            make_pod("web-1", namespace="shop", service_account="web", ips=("10.0.0.1",), node_name=NODE)
        ),
        pod_added(
            make_pod("web-2", namespace="shop", service_account="web", ips=("10.0.0.1",), node_name=NODE)
        ),
    )
    assert [
        endpoint.pod_name for endpoint in local_endpoints(state, node_name=NODE, cluster_name="").values()
    ] == ["web-1"]
    record = state.pods["shop/web-1"]
    assert pod_endpoint(attrs.evolve(record, pod=attrs.evolve(record.pod, ips=())), cluster_name="") is None


def _endpoint(ip: str, *, service: str = "default/web", weight: int = 1024) -> Endpoint:
    return Endpoint(service=service, ip=ip, weight=weight)


def _keyed(*endpoints: Endpoint) -> dict[EndpointKey, Endpoint]:
    return {endpoint.key: endpoint for endpoint in endpoints}


def test_the_diff_unregisters_what_left_and_registers_what_is_new_or_changed_in_key_order() -> None:
    """Gone: unregistered by key; new or changed: registered; equal: nothing."""
    kept, changed, gone = _endpoint("10.0.0.1"), _endpoint("10.0.0.2"), _endpoint("10.0.0.3")
    new = _endpoint("10.0.0.0", service="shop/db")
    registered = _keyed(gone, changed, kept)
    wanted = _keyed(kept, attrs.evolve(changed, weight=7), new)
    assert registration_diff(registered, wanted) == RegistrationDiff(
        unregister=(gone.key,), register=(attrs.evolve(changed, weight=7), new)
    )
    assert registration_diff(wanted, wanted) == RegistrationDiff()
    assert registration_diff({}, wanted).register == tuple(endpoint for _, endpoint in sorted(wanted.items()))


def test_unwanted_ips_are_those_of_the_service_no_intent_holds_whatever_the_protocol() -> None:
    """Listed IPs of a service minus those its intents hold (a TCP intent keeps the IP), sorted."""
    wanted = _keyed(
        _endpoint("10.0.0.1"),
        Endpoint(service="default/web", protocol=Protocol.TCP, ip="10.0.0.2"),
        _endpoint("10.0.0.3", service="shop/db"),
    )
    assert unwanted_ips("default/web", ["10.0.0.9", "10.0.0.2", "10.0.0.3", "10.0.0.1"], wanted=wanted) == [
        "10.0.0.3",
        "10.0.0.9",
    ]
    assert unwanted_ips("shop/db", ["10.0.0.3"], wanted=wanted) == []
