"""UDP through the mesh in the node projection: which Service destinations are served, each captured pod's listener
per destination, the `udp:` clusters, the capture sets the agent programs, and the incremental projector."""

from __future__ import annotations

from envoy.extensions.filters.udp.udp_proxy.v3 import route_pb2, udp_proxy_pb2

from aether.core.events import Event
from aether.core.events.kube import ServicePort
from aether.core.project import NodeProjector, project_node
from aether.core.project.udp import UdpCapture, UdpDestination, udp_destinations
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, Snapshot
from aether.testing import (
    AT,
    endpoints_snapshot_received,
    fold_events,
    kube_service_deleted,
    kube_service_upserted,
    make_endpoint,
    make_kube_service,
    make_meta,
    make_pod,
    pod_added,
)
from tests.core.project._helpers import decode, messages

NODE = "node-a"
NETNS = "/var/run/netns/cni-web-1"
STATSD = "udp:statsd.metrics.aether.internal"


def _client(*, netns: str = NETNS, upstreams: str = "metrics/statsd") -> Event:
    return pod_added(
        make_pod(netns=netns, container_id="c1", annotations={"config.aether.io/upstreams": upstreams})
    )


def _statsd(*ports: ServicePort, cluster_ip: str = "10.96.5.5", name: str = "statsd") -> Event:
    return kube_service_upserted(
        make_kube_service(name, namespace="metrics", cluster_ip=cluster_ip, ports=ports)
    )


UDP_8125 = ServicePort(name="metrics", port=8125, target_port="9125", protocol="UDP")


def _udp_listeners(snapshot: Snapshot) -> list[str]:
    return sorted(name for name in snapshot.of_type(LISTENER_TYPE) if name.startswith("udp_"))


def test_a_udp_service_port_of_a_dependency_gets_a_listener_bound_to_its_cluster_ip_in_the_pod() -> None:
    """The pod's listener for 10.96.5.5:8125 binds that address transparently in its netns and proxies to the
    plaintext `udp:` cluster, whose endpoints are every endpoint of the service at the target port."""
    state = fold_events(
        _client(),
        _statsd(UDP_8125),
        endpoints_snapshot_received(
            make_endpoint("10.0.5.1", service="metrics/statsd"),
            make_endpoint("10.0.5.2", service="metrics/statsd", port=9000, ports=(9001,)),
        ),
    )
    snapshot = project_node(state, node_name=NODE, now=AT)
    assert snapshot.consistent() == ()
    listener = decode(snapshot.of_type(LISTENER_TYPE)["udp_web-1.default_10.96.5.5_8125"])
    address = listener.address.socket_address
    assert (address.address, address.port_value, address.network_namespace_filepath, address.protocol) == (
        "10.96.5.5",
        8125,
        NETNS,
        address.UDP,
    )
    assert listener.transparent.value is True
    assert listener.HasField("udp_listener_config")
    [udp_filter] = listener.listener_filters
    proxy = udp_proxy_pb2.UdpProxyConfig()
    udp_filter.typed_config.Unpack(proxy)
    route = route_pb2.Route()
    proxy.matcher.on_no_match.action.typed_config.Unpack(route)
    assert route.cluster == f"{STATSD}:9125"
    cluster = decode(snapshot.of_type(CLUSTER_TYPE)[f"{STATSD}:9125"])
    assert not cluster.HasField("transport_socket")  # plaintext: DTLS is not implemented
    endpoints = messages(snapshot, ENDPOINT_TYPE)[f"{STATSD}:9125"]
    assert [
        (item.endpoint.address.socket_address.address, item.endpoint.address.socket_address.port_value)
        for group in endpoints.endpoints
        for item in group.lb_endpoints
    ] == [("10.0.5.1", 9125), ("10.0.5.2", 9125)]


