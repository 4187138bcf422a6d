"""Tests of `aether.core.project.node`: the whole node snapshot, demand scoping, and incremental projection."""

from __future__ import annotations

from typing import Any

import attrs

from aether.core.events import Event
from aether.core.project import NodeProjector, ProjectorStatistics, project_node
from aether.core.snapshot import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    LISTENER_TYPE,
    ROUTE_TYPE,
    SECRET_TYPE,
    Piece,
    Resource,
    Snapshot,
    pieces_digest,
)
from aether.core.state import State
from aether.testing import (
    AT,
    endpoint_added,
    endpoint_updated,
    fold_events,
    make_endpoint,
    make_mesh_config,
    make_pod,
    make_svid,
    mesh_config_updated,
    on_demand_cluster_requested,
    pod_added,
    pod_removed,
    pod_updated,
    registry_service_added,
    svid_removed,
    svid_rotated,
)
from tests.core.project._helpers import (
    BUNDLE,
    DB_ID,
    NODE,
    SECOND,
    WEB_ID,
    hcm_of,
    mesh_events,
    messages,
    routed_clusters,
)

MESH = fold_events(*mesh_events())


def _names(snapshot: Snapshot) -> dict[str, list[str]]:
    return {
        type_url.rsplit(".", 1)[-1]: sorted(snapshot.of_type(type_url))
        for type_url in sorted(snapshot.resources)
    }


def _then(state: State, *events: Event) -> State:
    return fold_events(*events, state=state)


def test_the_node_snapshot_holds_its_pods_and_their_dependencies() -> None:
    """Listeners and app clusters per pod; clusters and assignments per service of the dependency set; both
    route tables; the SVIDs and the bundle. Consistent, at the state's seq, with nothing left unanswered."""
    snapshot = project_node(MESH, node_name=NODE, now=AT)
    assert (snapshot.node_id, snapshot.seq, snapshot.not_found, snapshot.consistent()) == (
        NODE,
        MESH.seq,
        frozenset(),
        (),
    )
    services = [
        "api.shop.aether.internal",
        "api.shop.aether.internal:8443",
        "db.shop.aether.internal",
        "tcp:cache.shop.aether.internal",
        "web.default.aether.internal",
        "web.default.aether.internal:9090",
    ]
    assert _names(snapshot) == {
        "Cluster": sorted(
            [
                *services,
                "app_db-0.shop_8080",
                "app_web-1.default_8080",
                "app_web-1.default_9090",
                "passthrough_original_dst",
            ]
        ),
        "ClusterLoadAssignment": services,
        "Listener": [  # db-0 has no network namespace: no capture listeners
            "capture_web-1.default",
            "inbound_db-0.shop",
            "inbound_quic_db-0.shop",  # the UDP (HTTP/3) half of each mesh inbound
            "inbound_quic_web-1.default",
            "inbound_web-1.default",
            "l4_tcp_web-1.default",
            "outbound_http_db-0.shop",
            "outbound_http_web-1.default",
        ],
        "RouteConfiguration": ["cap_http", "out_http"],
        "Secret": [
            "caller:fallback",
            f"caller:{WEB_ID}",
            f"caller:{DB_ID}",
            BUNDLE,
            WEB_ID,
            DB_ID,
        ],
    }


def test_every_cluster_a_route_names_is_in_the_snapshot() -> None:
    """Route tables and inbound chains only name clusters the snapshot holds."""
    snapshot = project_node(MESH, node_name=NODE, now=AT)
    clusters = set(snapshot.of_type(CLUSTER_TYPE))
    named: set[str] = set()
    for table in messages(snapshot, ROUTE_TYPE).values():
        named |= routed_clusters(table)
    for listener in messages(snapshot, LISTENER_TYPE).values():
        for chain in listener.filter_chains:
            if chain.filters[-1].name.endswith("http_connection_manager") and hcm_of(chain).HasField(
                "route_config"
            ):
                named |= routed_clusters(hcm_of(chain).route_config)
    assert named - clusters == set()
    assert "passthrough_original_dst" in named


