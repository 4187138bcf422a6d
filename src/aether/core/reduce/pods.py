"""Reducers of pod events."""

from __future__ import annotations

import attrs

from aether.core.events.pods import NodeCaptureConfigured, Pod, PodAdded, PodRemoved, PodUpdated
from aether.core.reduce.admission import PodVerdict, admit_pod
from aether.core.reduce.annotations import parse_pod_config
from aether.core.reduce.common import applied, rejected
from aether.core.state.diagnostics import RejectionReason
from aether.core.state.pods import PodRecord
from aether.core.state.state import State


def _with_sandbox(pod: Pod, known: PodRecord | None) -> Pod:
    """Return `pod`, keeping the sandbox of the same incarnation already known when `pod` carries none.

    The network namespace and container id are observed by the CNI plugin only; a Kubernetes watch (or a manifest
    directory) never knows them. Without this, every update from the API would move the pod's listeners out of
    its namespace. A different uid is a new incarnation, whose sandbox comes with its own CNI ADD.
    """
    if pod.netns or known is None or not known.pod.netns:
        return pod
    if pod.uid and known.pod.uid and pod.uid != known.pod.uid:
        return pod
    return attrs.evolve(pod, netns=known.pod.netns, container_id=pod.container_id or known.pod.container_id)


def _upsert(state: State, event: PodAdded | PodUpdated, seq: int) -> State:
    pod: Pod = _with_sandbox(event.pod, state.pods.get(event.pod.key))
    admission = admit_pod(pod)
    match admission.verdict:
        case PodVerdict.INVALID:
            return rejected(state, event, seq, reason=RejectionReason.INVALID_POD, message=admission.message)
        case PodVerdict.NOT_MANAGED:
            # A pod that leaves the mesh (label removed) must stop being served.
            return _dropped(state, event, seq, reason=RejectionReason.NOT_MANAGED, message=admission.message)
        case PodVerdict.NO_ADDRESS:
            # Nothing can be bound or registered for it: it joins the mesh with its first update that carries an IP.
            return _dropped(state, event, seq, reason=RejectionReason.INVALID_POD, message=admission.message)
    config, problems = parse_pod_config(pod)
    state = applied(state, event, seq, pods=state.pods.set(pod.key, PodRecord(pod=pod, config=config)))
    if problems:
        message = f"pod {pod.key!r}: " + "; ".join(problems)
        return rejected(state, event, seq, reason=RejectionReason.INVALID_ANNOTATION, message=message)
    return state


def _dropped(
    state: State, event: PodAdded | PodUpdated, seq: int, *, reason: RejectionReason, message: str
) -> State:
    """Forget the event's pod (if known) and record why."""
    key = event.pod.key
    state = applied(state, event, seq, pods=state.pods.delete(key) if key in state.pods else state.pods)
    return rejected(state, event, seq, reason=reason, message=message)


def pod_added(state: State, event: PodAdded, seq: int) -> State:
    """Upsert the pod (an `Added` for a known pod is a replay or a re-ADD: it replaces)."""
    return _upsert(state, event, seq)


def pod_updated(state: State, event: PodUpdated, seq: int) -> State:
    """Upsert the pod (an update of an unknown pod adds it: the add was observed by another source)."""
    return _upsert(state, event, seq)


def pod_removed(state: State, event: PodRemoved, seq: int) -> State:
    """Remove the pod; an unknown pod, or another incarnation (uid), is a rejection."""
    key = f"{event.namespace}/{event.name}"
    record = state.pods.get(key)
    if record is None:
        message = f"pod {key!r} removed but not known on this node"
        return rejected(state, event, seq, reason=RejectionReason.UNKNOWN_POD, message=message)
    if event.uid and record.pod.uid and event.uid != record.pod.uid:
        message = f"pod {key!r} removed with uid {event.uid!r} but the known pod has uid {record.pod.uid!r}"
        return rejected(state, event, seq, reason=RejectionReason.STALE_POD, message=message)
    return applied(state, event, seq, pods=state.pods.delete(key))


def node_capture_configured(state: State, event: NodeCaptureConfigured, seq: int) -> State:
    """Record whether the node's pods are captured (an unchanged fact keeps the same set)."""
    nodes = state.captured_nodes
    if (event.node_name in nodes) != event.captured:
        nodes = nodes | {event.node_name} if event.captured else nodes - {event.node_name}
    return applied(state, event, seq, captured_nodes=nodes)