def test_destinations_skip_what_the_proxy_cannot_serve_and_resolve_through_the_selector() -> None:
    """Headless Services, IPv6 ClusterIPs, named target ports, TCP ports and services outside the set are not
    served; a Service selecting a pod of another account resolves to that account; the order is by address."""
    state = fold_events(
        pod_added(
            make_pod(
                "agent-1",
                namespace="metrics",
                service_account="collector",
                labels={"app": "statsd", "aether.io/managed": "true"},
            )
        ),
        _statsd(UDP_8125, ServicePort(port=80, protocol="TCP"), cluster_ip="10.96.5.15"),
        _statsd(ServicePort(port=53, protocol="UDP"), cluster_ip="None", name="headless"),
        _statsd(ServicePort(port=53, protocol="UDP"), cluster_ip="fd00::10", name="six"),
        _statsd(
            ServicePort(port=53, target_port="dns", protocol="UDP"), cluster_ip="10.96.5.7", name="named"
        ),
        _statsd(ServicePort(port=53, protocol="UDP"), cluster_ip="10.96.5.6", name="other"),
        _statsd(ServicePort(port=54, protocol="UDP"), cluster_ip="10.96.5.8", name="outside"),
    )
    found = udp_destinations(
        state.kube.services,
        state.pods.values(),
        in_set=frozenset({"metrics/collector", "metrics/other", "metrics/headless", "metrics/six"}),
        mesh_domain="aether.internal",
    )
    assert found == (
        UdpDestination(
            address="10.96.5.6",
            port=53,
            service="metrics/other",
            target_port=53,
            cluster="udp:other.metrics.aether.internal:53",
        ),
        UdpDestination(
            address="10.96.5.15",
            port=8125,
            service="metrics/collector",
            target_port=9125,
            cluster="udp:collector.metrics.aether.internal:9125",
        ),
    )


def test_capture_sets_cover_bound_pods_with_a_network_namespace_only() -> None:
    """The projector reports, per captured pod, the destinations its capture must divert; a pod in local mode
    (no namespace) has no UDP listener and no capture set."""
    state = fold_events(
        _client(),
        pod_added(make_pod("web-2", ips=("10.0.0.2",))),
        _statsd(UDP_8125, ServicePort(name="admin", port=8127, protocol="UDP")),
    )
    projector = NodeProjector(node_name=NODE)
    snapshot = projector.project(state, now=AT)
    assert _udp_listeners(snapshot) == [
        "udp_web-1.default_10.96.5.5_8125",
        "udp_web-1.default_10.96.5.5_8127",
    ]
    assert projector.udp_capture == (
        UdpCapture(
            pod="default/web-1",
            netns=NETNS,
            container_id="c1",
            destinations=(("10.96.5.5", 8125), ("10.96.5.5", 8127)),
        ),
    )


def test_the_incremental_projector_follows_service_changes() -> None:
    """A UDP port added, then the Service deleted: listeners, clusters and capture sets follow, and equal a
    whole projection at every step."""
    projector = NodeProjector(node_name=NODE)
    state = fold_events(_client(), _statsd(ServicePort(port=80, protocol="TCP")))
    assert _udp_listeners(projector.project(state, now=AT)) == []
    assert projector.udp_capture[0].destinations == ()
    steps = [
        _statsd(UDP_8125),
        kube_service_deleted(make_meta("statsd", namespace="metrics", kind="Service")),
    ]
    expected = [["udp_web-1.default_10.96.5.5_8125"], []]
    for event, listeners in zip(steps, expected, strict=True):
        state = fold_events(event, state=state)
        snapshot = projector.project(state, now=AT)
        assert snapshot == project_node(state, node_name=NODE, now=AT)
        assert _udp_listeners(snapshot) == listeners
        assert (f"{STATSD}:9125" in snapshot.of_type(CLUSTER_TYPE)) == bool(listeners)
        assert projector.udp_capture[0].destinations == ((("10.96.5.5", 8125),) if listeners else ())
