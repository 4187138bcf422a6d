"""GAMMA L4 in the node projection: TCPRoutes and TLSRoutes whose parent is a Service add a filter chain per routed
ClusterIP and port (and SNI name) to each pod's capture and L4 listeners, their backends get `tcp:` clusters, and
the incremental projector follows route changes."""

from __future__ import annotations

from typing import Any

from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2

from aether.core.events import Event
from aether.core.events.kube import KubeObject, ServicePort
from aether.core.project import NodeProjector, project_node
from aether.core.snapshot import CLUSTER_TYPE, LISTENER_TYPE, Snapshot
from aether.core.state import State
from aether.testing import (
    AT,
    fold_events,
    gateway_object_deleted,
    gateway_object_upserted,
    kube_service_upserted,
    make_kube_object,
    make_kube_service,
    make_pod,
    pod_added,
)
from tests.core.project._helpers import messages

NODE = "node-a"
TOKEN = "client-0.default"


def _service(name: str, cluster_ip: str, *ports: int) -> Event:
    return kube_service_upserted(
        make_kube_service(
            name, cluster_ip=cluster_ip, ports=[ServicePort(port=port) for port in ports or (5432,)]
        )
    )


def _tcp_pod(name: str, account: str) -> Event:
    return pod_added(
        make_pod(
            name,
            service_account=account,
            node_name="node-b",
            ips=("10.0.9.1",),
            labels={"app": account, "aether.io/managed": "true"},
            annotations={"endpoint.aether.io/protocol": "tcp"},
        )
    )


def _base(*, upstreams: str = "db") -> list[Event]:
    client = make_pod(
        "client-0",
        service_account="client",
        node_name=NODE,
        ips=("10.0.0.5",),
        netns="/var/run/netns/client-0",
        annotations={"config.aether.io/upstreams": upstreams},
    )
    return [
        pod_added(client),
        _service("db", "10.96.0.10", 5432),
        _service("db-v1", "10.96.0.11"),
        _service("db-v2", "10.96.0.12"),
        _service("web", "10.96.0.13", 80),
        _tcp_pod("db-v1-0", "db-v1"),
        _tcp_pod("db-v2-0", "db-v2"),
    ]


def _route(name: str, spec: dict[str, Any], *, kind: str = "TCPRoute", generation: int = 1) -> KubeObject:
    return make_kube_object(name, kind=kind, spec=spec, generation=generation)


def _split(v2: int = 10) -> KubeObject:
    return _route(
        "db-split",
        {
            "parentRefs": [{"group": "", "kind": "Service", "name": "db", "port": 5432}],
            "rules": [
                {
                    "backendRefs": [
                        {"name": "db-v1", "port": 5432, "weight": 100 - v2},
                        {"name": "db-v2", "port": 5432, "weight": v2},
                    ]
                }
            ],
        },
        generation=v2,
    )


def _tls(name: str, hostnames: list[str], backend: str) -> KubeObject:
    return _route(
        name,
        {
            "parentRefs": [{"group": "", "kind": "Service", "name": "db", "port": 5432}],
            "hostnames": hostnames,
            "rules": [{"backendRefs": [{"name": backend, "port": 5432}]}],
        },
        kind="TLSRoute",
    )


def _chains(snapshot: Snapshot, listener: str) -> dict[str, Any]:
    found = messages(snapshot, LISTENER_TYPE)[listener]
    return {chain.name: chain for chain in found.filter_chains}


def _proxy(chain: Any) -> Any:
    (item,) = chain.filters
    proxy = tcp_proxy_pb2.TcpProxy()
    assert item.typed_config.Unpack(proxy)
    return proxy


def _listener_filters(snapshot: Snapshot, listener: str) -> list[str]:
    return [item.name for item in messages(snapshot, LISTENER_TYPE)[listener].listener_filters]


def _emitted_clusters(snapshot: Snapshot) -> set[str]:
    return set(messages(snapshot, CLUSTER_TYPE))


