"""Tests of `aether.core.events.xds`: the subjects of xDS feedback events."""

from __future__ import annotations

from aether.testing import CLUSTER_TYPE_URL, on_demand_cluster_requested, resource_acked, resource_nacked


def test_feedback_events_are_about_the_node_and_type_and_requests_about_the_cluster() -> None:
    """ACKs and NACKs are about `xds/<node>/<type url>`; on-demand requests about `cluster/<name>`."""
    assert resource_acked("node-a").subject == f"xds/node-a/{CLUSTER_TYPE_URL}"
    assert resource_nacked("node-a").subject == f"xds/node-a/{CLUSTER_TYPE_URL}"
    assert (
        on_demand_cluster_requested("web.default.aether.internal").subject
        == "cluster/web.default.aether.internal"
    )
