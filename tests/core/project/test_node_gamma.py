"""GAMMA in the node projection: a service's GAMMA routes replace its own virtual host's routes on `out_http` and
`cap_http`, the services they send to get clusters, and the incremental projector follows route changes."""

from __future__ import annotations

from typing import Any

from aether.core.events import Event
from aether.core.events.kube import KubeObject, ObjectMeta
from aether.core.project import NodeProjector, project_node
from aether.core.reduce.kube import canonical_json
from aether.core.snapshot import CLUSTER_TYPE, ROUTE_TYPE, Snapshot
from aether.core.state import State
from aether.testing import (
    AT,
    fold_events,
    gateway_object_deleted,
    gateway_object_upserted,
    kube_service_upserted,
    make_kube_service,
    make_pod,
    pod_added,
)
from tests.core.project._helpers import messages

NODE = "node-a"
WEB_PORT_80 = "gamma:web.default.aether.internal:80"
"""The virtual host of the GAMMA routes for web's Service port 80 (their parentRefs name port 80)."""


def _route(name: str, spec: dict[str, Any], *, generation: int = 1) -> KubeObject:
    meta = ObjectMeta(
        kind="HTTPRoute",
        namespace="default",
        name=name,
        generation=generation,
        creation_timestamp="2024-01-01T00:00:00Z",
    )
    return KubeObject(meta=meta, spec_json=canonical_json(spec))


def _canary(weight: int = 10) -> KubeObject:
    return _route(
        "canary",
        {
            "parentRefs": [{"group": "", "kind": "Service", "name": "web", "port": 80}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/beta"}}],
                    "backendRefs": [{"name": "beta", "port": 80}],
                },
                {
                    "backendRefs": [
                        {"name": "web", "port": 80, "weight": 100 - weight},
                        {"name": "beta", "port": 80, "weight": weight},
                    ]
                },
            ],
        },
        generation=weight,
    )


def _base() -> list[Event]:
    client = make_pod(
        "client-0",
        service_account="client",
        node_name=NODE,
        ips=("10.0.0.5",),
        annotations={"config.aether.io/upstreams": "web, db"},
    )
    return [
        pod_added(client),
        kube_service_upserted(make_kube_service("web")),
        kube_service_upserted(make_kube_service("beta")),
    ]


def _vhost_routes(snapshot: Snapshot, table: str, vhost: str) -> list[str]:
    (found,) = [item for item in messages(snapshot, ROUTE_TYPE)[table].virtual_hosts if item.name == vhost]
    return [route.name for route in found.routes]


def test_gamma_routes_replace_the_service_routes_and_bring_their_backends() -> None:
    """web's virtual host holds the canary's routes (idempotent variant first) on both tables; beta gets a cluster."""
    snapshot = project_node(fold_events(*_base(), gateway_object_upserted(_canary())), node_name=NODE, now=AT)
    expected = [
        "HTTPRoute/default/canary/rule/0/match/0",
        "HTTPRoute/default/canary/rule/0/match/0",
        "HTTPRoute/default/canary/rule/1/match/0",
        "HTTPRoute/default/canary/rule/1/match/0",
    ]
    assert _vhost_routes(snapshot, "out_http", WEB_PORT_80) == expected
    assert _vhost_routes(snapshot, "cap_http", WEB_PORT_80) == expected
    assert "beta.default.aether.internal" in messages(snapshot, CLUSTER_TYPE)
    assert _vhost_routes(snapshot, "out_http", "db.default.aether.internal") == ["", ""]
    assert snapshot.consistent() == ()


def test_without_gamma_routes_nothing_changes() -> None:
    """A route whose parent is another service, or no route at all: web keeps its default routes, beta is absent."""
    other = _route("other", {"parentRefs": [{"group": "", "kind": "Service", "name": "beta", "port": 80}]})
    for events in (_base(), [*_base(), gateway_object_upserted(other)]):
        snapshot = project_node(fold_events(*events), node_name=NODE, now=AT)
        assert _vhost_routes(snapshot, "out_http", "web.default.aether.internal") == ["", ""]
        assert "beta.default.aether.internal" not in messages(snapshot, CLUSTER_TYPE)


def test_incremental_projection_follows_route_changes() -> None:
    """Adding, changing and deleting a route: the projector equals a full projection at every step, and a change
    that leaves the routing equal re-projects no service."""
    projector = NodeProjector(node_name=NODE)
    states: list[State] = []
    state = fold_events(*_base())
    steps: list[Event] = [
        gateway_object_upserted(_canary(10)),
        gateway_object_upserted(_canary(20)),
        kube_service_upserted(make_kube_service("unrelated")),
        gateway_object_deleted(_canary().meta),
    ]
    projected = []
    for event in [None, *steps]:
        if event is not None:
            state = fold_events(event, state=state)
        states.append(state)
        snapshot = projector.project(state, now=AT)
        assert snapshot == project_node(state, node_name=NODE, now=AT)
        projected.append(projector.statistics().services_projected)
    # First: client, db, web; added: web and beta; reweighted: web; unrelated Service: nothing; deleted: web (beta leaves).
    assert projected == [3, 2, 1, 0, 1]


def test_a_route_change_within_the_same_dependency_set_reprojects_only_its_service() -> None:
    """Routes that send only to services already in the set keep the set: only the routed service is projected."""
    projector = NodeProjector(node_name=NODE)

    def own(prefix: str) -> KubeObject:
        spec = {
            "parentRefs": [{"group": "", "kind": "Service", "name": "web", "port": 80}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
                    "backendRefs": [{"name": "db", "port": 80}],
                }
            ],
        }
        return _route("own", spec)

    state = fold_events(
        *_base(), kube_service_upserted(make_kube_service("db")), gateway_object_upserted(own("/a"))
    )
    projector.project(state, now=AT)
    state = fold_events(gateway_object_upserted(own("/b")), state=state)
    snapshot = projector.project(state, now=AT)
    assert snapshot == project_node(state, node_name=NODE, now=AT)
    assert projector.statistics().services_projected == 1
    assert _vhost_routes(snapshot, "out_http", WEB_PORT_80) == [
        "HTTPRoute/default/own/rule/0/match/0",
        "HTTPRoute/default/own/rule/0/match/0",
    ]


def test_a_selector_change_re_projects_the_routed_and_the_selected_service_only() -> None:
    """A backend Service's selector gains a key: the routed service (its routes) and the backend's service (its
    cluster's subsets) are projected again, nothing else, and the result equals a full projection; a selector whose
    key sets stay the same keeps the backend's cluster."""
    projector = NodeProjector(node_name=NODE)
    state = fold_events(*_base(), gateway_object_upserted(_canary(10)))
    projector.project(state, now=AT)
    steps = (
        (make_kube_service("beta", selector={"app": "beta", "track": "canary"}), 2),
        (make_kube_service("beta", selector={"app": "beta", "track": "stable"}), 1),
    )
    for service, expected in steps:
        state = fold_events(kube_service_upserted(service), state=state)
        snapshot = projector.project(state, now=AT)
        assert snapshot == project_node(state, node_name=NODE, now=AT)
        assert projector.statistics().services_projected == expected
    cluster = messages(snapshot, CLUSTER_TYPE)["beta.default.aether.internal"]
    assert [list(item.keys) for item in cluster.lb_subset_config.subset_selectors] == [["app", "track"]]
