"""GAMMA UDPRoutes in the node projection: the parent's destination goes to the route's weighted cluster (and is
captured), its localities follow the backends' endpoints, and the incremental projector re-projects only the
route cluster whose backends' endpoints changed."""

from __future__ import annotations

from typing import Any

from aether.core.events import Event, Health
from aether.core.events.kube import ServicePort
from aether.core.gateway import UdpBackend, UdpRouteCluster
from aether.core.project import NodeProjector, project_node
from aether.core.project.udp_routes import udp_route_assignment
from aether.core.snapshot import ENDPOINT_TYPE, Snapshot
from aether.testing import (
    AT,
    endpoint_added,
    endpoint_updated,
    endpoints_snapshot_received,
    fold_events,
    gateway_object_upserted,
    kube_service_upserted,
    make_endpoint,
    make_kube_object,
    make_kube_service,
    make_pod,
    pod_added,
)
from tests.core.project._helpers import messages

NODE = "node-a"
CLUSTER = "udproute:dns.default"
UDP = [ServicePort(name="dns", port=53, protocol="UDP")]


def _events(*, weights: tuple[int, int] = (90, 10)) -> list[Event]:
    route = {
        "parentRefs": [{"group": "", "kind": "Service", "name": "dns", "port": 53}],
        "rules": [
            {
                "backendRefs": [
                    {"name": "dns-v1", "port": 53, "weight": weights[0]},
                    {"name": "dns-v2", "port": 53, "weight": weights[1]},
                ]
            }
        ],
    }
    return [
        pod_added(
            make_pod(
                "client-0",
                service_account="client",
                netns="/var/run/netns/cni-client-0",
                container_id="c1",
                annotations={"config.aether.io/upstreams": "dns"},
            )
        ),
        kube_service_upserted(make_kube_service("dns", cluster_ip="10.96.4.1", ports=UDP)),
        kube_service_upserted(make_kube_service("dns-v1", cluster_ip="10.96.4.2", ports=UDP)),
        kube_service_upserted(make_kube_service("dns-v2", cluster_ip="10.96.4.3", ports=UDP)),
        gateway_object_upserted(make_kube_object("dns", kind="UDPRoute", spec=route)),
        endpoints_snapshot_received(
            make_endpoint("10.0.2.1", service="default/dns-v1", labels={"app": "dns-v1"}),
            make_endpoint("10.0.2.2", service="default/dns-v2", labels={"app": "dns-v2"}),
            make_endpoint("10.0.2.3", service="default/other"),
        ),
    ]


def _localities(snapshot: Snapshot) -> list[tuple[int, list[str]]]:
    assignment: Any = messages(snapshot, ENDPOINT_TYPE)[CLUSTER]
    return [
        (
            group.load_balancing_weight.value,
            [item.endpoint.address.socket_address.address for item in group.lb_endpoints],
        )
        for group in assignment.endpoints
    ]


def test_the_parent_destination_is_captured_and_sent_to_the_weighted_cluster() -> None:
    """10.96.4.1:53 is in the pod's capture set, its listener names the route's cluster, whose localities are the
    backends by weight; the backends' own ClusterIPs keep their udp: clusters."""
    projector = NodeProjector(node_name=NODE)
    snapshot = projector.project(fold_events(*_events()), now=AT)
    assert _localities(snapshot) == [(90, ["10.0.2.1"]), (10, ["10.0.2.2"])]
    (capture,) = projector.udp_capture
    assert ("10.96.4.1", 53) in capture.destinations
    assert snapshot == project_node(fold_events(*_events()), node_name=NODE, now=AT)


def test_an_unhealthy_backend_gives_its_share_to_the_others() -> None:
    """A backend without a serving endpoint has no locality (Envoy would scale its weight by health anyway)."""
    state = fold_events(
        *_events(),
        endpoint_updated(
            make_endpoint(
                "10.0.2.2", service="default/dns-v2", labels={"app": "dns-v2"}, health=Health.UNHEALTHY
            )
        ),
    )
    assert _localities(project_node(state, node_name=NODE, now=AT)) == [(90, ["10.0.2.1"])]


def test_only_the_route_cluster_of_a_changed_backend_is_re_projected() -> None:
    """A new endpoint of one backend: of the services, only that backend's unit is projected again, the route's
    assignment gains the endpoint, and the result equals a projection from scratch."""
    projector = NodeProjector(node_name=NODE)
    state = fold_events(*_events())
    projector.project(state, now=AT)
    added = endpoint_added(make_endpoint("10.0.2.4", service="default/dns-v1", labels={"app": "dns-v1"}))
    state = fold_events(added, state=state)
    again = projector.project(state, now=AT)
    assert projector.statistics().services_projected == 1
    assert _localities(again) == [(90, ["10.0.2.1", "10.0.2.4"]), (10, ["10.0.2.2"])]
    assert again == project_node(state, node_name=NODE, now=AT)


def test_the_assignment_skips_endpoints_the_selector_does_not_select() -> None:
    """Labels decide: an endpoint of the backend's service account without the selector's labels is left out."""
    endpoint = make_endpoint("10.0.2.9", service="default/dns", labels={"app": "dns", "version": "v2"})
    cluster = UdpRouteCluster(
        name=CLUSTER,
        route="UDPRoute/default/dns",
        backends=(UdpBackend(service="default/dns", selector=(("version", "v1"),), port=53, weight=1),),
    )
    assignment = udp_route_assignment(cluster, {"default/dns": {endpoint.key: endpoint}}.get)
    assert list(assignment.endpoints) == []
