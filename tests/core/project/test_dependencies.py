"""Tests of `aether.core.project.dependencies`: local pods, bind places, and the dependency set."""

from __future__ import annotations

import attrs
import immutables

from aether.core.project.dependencies import (
    Demand,
    ServiceDemand,
    declared_services,
    demand,
    local_pods,
    request_index,
)
from aether.core.state import OnDemandRequest
from aether.testing import AT, fold_events, make_pod, node_capture_configured, pod_added
from tests.core.project._helpers import SECOND


def _requests(*items: tuple[str, str, int]) -> immutables.Map[tuple[str, str], OnDemandRequest]:
    return immutables.Map(
        ((node, name), OnDemandRequest(node_id=node, cluster_name=name, last_requested_at=at))
        for node, name, at in items
    )


def test_local_pods_are_the_node_s_or_all_in_local_mode() -> None:
    """Pods of other nodes are not local; an empty node name takes every pod."""
    state = fold_events(
        pod_added(make_pod("web-1", node_name="node-a")),
        pod_added(make_pod("web-2", node_name="node-b", ips=("10.0.0.2",))),
    )
    assert [r.pod.name for r in local_pods(state.pods, node_name="node-a").records] == ["web-1"]
    assert [r.pod.name for r in local_pods(state.pods, node_name="").records] == ["web-1", "web-2"]


def test_only_the_first_pod_of_a_bind_place_gets_listeners() -> None:
    """Two pods in one namespace, or with one IP in local mode, cannot both bind: the first (by key) does;
    a pod without an IP is not even stored (it is rejected until it has one)."""
    state = fold_events(
        pod_added(make_pod("a", netns="/run/netns/x", ips=("10.0.0.1",))),
        pod_added(make_pod("b", netns="/run/netns/x", ips=("10.0.0.2",))),
        pod_added(make_pod("c", ips=("10.0.0.3",))),
        pod_added(make_pod("d", ips=("10.0.0.3",))),
        pod_added(make_pod("e", ips=())),
        pod_added(make_pod("f", ips=("10.0.0.6",))),
    )
    assert local_pods(state.pods, node_name="node-a").bound == frozenset(
        {"default/a", "default/c", "default/f"}
    )


def test_declared_services_are_own_services_and_upstreams() -> None:
    """A pod's own service and its declared upstreams, sorted and distinct across pods."""
    state = fold_events(
        pod_added(make_pod("web-1", annotations={"config.aether.io/upstreams": "db, shop/cart"})),
        pod_added(make_pod("db-0", service_account="db", ips=("10.0.0.2",))),
    )
    records = local_pods(state.pods, node_name="node-a").records
    assert declared_services(records) == ("default/db", "default/web", "shop/cart")


def test_requests_expire_after_the_ttl() -> None:
    """A request is live until `last_requested_at + ttl`, inclusive; the live ones are a suffix by expiry."""
    index = request_index(
        _requests(
            ("node-a", "old.shop.aether.internal", AT - 120 * SECOND),
            ("node-a", "new.shop.aether.internal", AT),
            ("node-b", "other.shop.aether.internal", AT),
        ),
        node_name="node-a",
        mesh_domain="aether.internal",
        ttl_seconds=60,
    )
    assert index.names == ("old.shop.aether.internal", "new.shop.aether.internal")
    assert index.live_from(AT - 200 * SECOND) == 0
    assert index.live_from(AT - 60 * SECOND) == 0
    assert index.live_from(AT - 60 * SECOND + 1) == 1
    assert index.live_from(AT + 60 * SECOND) == 1
    assert index.live_from(AT + 60 * SECOND + 1) == 2


def test_local_mode_takes_every_node_s_requests() -> None:
    """With an empty node name, the requests of every node count."""
    index = request_index(
        _requests(("node-a", "a.shop.aether.internal", AT), ("node-b", "b.shop.aether.internal", AT)),
        node_name="",
        mesh_domain="aether.internal",
        ttl_seconds=60,
    )
    assert index.names == ("a.shop.aether.internal", "b.shop.aether.internal")


