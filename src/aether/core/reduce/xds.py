"""Reducers of xDS feedback: ACKs, NACKs and on-demand cluster requests."""

from __future__ import annotations

import attrs

from aether.core.events.xds import OnDemandClusterRequested, ResourceAcked, ResourceNacked
from aether.core.mesh_names import parse_cluster_name
from aether.core.reduce.common import applied, rejected
from aether.core.state.diagnostics import RejectionReason
from aether.core.state.feedback import OnDemandRequest, XdsFeedback
from aether.core.state.state import State


def resource_acked(state: State, event: ResourceAcked, seq: int) -> State:
    """Record the accepted version; a NACK in force for that type is resolved."""
    key = (event.node_id, event.type_url)
    feedback = XdsFeedback(node_id=event.node_id, type_url=event.type_url, acked_version=event.version)
    streams = state.feedback.streams.set(key, feedback)
    return applied(state, event, seq, feedback=attrs.evolve(state.feedback, streams=streams))


def resource_nacked(state: State, event: ResourceNacked, seq: int) -> State:
    """Record the rejected version and Envoy's error; the last accepted version stays in force."""
    key = (event.node_id, event.type_url)
    known = state.feedback.streams.get(key)
    feedback = XdsFeedback(
        node_id=event.node_id,
        type_url=event.type_url,
        acked_version=known.acked_version if known else "",
        nacked_version=event.version,
        error_message=event.error_message,
        error_code=event.error_code,
    )
    streams = state.feedback.streams.set(key, feedback)
    return applied(state, event, seq, feedback=attrs.evolve(state.feedback, streams=streams))


def _cluster_problem(name: str, mesh_domain: str) -> str | None:
    """Check a mesh cluster name: `[tcp:|udp:|quic:<caller>@]<sa>.<ns>.<meshDomain>[:<port>]`."""
    if parse_cluster_name(name, mesh_domain=mesh_domain) is not None:
        return None
    return (
        f"cluster {name!r} is not a mesh service"
        f" ('[tcp:|udp:|quic:<sa>.<ns>@]<sa>.<ns>.{mesh_domain}[:port]')"
    )


def on_demand_cluster_requested(state: State, event: OnDemandClusterRequested, seq: int) -> State:
    """Record the request time (the latest wins, so redelivery changes nothing); non-mesh names are rejected."""
    problem = _cluster_problem(event.cluster_name, state.kube.mesh_config.mesh_domain)
    if problem is not None:
        return rejected(state, event, seq, reason=RejectionReason.NOT_A_MESH_SERVICE, message=problem)
    key = (event.node_id, event.cluster_name)
    known = state.feedback.on_demand.get(key)
    last = max(event.observed_at, known.last_requested_at) if known else event.observed_at
    request = OnDemandRequest(node_id=event.node_id, cluster_name=event.cluster_name, last_requested_at=last)
    on_demand = state.feedback.on_demand.set(key, request)
    return applied(state, event, seq, feedback=attrs.evolve(state.feedback, on_demand=on_demand))