def _proxied_clusters(snapshot: Snapshot) -> set[str]:
    names: set[str] = set()
    for listener in messages(snapshot, LISTENER_TYPE).values():
        for chain in listener.filter_chains:
            for item in chain.filters:
                if item.name == "envoy.filters.network.tcp_proxy":
                    proxy = _proxy(chain)
                    names.add(proxy.cluster) if proxy.cluster else names.update(
                        weighted.name for weighted in proxy.weighted_clusters.clusters
                    )
    return names


def test_a_tcproute_splits_its_service_port_on_both_transparent_listeners() -> None:
    """One chain per listener matches db's ClusterIP and port and splits 90/10 over the backends' tcp: clusters."""
    snapshot = project_node(fold_events(*_base(), gateway_object_upserted(_split())), node_name=NODE, now=AT)
    for listener, prefix in (
        (f"capture_{TOKEN}", f"capture_l4_{TOKEN}"),
        (f"l4_tcp_{TOKEN}", f"l4_tcp_{TOKEN}"),
    ):
        chain = _chains(snapshot, listener)[f"{prefix}_10.96.0.10_5432"]
        match = chain.filter_chain_match
        assert match.destination_port.value == 5432
        assert [(item.address_prefix, item.prefix_len.value) for item in match.prefix_ranges] == [
            ("10.96.0.10", 32)
        ]
        assert list(match.server_names) == []
        assert [(item.name, item.weight) for item in _proxy(chain).weighted_clusters.clusters] == [
            ("tcp:db-v1.default.aether.internal", 90),
            ("tcp:db-v2.default.aether.internal", 10),
        ]
        assert "envoy.filters.listener.tls_inspector" not in _listener_filters(snapshot, listener)
    assert {"tcp:db-v1.default.aether.internal", "tcp:db-v2.default.aether.internal"} <= _emitted_clusters(
        snapshot
    )
    assert _proxied_clusters(snapshot) <= _emitted_clusters(snapshot) | {"passthrough_original_dst"}
    assert snapshot.consistent() == ()


def test_tlsroutes_route_by_sni_and_unnamed_connections_pass_through() -> None:
    """Two TLSRoutes on db:5432: a chain per route with its SNI names (the older keeps a shared name), one
    backend each (a plain cluster), the TLS inspector on both listeners, and a nameless pass-through chain."""
    events = [
        *_base(),
        gateway_object_upserted(_tls("a", ["a.example.com"], "db-v1")),
        gateway_object_upserted(_tls("b", ["b.example.com", "a.example.com"], "db-v2")),
    ]
    snapshot = project_node(fold_events(*events), node_name=NODE, now=AT)
    listener = f"l4_tcp_{TOKEN}"
    chains = _chains(snapshot, listener)
    base = f"{listener}_10.96.0.10_5432"
    assert [name for name in chains if name.startswith(base)] == [
        f"{base}_a.example.com",
        f"{base}_b.example.com",
        base,
    ]
    assert list(chains[f"{base}_a.example.com"].filter_chain_match.server_names) == ["a.example.com"]
    assert list(chains[f"{base}_b.example.com"].filter_chain_match.server_names) == ["b.example.com"]
    assert _proxy(chains[f"{base}_a.example.com"]).cluster == "tcp:db-v1.default.aether.internal"
    assert _proxy(chains[base]).cluster == "passthrough_original_dst"
    for name in (listener, f"capture_{TOKEN}"):
        assert "envoy.filters.listener.tls_inspector" in _listener_filters(snapshot, name)
    assert snapshot.consistent() == ()


def test_a_route_without_a_usable_backend_refuses_its_connections() -> None:
    """All backends unresolved (an HTTP service, a missing one): the chain closes connections, naming no cluster."""
    http_pod = make_pod(
        "web-0",
        service_account="web",
        node_name="node-b",
        ips=("10.0.9.2",),
        labels={"app": "web", "aether.io/managed": "true"},
    )
    route = _route(
        "db-broken",
        {
            "parentRefs": [{"group": "", "kind": "Service", "name": "db", "port": 5432}],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}, {"name": "missing", "port": 1}]}],
        },
    )
    state = fold_events(*_base(), pod_added(http_pod), gateway_object_upserted(route))
    snapshot = project_node(state, node_name=NODE, now=AT)
    (chain,) = [
        chain
        for name, chain in _chains(snapshot, f"l4_tcp_{TOKEN}").items()
        if name.endswith("_10.96.0.10_5432")
    ]
    assert [item.name for item in chain.filters] == ["envoy.filters.network.direct_response"]
    assert "tcp:web.default.aether.internal" not in _emitted_clusters(snapshot)


