"""Tests of `aether.core.reduce.xds`: ACKs, NACKs and on-demand cluster requests."""

from __future__ import annotations

import immutables
import pytest

from aether.core.state import (
    Diagnostics,
    FeedbackState,
    OnDemandRequest,
    Rejection,
    RejectionReason,
    State,
    XdsFeedback,
)
from aether.testing import (
    AT,
    CLUSTER_TYPE_URL,
    domain_of,
    fold_events,
    make_mesh_config,
    mesh_config_updated,
    on_demand_cluster_requested,
    resource_acked,
    resource_nacked,
)

LISTENER_TYPE_URL = "type.googleapis.com/envoy.config.listener.v3.Listener"


def _streams(*items: XdsFeedback) -> FeedbackState:
    return FeedbackState(streams=immutables.Map(((item.node_id, item.type_url), item) for item in items))


def test_an_ack_records_the_accepted_version() -> None:
    """An ACK records the version a node accepted for a type."""
    state = fold_events(resource_acked("node-a", version="v1"))
    assert state == State(
        seq=1, feedback=_streams(XdsFeedback(node_id="node-a", type_url=CLUSTER_TYPE_URL, acked_version="v1"))
    )


def test_a_nack_keeps_the_accepted_version_in_force() -> None:
    """A NACK after an ACK records the rejected version and the error; the accepted version stays."""
    state = fold_events(
        resource_acked(version="v1"), resource_nacked(version="v2", error_code=3, error_message="bad cluster")
    )
    expected = XdsFeedback(
        node_id="node-a",
        type_url=CLUSTER_TYPE_URL,
        acked_version="v1",
        nacked_version="v2",
        error_message="bad cluster",
        error_code=3,
    )
    assert state == State(seq=2, feedback=_streams(expected))


def test_a_nack_before_any_ack_has_no_accepted_version() -> None:
    """A first NACK leaves the accepted version empty."""
    state = fold_events(resource_nacked(version="v1", error_message="bad"))
    assert state.feedback == _streams(
        XdsFeedback(
            node_id="node-a",
            type_url=CLUSTER_TYPE_URL,
            nacked_version="v1",
            error_message="bad",
            error_code=3,
        )
    )


def test_an_ack_after_a_nack_resolves_it() -> None:
    """A later ACK clears the NACK in force."""
    state = fold_events(
        resource_acked(version="v1"), resource_nacked(version="v2"), resource_acked(version="v3")
    )
    assert state.feedback == _streams(
        XdsFeedback(node_id="node-a", type_url=CLUSTER_TYPE_URL, acked_version="v3")
    )


def test_feedback_is_kept_per_node_and_type() -> None:
    """Each (node, type) pair has its own feedback."""
    state = fold_events(
        resource_acked("node-a", version="v1"),
        resource_acked("node-b", version="v7"),
        resource_nacked("node-a", type_url=LISTENER_TYPE_URL, version="v2", error_message="bad listener"),
    )
    assert state.feedback == _streams(
        XdsFeedback(node_id="node-a", type_url=CLUSTER_TYPE_URL, acked_version="v1"),
        XdsFeedback(node_id="node-b", type_url=CLUSTER_TYPE_URL, acked_version="v7"),
        XdsFeedback(
            node_id="node-a",
            type_url=LISTENER_TYPE_URL,
            nacked_version="v2",
            error_message="bad listener",
            error_code=3,
        ),
    )


@pytest.mark.parametrize(
    "cluster_name",
    [
        "web.default.aether.internal",
        "web.default.aether.internal:8080",
        "tcp:db.shop.aether.internal:5432",
        "udp:dns.kube.aether.internal:53",
    ],
)
def test_an_on_demand_request_for_a_mesh_service_is_recorded(cluster_name: str) -> None:
    """A request for `<sa>.<ns>.<meshDomain>[:port]` (optionally `tcp:` or `udp:`) is recorded with its time."""
    state = fold_events(on_demand_cluster_requested(cluster_name, node_id="node-a", at=AT + 5))
    request = OnDemandRequest(node_id="node-a", cluster_name=cluster_name, last_requested_at=AT + 5)
    assert state == State(
        seq=1, feedback=FeedbackState(on_demand=immutables.Map({("node-a", cluster_name): request}))
    )


def test_the_latest_request_time_wins_whatever_the_order() -> None:
    """A request observed earlier than the one recorded does not move the time back."""
    state = fold_events(on_demand_cluster_requested(at=AT + 10), on_demand_cluster_requested(at=AT + 3))
    assert (
        state.feedback.on_demand[("node-a", "web.default.aether.internal:8080")].last_requested_at == AT + 10
    )
    later = fold_events(on_demand_cluster_requested(at=AT + 20), state=state)
    assert (
        later.feedback.on_demand[("node-a", "web.default.aether.internal:8080")].last_requested_at == AT + 20
    )


@pytest.mark.parametrize(
    "cluster_name",
    [
        "example.com",
        "web",
        "web.default",
        "web.default.mesh.local",
        ".default.aether.internal",
        "web..aether.internal",
        "A B.default.aether.internal",
        "web.default.aether.internal:notaport",
        "web.default.aether.internal:70000",
    ],
)
def test_a_request_for_a_name_outside_the_mesh_is_rejected(cluster_name: str) -> None:
    """A cluster name that is not `<sa>.<ns>.<meshDomain>` is rejected; nothing is recorded."""
    state = fold_events(on_demand_cluster_requested(cluster_name))
    assert domain_of(state) == State()
    subject = f"cluster/{cluster_name}"
    rejection = Rejection(
        subject=subject,
        reason=RejectionReason.NOT_A_MESH_SERVICE,
        message=f"cluster {cluster_name!r} is not a mesh service ('[tcp:|udp:|quic:<sa>.<ns>@]<sa>.<ns>.aether.internal[:port]')",
        seq=1,
    )
    assert state.diagnostics == Diagnostics(rejections=immutables.Map({subject: rejection}), rejected_total=1)


def test_the_mesh_domain_in_force_decides_and_a_later_request_lifts_the_rejection() -> None:
    """A name of another mesh domain is rejected until the MeshConfig adopts that domain."""
    name = "web.default.mesh.local"
    state = fold_events(
        on_demand_cluster_requested(name, at=AT),
        mesh_config_updated(make_mesh_config(mesh_domain="mesh.local")),
        on_demand_cluster_requested(name, at=AT + 1),
    )
    request = OnDemandRequest(node_id="node-a", cluster_name=name, last_requested_at=AT + 1)
    assert state.feedback == FeedbackState(on_demand=immutables.Map({("node-a", name): request}))
    assert state.diagnostics == Diagnostics(rejected_total=1)
