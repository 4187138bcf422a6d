"""The node's clusters of Services without a selector: their EndpointSlices, projected incrementally."""

from __future__ import annotations

from aether.core.events import Event
from aether.core.project import NodeProjector, project_node
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, ROUTE_TYPE
from aether.testing import (
    AT,
    endpoint_slice_deleted,
    endpoint_slice_upserted,
    fold_events,
    gateway_object_upserted,
    kube_service_upserted,
    make_endpoint_slice,
    make_kube_service,
    make_pod,
    pod_added,
)
from tests.core.project._helpers import messages
from tests.core.project.test_node_gamma import NODE, _route

LEGACY = "slices:legacy.default:80"


def _events() -> list[Event]:
    client = make_pod(
        "client-0",
        service_account="client",
        node_name=NODE,
        ips=("10.0.0.5",),
        annotations={"config.aether.io/upstreams": "web"},
    )
    route = _route(
        "legacy",
        {
            "parentRefs": [{"group": "", "kind": "Service", "name": "web", "port": 80}],
            "rules": [{"backendRefs": [{"name": "legacy", "port": 80}]}],
        },
    )
    return [
        pod_added(client),
        kube_service_upserted(make_kube_service("web")),
        kube_service_upserted(make_kube_service("legacy", selector={})),
        endpoint_slice_upserted(
            make_endpoint_slice("legacy-1", namespace="default", addresses=("192.0.2.1",))
        ),
        gateway_object_upserted(route),
    ]


def _addresses(snapshot: object) -> list[tuple[str, int]]:
    assignment = messages(snapshot, ENDPOINT_TYPE)[LEGACY]  # type: ignore[arg-type]
    return [
        (item.endpoint.address.socket_address.address, item.endpoint.address.socket_address.port_value)
        for group in assignment.endpoints
        for item in group.lb_endpoints
    ]


def test_a_route_to_a_service_without_a_selector_takes_its_slices_plaintext() -> None:
    """The route names the slice cluster; the cluster is EDS without TLS; its endpoints are the slice's ready
    addresses at the slice's port of the Service port's name."""
    snapshot = project_node(fold_events(*_events()), node_name=NODE, now=AT)
    cluster = messages(snapshot, CLUSTER_TYPE)[LEGACY]
    assert not cluster.HasField("transport_socket")
    assert _addresses(snapshot) == [("192.0.2.1", 8080)]
    routes = messages(snapshot, ROUTE_TYPE)["out_http"]
    assert LEGACY in str(routes)


def test_a_slice_change_reprojects_only_its_service_clusters_assignment() -> None:
    """A slice of the routed Service changes: one ClusterLoadAssignment is sent again (the cluster stays), the
    result equals a full projection; a slice of an unrelated Service changes nothing; deleting the last slice leaves
    the cluster without endpoints (503 at once, never a missing cluster)."""
    projector = NodeProjector(node_name=NODE)
    state = fold_events(*_events())
    projector.project(state, now=AT)

    grown = make_endpoint_slice("legacy-1", namespace="default", addresses=("192.0.2.1", "192.0.2.2"))
    state = fold_events(endpoint_slice_upserted(grown), state=state)
    snapshot = projector.project(state, now=AT)
    assert snapshot == project_node(state, node_name=NODE, now=AT)
    assert projector.statistics().upserted == 1
    assert _addresses(snapshot) == [("192.0.2.1", 8080), ("192.0.2.2", 8080)]

    unrelated = make_endpoint_slice("other-1", namespace="default", service="other")
    state = fold_events(endpoint_slice_upserted(unrelated), state=state)
    assert projector.project(state, now=AT) == project_node(state, node_name=NODE, now=AT)
    assert (projector.statistics().upserted, projector.statistics().removed) == (0, 0)

    state = fold_events(endpoint_slice_deleted("legacy-1", namespace="default"), state=state)
    snapshot = projector.project(state, now=AT)
    assert snapshot == project_node(state, node_name=NODE, now=AT)
    assert LEGACY in messages(snapshot, CLUSTER_TYPE)
    assert _addresses(snapshot) == []