def test_the_dependency_set_joins_declared_and_requested_services() -> None:
    """Requested names group by service; a requested service that is also declared stays declared; names of
    no mesh service (here: another domain) are unmatched."""
    index = request_index(
        _requests(
            ("node-a", "db.shop.aether.internal", AT),
            ("node-a", "db.shop.aether.internal:9090", AT),
            ("node-a", "web.default.aether.internal:8080", AT),
            ("node-a", "web.default.mesh.local", AT),
        ),
        node_name="node-a",
        mesh_domain="aether.internal",
        ttl_seconds=60,
    )
    result = demand(("default/web",), index, live_from=0)
    assert result == Demand(
        services=("default/web", "shop/db"),
        by_service=immutables.Map(
            {
                "default/web": ServiceDemand(declared=True, requested=("web.default.aether.internal:8080",)),
                "shop/db": ServiceDemand(
                    declared=False, requested=("db.shop.aether.internal", "db.shop.aether.internal:9090")
                ),
            }
        ),
        requesting=("default/web", "shop/db"),
        undeclared=("shop/db",),
        unmatched=("web.default.mesh.local",),
    )
    assert demand(("default/web",), index, live_from=4).services == ("default/web",)


def test_a_pod_that_cannot_bind_gets_no_listeners_and_a_pod_without_ips_has_no_place() -> None:
    """The second pod of a shared namespace is projected without listeners; an address-less record binds nowhere."""
    from aether.core.project import project_node
    from aether.core.project.dependencies import bind_place
    from aether.core.snapshot import LISTENER_TYPE

    state = fold_events(
        pod_added(make_pod("a", netns="/run/netns/x", ips=("10.0.0.1",))),
        pod_added(make_pod("b", netns="/run/netns/x", ips=("10.0.0.2",))),
    )
    names = sorted(project_node(state, node_name="node-a", now=0).of_type(LISTENER_TYPE))
    assert [name for name in names if name.endswith("b.default")] == []
    assert [name for name in names if name.endswith("a.default")] != []
    record = state.pods["default/a"]
    assert bind_place(attrs.evolve(record, pod=attrs.evolve(record.pod, netns="", ips=()))) is None


def test_a_pod_of_a_captured_node_binds_only_in_its_namespace() -> None:
    """On a captured node, a pod known before its CNI ADD (no namespace yet) is joining: no place, no listeners,
    no registration; the ADD's namespace gives it all three. A node not captured keeps local mode."""
    from aether.core.project import project_node
    from aether.core.project.registrations import local_endpoints
    from aether.core.snapshot import CLUSTER_TYPE, LISTENER_TYPE

    watched = fold_events(
        node_capture_configured("node-a"),
        pod_added(make_pod("web-1", ips=("10.0.0.1",)), source="kubernetes"),
        pod_added(make_pod("web-2", node_name="node-b", ips=("10.0.0.2",)), source="kubernetes"),
    )
    local = local_pods(watched.pods, node_name="", captured_nodes=watched.captured_nodes)
    assert (local.bound, local.joining) == (frozenset({"default/web-2"}), frozenset({"default/web-1"}))
    snapshot = project_node(watched, node_name="node-a", now=0)
    assert sorted(snapshot.of_type(LISTENER_TYPE)) == []
    assert "app_web-1.default_8080" not in snapshot.of_type(CLUSTER_TYPE)
    assert list(local_endpoints(watched, node_name="node-a", cluster_name="")) == []

    joined = fold_events(
        pod_added(make_pod("web-1", ips=("10.0.0.1",), netns="/run/netns/web-1")), state=watched
    )
    assert sorted(project_node(joined, node_name="node-a", now=0).of_type(LISTENER_TYPE)) == [
        "capture_web-1.default",
        "inbound_web-1.default",
        "l4_tcp_web-1.default",
        "outbound_http_web-1.default",
    ]
    assert [e.pod_name for e in local_endpoints(joined, node_name="node-a", cluster_name="").values()] == [
        "web-1"
    ]