def test_l4_routes_of_services_outside_the_dependency_set_are_not_projected() -> None:
    """A client that does not declare db gets no chain for db's route, and no clusters for its backends."""
    state = fold_events(*_base(upstreams="web"), gateway_object_upserted(_split()))
    snapshot = project_node(state, node_name=NODE, now=AT)
    assert [name for name in _chains(snapshot, f"l4_tcp_{TOKEN}")] == [f"l4_tcp_{TOKEN}"]
    assert "tcp:db-v1.default.aether.internal" not in _emitted_clusters(snapshot)


def test_a_backend_without_tcp_endpoints_still_gets_its_tcp_cluster() -> None:
    """No endpoint registered yet: the route's tcp: clusters exist anyway (empty), so the proxy never dangles."""
    snapshot = project_node(fold_events(*_base(), gateway_object_upserted(_split())), node_name=NODE, now=AT)
    clusters = messages(snapshot, CLUSTER_TYPE)
    assert clusters["tcp:db-v2.default.aether.internal"].name == "tcp:db-v2.default.aether.internal"


def test_incremental_projection_follows_l4_route_changes() -> None:
    """Adding, reweighting, adding a TLSRoute and deleting: the projector equals a full projection at every step,
    and an unrelated Service change re-projects no pod."""
    projector = NodeProjector(node_name=NODE)
    state: State = fold_events(*_base())
    steps: list[Event] = [
        gateway_object_upserted(_split(10)),
        gateway_object_upserted(_split(20)),
        kube_service_upserted(make_kube_service("unrelated", cluster_ip="10.96.9.9")),
        gateway_object_upserted(_tls("a", ["a.example.com"], "db-v2")),
        gateway_object_deleted(_split().meta),
    ]
    pods = []
    for event in [None, *steps]:
        if event is not None:
            state = fold_events(event, state=state)
        snapshot = projector.project(state, now=AT)
        assert snapshot == project_node(state, node_name=NODE, now=AT)
        pods.append(projector.statistics().pods_projected)
    assert pods == [1, 1, 1, 0, 1, 1]


def test_a_route_to_declared_backends_reprojects_them_for_their_tcp_clusters() -> None:
    """The backends are already in the set (declared): the set is the same, yet adding the route must give them
    their tcp: clusters, and deleting it take those away; the projector follows."""
    projector = NodeProjector(node_name=NODE)
    state = fold_events(*_base(upstreams="db, db-v1, db-v2"))
    projector.project(state, now=AT)
    for event, routed in (
        (gateway_object_upserted(_split()), True),
        (gateway_object_deleted(_split().meta), False),
    ):
        state = fold_events(event, state=state)
        snapshot = projector.project(state, now=AT)
        assert snapshot == project_node(state, node_name=NODE, now=AT)
        assert ("tcp:db-v2.default.aether.internal" in _emitted_clusters(snapshot)) is routed
        assert projector.statistics().services_projected == 2


def test_an_ipv6_cluster_ip_is_matched_as_one_address() -> None:
    """A ClusterIP with a colon is IPv6: its prefix is /128."""
    events = [*_base(), _service("db", "fd00::10", 5432), gateway_object_upserted(_split())]
    snapshot = project_node(fold_events(*events), node_name=NODE, now=AT)
    chain = _chains(snapshot, f"l4_tcp_{TOKEN}")[f"l4_tcp_{TOKEN}_fd00::10_5432"]
    assert [
        (item.address_prefix, item.prefix_len.value) for item in chain.filter_chain_match.prefix_ranges
    ] == [("fd00::10", 128)]