def test_services_outside_the_dependency_set_get_nothing() -> None:
    """A registered service no local pod needs, and pods of another node, are not projected."""
    state = _then(
        MESH,
        registry_service_added("other/far", version="2"),
        endpoint_added(make_endpoint("10.9.0.1", service="other/far"), version="3"),
        pod_added(make_pod("far-1", node_name="node-b", service_account="far", ips=("10.9.9.9",))),
    )
    snapshot = project_node(state, node_name=NODE, now=AT)
    assert not [name for name in snapshot.of_type(CLUSTER_TYPE) if "far" in name]
    assert "outbound_http_far-1.default" not in snapshot.of_type(LISTENER_TYPE)
    assert "outbound_http_far-1.default" in project_node(state, node_name="", now=AT).of_type(LISTENER_TYPE)


def test_on_demand_services_stay_for_the_ttl_only() -> None:
    """A service asked for on demand is in the set until `ttl` after its last request, then leaves it."""
    state = _then(
        MESH,
        mesh_config_updated(make_mesh_config(on_demand_ttl_seconds=60, generation=2)),
        on_demand_cluster_requested("api.shop.aether.internal:8443", at=AT + 10 * SECOND),
    )
    ttl_end = AT + 70 * SECOND
    assert "api.shop.aether.internal" in project_node(state, node_name=NODE, now=ttl_end).of_type(
        CLUSTER_TYPE
    )
    assert "api.shop.aether.internal" not in project_node(state, node_name=NODE, now=ttl_end + 1).of_type(
        CLUSTER_TYPE
    )


def test_requests_for_unknown_services_are_answered_not_found() -> None:
    """A valid mesh name whose service is not in the catalog goes to `not_found`, and gets no cluster."""
    state = _then(MESH, on_demand_cluster_requested("ghost.shop.aether.internal:80"))
    snapshot = project_node(state, node_name=NODE, now=AT)
    assert snapshot.not_found == frozenset({"ghost.shop.aether.internal:80"})
    assert "ghost.shop.aether.internal" not in snapshot.of_type(CLUSTER_TYPE)


def test_requests_under_an_old_mesh_domain_are_not_found() -> None:
    """After the mesh domain changes, a request under the old one names no mesh service: not found."""
    state = _then(MESH, mesh_config_updated(make_mesh_config(mesh_domain="mesh.local", generation=2)))
    snapshot = project_node(state, node_name=NODE, now=AT)
    assert snapshot.not_found == frozenset({"api.shop.aether.internal:8443"})
    assert "db.shop.mesh.local" in snapshot.of_type(CLUSTER_TYPE)
    assert snapshot.consistent() == ()


def test_a_node_without_any_svid_runs_plaintext() -> None:
    """With every SVID gone the clusters carry no TLS and no secret but the bundle remains."""
    state = _then(MESH, svid_removed(WEB_ID), svid_removed(DB_ID))
    snapshot = project_node(state, node_name=NODE, now=AT)
    db = messages(snapshot, CLUSTER_TYPE)["db.shop.aether.internal"]
    assert not db.transport_socket_matches
    assert not db.HasField("transport_socket")
    assert sorted(snapshot.of_type(SECRET_TYPE)) == [BUNDLE]


def test_a_pod_without_its_own_svid_presents_the_first_local_one() -> None:
    """The pod's caller secret holds the first local SVID while it has none; the clusters do not change."""
    state = _then(MESH, svid_removed(WEB_ID))
    snapshot = project_node(state, node_name=NODE, now=AT)
    secrets = messages(snapshot, SECRET_TYPE)
    db_chain = secrets[DB_ID].tls_certificate.certificate_chain
    assert secrets[f"caller:{WEB_ID}"].tls_certificate.certificate_chain == db_chain
    assert secrets["caller:fallback"].tls_certificate.certificate_chain == db_chain
    assert WEB_ID not in secrets
    before = project_node(MESH, node_name=NODE, now=AT)
    assert snapshot.of_type(CLUSTER_TYPE) == before.of_type(CLUSTER_TYPE)


def test_a_new_local_identity_re_projects_no_other_service() -> None:
    """A pod of a new service account and its SVID: its own service joins the set (its cluster, assignment and
    virtual hosts), its pod's resources and its two secrets change; no other service's resources do."""
    projector = NodeProjector(node_name=NODE)
    before = projector.project(MESH, now=AT)
    new_id = "spiffe://aether.internal/ns/shop/sa/cart"
    state = _then(
        MESH,
        pod_added(make_pod("cart-0", namespace="shop", service_account="cart")),
        svid_rotated(make_svid(new_id)),
    )
    after = projector.project(state, now=AT)
    assert after == project_node(state, node_name=NODE, now=AT)
    assert projector.statistics().services_projected == 1
    changed = {
        (type_url.rsplit(".", 1)[-1], name)
        for type_url, held in after.resources.items()
        for name, resource in held.items()
        if before.of_type(type_url).get(name) is not resource
    }
    assert {item for item in changed if "cart" not in item[1]} == {
        ("RouteConfiguration", "cap_http"),
        ("RouteConfiguration", "out_http"),
    }
    assert {name for kind, name in changed if kind == "Secret"} == {new_id, f"caller:{new_id}"}


