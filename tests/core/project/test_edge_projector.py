"""Tests of `aether.core.project.edge_projector`: the edge snapshot re-projected unit by unit, equal to
`edge_snapshot` of the same view and state."""

from __future__ import annotations

from aether.core.events import Event
from aether.core.gateway import GatewayProjector, gateway_view
from aether.core.project.edge import EdgeOptions, edge_snapshot
from aether.core.project.edge_projector import EdgeProjector, EdgeProjectorStatistics
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, ROUTE_TYPE, Snapshot
from aether.core.state import State
from aether.testing import (
    endpoint_added,
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
from aether.testing.gateway_objects import edge_gateway_events

OPTIONS = EdgeOptions(cleartext=True)


def _route(name: str, path: str, *backends: str) -> Event:
    spec = {
        "parentRefs": [{"name": "edge", "namespace": "edge"}],
        "hostnames": ["shop.example"],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                "backendRefs": [{"name": backend, "port": 80} for backend in backends],
            }
        ],
    }
    return gateway_object_upserted(make_kube_object(name, spec=spec))


def _base() -> State:
    return fold_events(
        *edge_gateway_events(),
        kube_service_upserted(make_kube_service("web")),
        kube_service_upserted(make_kube_service("api")),
        _route("a", "/a", "web"),
        _route("b", "/b", "api"),
        _route("c", "/c", "web"),
        endpoints_snapshot_received(
            make_endpoint("10.0.0.1", service="default/web"), make_endpoint("10.0.0.2", service="default/api")
        ),
    )


class _Edge:
    """A long-running edge's two projectors, each projection checked against the snapshot from scratch."""

    def __init__(self) -> None:
        self.views = GatewayProjector()
        self.projector = EdgeProjector(node_id="edge-0", options=OPTIONS)

    def project(self, state: State) -> Snapshot:
        snapshot = self.projector.project(self.views.view(state), state)
        expected = edge_snapshot(gateway_view(state), state, node_id="edge-0", options=OPTIONS)
        assert snapshot == expected
        assert {key: item.body for key, item in snapshot.of_type(ROUTE_TYPE).items()} == {
            key: item.body for key, item in expected.of_type(ROUTE_TYPE).items()
        }
        return snapshot

    def statistics(self) -> EdgeProjectorStatistics:
        return self.projector.statistics()


def _changed(before: Snapshot, after: Snapshot) -> list[tuple[str, str]]:
    """The (type URL, name) of the resources `after` holds as other objects than `before` (or newly)."""
    return sorted(
        (type_url, name)
        for type_url in after.resources
        for name, item in after.of_type(type_url).items()
        if before.of_type(type_url).get(name) is not item
    )


def test_the_same_state_again_reuses_every_resource() -> None:
    """Projected twice, a state gives the same resource objects and builds nothing."""
    edge, state = _Edge(), _base()
    first = edge.project(state)
    again = edge.project(state)
    assert _changed(first, again) == []
    assert edge.statistics() == EdgeProjectorStatistics(
        projections=2,
        listeners_built=0,
        tables_built=0,
        virtual_hosts_joined=0,
        routes_serialized=0,
        clusters_projected=0,
        upserted=0,
        removed=0,
    )


def test_a_changed_route_re_serializes_that_route_and_its_table_only() -> None:
    """One route's path changed: its route serialized, its virtual host joined, the table replaced; the listener,
    clusters and secrets are the objects they were."""
    edge, state = _Edge(), _base()
    before = edge.project(state)
    after = edge.project(fold_events(_route("b", "/b2", "api"), state=state))
    assert _changed(before, after) == [(ROUTE_TYPE, "edge_8080")]
    statistics = edge.statistics()
    assert (statistics.routes_serialized, statistics.virtual_hosts_joined, statistics.tables_built) == (
        1,
        1,
        1,
    )
    assert (statistics.listeners_built, statistics.clusters_projected) == (0, 0)


def test_an_endpoint_change_re_projects_its_service_clusters_only() -> None:
    """A new endpoint of one backend: that service's load assignment is replaced, nothing else."""
    edge, state = _Edge(), _base()
    before = edge.project(state)
    after = edge.project(
        fold_events(
            endpoint_added(make_endpoint("10.0.0.3", service="default/web"), version="2"), state=state
        )
    )
    assert _changed(before, after) == [(ENDPOINT_TYPE, "web.default.aether.internal")]
    assert edge.statistics().clusters_projected == 1


def test_a_new_selection_of_a_backend_cluster_re_projects_its_subsets() -> None:
    """Two Services select pods of one service account by other label keys: a route sending to the second one,
    beside a route to the first, changes only the keys the shared cluster subsets by (not its name)."""
    shared = (
        pod_added(
            make_pod("one", service_account="shared", labels={"aether.io/managed": "true", "app": "one"})
        ),
        pod_added(
            make_pod(
                "two",
                service_account="shared",
                ips=("10.0.0.9",),
                labels={"aether.io/managed": "true", "app": "two", "track": "canary"},
            )
        ),
        kube_service_upserted(make_kube_service("one")),
        kube_service_upserted(make_kube_service("two", selector={"app": "two", "track": "canary"})),
        _route("d", "/d", "one"),
    )
    edge, state = _Edge(), fold_events(*shared, state=_base())
    before = edge.project(state)
    after = edge.project(fold_events(_route("e", "/e", "two"), state=state))
    assert _changed(before, after) == [
        (CLUSTER_TYPE, "shared.default.aether.internal"),
        (ROUTE_TYPE, "edge_8080"),
    ]
