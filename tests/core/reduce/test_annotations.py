"""Tests of `aether.core.reduce.annotations`: a pod's mesh settings read from its labels and annotations."""

from __future__ import annotations

import pytest

from aether.core.events import HealthCheckMode, Protocol
from aether.core.reduce.annotations import parse_pod_config, pod_problem, unmanaged_reason
from aether.core.state import PodConfig
from aether.testing import make_pod


def test_a_pod_without_annotations_gets_the_defaults() -> None:
    """No annotation: port 8080, weight 1024, HTTP, EDS health, no upstreams, and no problem."""
    assert parse_pod_config(make_pod()) == (PodConfig(), ())
    assert PodConfig() == PodConfig(
        port=8080,
        ports=(8080,),
        weight=1024,
        protocol=Protocol.HTTP,
        upstreams=(),
        health_check_mode=HealthCheckMode.EDS,
    )


def test_every_annotation_is_read() -> None:
    """Port, ports, weight, protocol, health-check mode and upstreams are all read, values trimmed."""
    pod = make_pod(
        namespace="shop",
        annotations={
            "endpoint.aether.io/port": " 9090 ",
            "endpoint.aether.io/ports": "8443=h2, 9100,9100",
            "endpoint.aether.io/weight": "1000000",
            "endpoint.aether.io/protocol": " TCP ",
            "endpoint.aether.io/health-check-mode": "Active",
            "config.aether.io/upstreams": " db ,,default/web, db, cart.v2",
            "example.com/unrelated": "ignored",
        },
    )
    assert parse_pod_config(pod) == (
        PodConfig(
            port=9090,
            ports=(8443, 9090, 9100),
            weight=1_000_000,
            protocol=Protocol.TCP,
            upstreams=("default/web", "shop/cart.v2", "shop/db"),
            health_check_mode=HealthCheckMode.ACTIVE,
        ),
        (),
    )


def test_the_ports_always_include_the_port() -> None:
    """`ports` is the sorted union of the ports annotation and the port (default 8080 when absent)."""
    config, problems = parse_pod_config(make_pod(annotations={"endpoint.aether.io/ports": "9090,80"}))
    assert (config.port, config.ports, problems) == (8080, (80, 8080, 9090), ())


@pytest.mark.parametrize(
    ("annotations", "problems"),
    [
        (
            {"endpoint.aether.io/port": "0"},
            ("annotation 'endpoint.aether.io/port' must be an integer 1..65535 (got '0')",),
        ),
        (
            {"endpoint.aether.io/port": "70000"},
            ("annotation 'endpoint.aether.io/port' must be an integer 1..65535 (got '70000')",),
        ),
        (
            {"endpoint.aether.io/port": "http"},
            ("annotation 'endpoint.aether.io/port' must be an integer 1..65535 (got 'http')",),
        ),
        (
            {"endpoint.aether.io/ports": "9090, x,0,²"},
            (
                "annotation 'endpoint.aether.io/ports': each port must be 1..65535, optionally '=h2' (got ' x')",
                "annotation 'endpoint.aether.io/ports': each port must be 1..65535, optionally '=h2' (got '0')",
                "annotation 'endpoint.aether.io/ports': each port must be 1..65535, optionally '=h2' (got '²')",
            ),
        ),
        (
            {"endpoint.aether.io/weight": "2000000"},
            ("annotation 'endpoint.aether.io/weight' must be an integer 1..1000000 (got '2000000')",),
        ),
        (
            {"endpoint.aether.io/protocol": "udp"},
            ("annotation 'endpoint.aether.io/protocol' must be one of ['http', 'tcp'] (got 'udp')",),
        ),
        (
            {"endpoint.aether.io/health-check-mode": "none"},
            (
                "annotation 'endpoint.aether.io/health-check-mode' must be one of ['active', 'eds'] (got 'none')",
            ),
        ),
        (
            {"config.aether.io/upstreams": "db,Bad/x"},
            (
                "annotation 'config.aether.io/upstreams': service key must be '<namespace>/<serviceAccount>'"
                " (got 'Bad/x')",
            ),
        ),
    ],
    ids=[
        "port-zero",
        "port-too-big",
        "port-word",
        "ports",
        "weight",
        "protocol",
        "health-check-mode",
        "upstreams",
    ],
)
def test_each_invalid_annotation_is_a_problem_and_keeps_its_default(
    annotations: dict[str, str], problems: tuple[str, ...]
) -> None:
    """An invalid annotation yields its exact problem; the setting keeps its default (valid parts are kept)."""
    config, found = parse_pod_config(make_pod(annotations=annotations))
    assert found == problems
    assert (config.port, config.weight, config.protocol, config.health_check_mode) == (
        8080,
        1024,
        Protocol.HTTP,
        HealthCheckMode.EDS,
    )


@pytest.mark.parametrize("raw", ["+80", "8_0", "٨٠", "80.0", "0x50", ""])
def test_an_integer_annotation_takes_ascii_digits_only(raw: str) -> None:
    """Signs, underscores, non-ASCII digits and other notations that `int()` would take are problems."""
    config, problems = parse_pod_config(make_pod(annotations={"endpoint.aether.io/port": raw}))
    assert (config.port, problems) == (
        8080,
        (f"annotation 'endpoint.aether.io/port' must be an integer 1..65535 (got {raw!r})",),
    )


def test_valid_parts_of_a_list_annotation_are_kept() -> None:
    """In a ports or upstreams list, the valid items are kept beside the problems of the invalid ones."""
    pod = make_pod(
        annotations={"endpoint.aether.io/ports": "9090,x", "config.aether.io/upstreams": "db,Bad/x"}
    )
    config, problems = parse_pod_config(pod)
    assert (config.ports, config.upstreams, len(problems)) == ((8080, 9090), ("default/db",), 2)


@pytest.mark.parametrize(
    ("namespace", "labels", "reason"),
    [
        ("default", {"aether.io/managed": "true"}, None),
        (
            "default",
            {},
            "pod 'default/web-1': label 'aether.io/managed' must be 'true' to join the mesh (got None)",
        ),
        (
            "default",
            {"aether.io/managed": "True"},
            "pod 'default/web-1': label 'aether.io/managed' must be 'true' to join the mesh (got 'True')",
        ),
        (
            "kube-system",
            {"aether.io/managed": "true"},
            "pod 'kube-system/web-1': namespace 'kube-system' is never meshed",
        ),
        ("spire", {"aether.io/managed": "true"}, None),
        (
            "spire-agent",
            {"aether.io/managed": "true"},
            "pod 'spire-agent/web-1': namespace 'spire-agent' is never meshed",
        ),
    ],
)
def test_unmanaged_reason_names_why_a_pod_is_not_meshed(
    namespace: str, labels: dict[str, str], reason: str | None
) -> None:
    """Only a pod labelled `aether.io/managed=true` outside the system namespaces is meshed."""
    assert unmanaged_reason(make_pod(namespace=namespace, labels=labels)) == reason


def test_pod_problem_checks_namespace_then_name_then_service_account() -> None:
    """The first invalid identity field is the problem; a valid pod has none."""
    assert pod_problem(make_pod()) is None
    assert pod_problem(make_pod("web.1", service_account="web.v2")) is None
    assert pod_problem(make_pod("Web", namespace="", service_account="")) == (
        "pod '/Web': namespace must be an RFC 1123 label (lowercase alphanumerics and '-', at most 63) (got '')"
    )
    assert pod_problem(make_pod("web-1", service_account="")) == (
        "pod 'default/web-1': service account must be an RFC 1123 subdomain (got '')"
    )