def test_a_route_table_is_assembled_from_the_services_pieces_without_rehashing_them() -> None:
    """Both mesh route tables hold each service's virtual hosts as the very `Piece` its projection made (hashed
    once, there), in groups, and their digest is the rule's over the pieces' digests: a service joining the set
    leaves the others' pieces the same objects, so no other service's bytes are hashed again."""
    projector = NodeProjector(node_name=NODE)
    before = projector.project(MESH, now=AT)
    state = _then(MESH, pod_added(make_pod("cart-0", namespace="shop", service_account="cart")))
    after = projector.project(state, now=AT)
    assert after == project_node(state, node_name=NODE, now=AT)
    old_out, new_out = before.of_type(ROUTE_TYPE)["out_http"], after.of_type(ROUTE_TYPE)["out_http"]
    new_cap = after.of_type(ROUTE_TYPE)["cap_http"]
    assert new_out.digest != old_out.digest
    for table in (new_out, new_cap):
        assert table.digest == pieces_digest(table.pieces)
        assert b"".join(chunk for piece in table.pieces for chunk in piece.chunks()) == table.body
    # Head, the groups of the services' pieces, catch-all: the groups are shared by both tables, and the pieces
    # of the services that were there already are the objects of the previous tables.
    assert all(a is b for a, b in zip(new_out.pieces[1:-1], new_cap.pieces[1:-1], strict=True))

    def services_pieces(table: Resource) -> list[Piece]:
        return [member for group in table.pieces[1:-1] for member in group.members]

    kept = {id(piece) for piece in services_pieces(old_out)}
    assert len(services_pieces(new_out)) == len(kept) + 1
    assert sum(id(piece) in kept for piece in services_pieces(new_out)) == len(kept)


def test_projecting_the_same_state_again_changes_nothing() -> None:
    """A second projection of the same state reuses every resource: nothing upserted, nothing removed."""
    projector = NodeProjector(node_name=NODE)
    first = projector.project(MESH, now=AT)
    second = projector.project(MESH, now=AT)
    assert second == first
    assert projector.statistics() == ProjectorStatistics(
        projections=2, services=4, services_projected=0, pods_projected=0, upserted=0, removed=0
    )


def test_one_endpoint_change_re_projects_its_service_s_assignment_only() -> None:
    """An endpoint's weight changes: one service is re-projected, one resource (its assignment) replaced, and
    every other resource is the very same object."""
    projector = NodeProjector(node_name=NODE)
    before = projector.project(MESH, now=AT)
    state = _then(
        MESH,
        endpoint_updated(
            make_endpoint("10.0.1.2", service="shop/db", region="eu", zone="eu-b", weight=9), version="2"
        ),
    )
    after = projector.project(state, now=AT)
    assert after == project_node(state, node_name=NODE, now=AT)
    assert projector.statistics() == ProjectorStatistics(
        projections=2, services=4, services_projected=1, pods_projected=0, upserted=1, removed=0
    )
    changed = [
        (type_url, name)
        for type_url, held in after.resources.items()
        for name, resource in held.items()
        if before.of_type(type_url).get(name) is not resource
    ]
    assert changed == [(ENDPOINT_TYPE, "db.shop.aether.internal")]
    assert after.version(CLUSTER_TYPE) == before.version(CLUSTER_TYPE)
    assert after.version(ENDPOINT_TYPE) != before.version(ENDPOINT_TYPE)


