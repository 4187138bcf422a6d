"""Tests of `aether.kube.endpoints`: the endpoint a pod stands for, and why a pod stands for none."""

from __future__ import annotations

from aether.core.events.registry import Endpoint, Health, HealthCheckMode
from aether.kube.endpoints import PodEndpoint, pod_endpoint_of
from tests.registrar._kube import node_object, pod_object

WEB = "shop/web"


def test_invalid_annotations_keep_their_defaults_and_are_reported() -> None:
    """A weight that does not parse: the default weight, and one problem naming the pod and the annotation."""
    pod = pod_object(WEB, "10.0.0.1", annotations={"endpoint.aether.io/weight": "heavy"}) | {
        "apiVersion": "v1",
        "kind": "Pod",
    }
    assert pod_endpoint_of(pod, node=None) == PodEndpoint(
        endpoint=Endpoint(
            service=WEB,
            ip="10.0.0.1",
            health=Health.HEALTHY,
            health_check_mode=HealthCheckMode.EDS,
            namespace="shop",
            pod_name="web-10-0-0-1",
            node_name="node-1",
            labels={"aether.io/managed": "true"},
        ),
        problems=(
            "pod 'shop/web-10-0-0-1': annotation 'endpoint.aether.io/weight' must be an integer 1..1000000 (got 'heavy')",
        ),
    )


def test_locality_comes_from_the_node() -> None:
    """Region, zone and InternalIP of the pod's node."""
    pod = pod_object(WEB, "10.0.0.1") | {"apiVersion": "v1", "kind": "Pod"}
    node = node_object("node-1", region="eu", zone="eu-1b", internal_ip="192.168.1.9")
    endpoint = pod_endpoint_of(pod, node=node).endpoint
    assert endpoint is not None
    assert (endpoint.region, endpoint.zone, endpoint.node_ip) == ("eu", "eu-1b", "192.168.1.9")


def test_pods_without_an_endpoint_say_why() -> None:
    """Unmanaged, in a system namespace, or unreadable: no endpoint, one reason."""
    unmanaged = pod_object(WEB, "10.0.0.1", labels={}) | {"apiVersion": "v1", "kind": "Pod"}
    system = pod_object("kube-system/dns", "10.0.0.2") | {"apiVersion": "v1", "kind": "Pod"}
    unreadable = pod_object(WEB, "10.0.0.3") | {"apiVersion": "v1", "kind": "Pod", "spec": "none"}
    assert [pod_endpoint_of(pod, node=None).problems for pod in (unmanaged, system, unreadable)] == [
        ("pod 'shop/web-10-0-0-1': label 'aether.io/managed' must be 'true' to join the mesh (got None)",),
        ("pod 'kube-system/dns-10-0-0-2': namespace 'kube-system' is never meshed",),
        ("not a kubernetes object: spec must be a mapping (got 'none')",),
    ]
