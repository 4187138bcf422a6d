"""Tests of `aether.core.project.dependencies`: local pods, bind places, and the dependency set."""

from __future__ import annotations

from typing import Any

import attrs
import immutables
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aether.core.project.dependencies import (
    Declarations,
    Demand,
    ServiceDemand,
    declarations,
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


_SERVICES = ("default/a", "default/b", "shop/c", "shop/d", "shop/e")
_POD_NAMES = ("p0", "p1", "p2", "p3")
_REQUESTED = (
    "a.default.aether.internal",
    "c.shop.aether.internal",
    "c.shop.aether.internal:9090",
    "e.shop.aether.internal",
    "x.other.mesh.local",
)


def _pods_at(step: dict[str, tuple[int, tuple[int, ...]]]) -> tuple[Any, ...]:
    events = [
        pod_added(
            make_pod(
                name,
                namespace=_SERVICES[account].split("/")[0],
                service_account=_SERVICES[account].split("/")[1],
                annotations={"config.aether.io/upstreams": ",".join(_SERVICES[item] for item in upstreams)},
                ips=(f"10.0.0.{_POD_NAMES.index(name) + 1}",),
            )
        )
        for name, (account, upstreams) in sorted(step.items())
    ]
    return local_pods(fold_events(*events).pods, node_name="node-a").records


_PODS = st.dictionaries(
    st.sampled_from(_POD_NAMES),
    st.tuples(st.integers(0, len(_SERVICES) - 1), st.lists(st.integers(0, len(_SERVICES) - 1), max_size=3)),
    max_size=len(_POD_NAMES),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(_PODS, st.lists(st.sampled_from(_REQUESTED), unique=True), st.integers(0, 5)),
        min_size=1,
        max_size=6,
    )
)
def test_declarations_and_demand_derived_step_by_step_equal_those_computed_whole(
    steps: list[tuple[dict[str, tuple[int, tuple[int, ...]]], list[str], int]],
) -> None:
    """Pods coming, going and changing their upstreams, requests coming and expiring: the declarations derived
    from the previous ones are `declared_services`, with the services that joined and left, and the demand
    derived from the previous one (given those) equals the demand computed from scratch."""
    held_records: dict[str, Any] = {}
    previous: Declarations | None = None
    previous_demand: Demand | None = None
    for pods, names, live_from in steps:
        # A pod that did not change keeps its record object, as the state does.
        records = tuple(
            held if (held := held_records.get(record.pod.key)) is not None and held == record else record
            for record in _pods_at(pods)
        )
        held_records = {record.pod.key: record for record in records}
        found = declarations(records, previous=previous)
        assert found.services == declared_services(records)
        if previous is not None:
            before, after = set(previous.services), set(found.services)
            assert (found.base, found.joined, found.left) == (
                previous.services,
                tuple(sorted(after - before)),
                tuple(sorted(before - after)),
            )
            if not found.joined and not found.left:
                assert found.services is previous.services
        index = request_index(
            _requests(*(("node-a", name, AT + offset) for offset, name in enumerate(names))),
            node_name="node-a",
            mesh_domain="aether.internal",
            ttl_seconds=60,
        )
        whole = demand(found.services, index, live_from=min(live_from, len(names)))
        if previous_demand is not None:
            derived = demand(
                found.services,
                index,
                live_from=min(live_from, len(names)),
                previous=previous_demand,
                joined=found.joined,
                left=found.left,
            )
            assert derived == whole
            before, after = set(previous_demand.services), set(derived.services)
            assert (derived.moved_from, derived.joined, derived.left) == (
                previous_demand.services,
                tuple(sorted(after - before)),
                tuple(sorted(before - after)),
            )
        previous, previous_demand = found, whole