def test_a_new_upstream_annotation_adds_only_its_service() -> None:
    """A pod declares one more upstream: that service's cluster and assignment join, both route tables gain its
    virtual host, and the pod's listeners stay the same objects (rebuilt, but byte-identical)."""
    projector = NodeProjector(node_name=NODE)
    before = projector.project(MESH, now=AT)
    web = MESH.pods["default/web-1"].pod
    annotations = {**web.annotations, "config.aether.io/upstreams": "shop/db, shop/cache, shop/api"}
    state = _then(MESH, pod_updated(attrs.evolve(web, annotations=annotations)))
    after = projector.project(state, now=AT)
    assert after == project_node(state, node_name=NODE, now=AT)
    changed = sorted(
        (type_url.rsplit(".", 1)[-1], name)
        for type_url, held in after.resources.items()
        for name, resource in held.items()
        if before.of_type(type_url).get(name) is not resource
    )
    # shop/api was requested on demand already: declared now, every resource is byte-identical and kept.
    assert changed == []
    state = _then(
        state,
        pod_updated(
            attrs.evolve(
                web,
                annotations={**annotations, "config.aether.io/upstreams": "shop/db, shop/cache, shop/new"},
            )
        ),
    )
    after = projector.project(state, now=AT)
    assert after == project_node(state, node_name=NODE, now=AT)
    assert projector.statistics().pods_projected == 1
    assert projector.statistics().upserted == 4  # new cluster, its assignment, out_http, cap_http
    assert "new.shop.aether.internal" in after.of_type(CLUSTER_TYPE)


def test_a_removed_pod_takes_its_listeners_and_app_clusters_along() -> None:
    """Removing a pod removes exactly its resources, and its service when nothing else needs it."""
    projector = NodeProjector(node_name=NODE)
    projector.project(MESH, now=AT)
    state = _then(MESH, pod_removed("db-0", namespace="shop"))
    after = projector.project(state, now=AT)
    assert after == project_node(state, node_name=NODE, now=AT)
    assert not [name for name in after.of_type(LISTENER_TYPE) if "db-0" in name]
    assert "app_db-0.shop_8080" not in after.of_type(CLUSTER_TYPE)
    assert "db.shop.aether.internal" in after.of_type(CLUSTER_TYPE)  # web-1 still calls it
    assert sorted(after.of_type(SECRET_TYPE)) == ["caller:fallback", f"caller:{WEB_ID}", BUNDLE, WEB_ID]


def test_a_projector_follows_time_and_mesh_changes_like_a_fresh_projection() -> None:
    """TTL expiry, a new mesh domain, and back: the projector agrees with `project_node` at every step."""
    projector = NodeProjector(node_name=NODE)
    state = MESH
    steps = [
        (state, AT),
        (state, AT + 601 * SECOND),
        (_then(state, mesh_config_updated(make_mesh_config(mesh_domain="mesh.local", generation=2))), AT),
        (_then(state, on_demand_cluster_requested("db.shop.aether.internal:9999")), AT),
    ]
    for step_state, now in steps:
        assert projector.project(step_state, now=now) == project_node(step_state, node_name=NODE, now=now)
        assert projector.project(step_state, now=now).consistent() == ()


def test_the_projector_reports_the_dependency_set_of_its_last_projection() -> None:
    """What the agent's registrar watch filters on: the services the node's snapshot was projected for, sorted."""
    projector = NodeProjector(node_name=NODE)
    assert projector.dependencies == ()
    projector.project(MESH, now=AT)
    assert projector.dependencies == ("default/web", "shop/api", "shop/cache", "shop/db")


def test_a_set_of_hundreds_changed_service_by_service_projects_as_it_does_whole() -> None:
    """Hundreds of declared services (the route tables in several groups): pods declaring more services, others,
    fewer, then leaving; after each, the projector's snapshot (route tables and their digests included) equals the
    whole projection, and each step re-projects only the services that joined."""
    names = [f"shop/s{index:03}" for index in range(300)]

    def client(name: str, upstreams: list[str], ip: str) -> Any:
        return make_pod(
            name,
            namespace="shop",
            service_account=name,
            annotations={"config.aether.io/upstreams": ",".join(upstreams)},
            ips=(ip,),
        )

    steps = [
        (pod_added(client("a", names[::2], "10.9.0.1")), 151),
        (pod_added(client("b", names[1::3], "10.9.0.2")), 51),  # 100 declared, half of them new
        (pod_updated(client("b", names[1:9], "10.9.0.2")), 2),  # s003 and s005 are new; 66 left
        (pod_removed("a", namespace="shop"), 0),  # 146 left
        (pod_added(client("c", names[250:], "10.9.0.3")), 51),
    ]
    projector = NodeProjector(node_name=NODE)
    state = MESH
    projector.project(state, now=AT)
    for event, joined in steps:
        state = _then(state, event)
        assert projector.project(state, now=AT) == project_node(state, node_name=NODE, now=AT)
        assert projector.statistics().services_projected == joined
