"""The CNI's "listeners ACKed" verdict: a pod's listeners are in force once the proxy ACKed a version holding all
of them, refused when it NACKed that version, and awaited otherwise."""

from __future__ import annotations

import attrs
import pytest

from aether.core.events.pods import Pod
from aether.core.listener_acks import (
    ACKED,
    WAITING,
    ListenersStatus,
    ListenersVerdict,
    awaited_listener_names,
    listeners_verdict,
)
from aether.core.project.node import project_node
from aether.core.snapshot import LISTENER_TYPE, Snapshot
from aether.core.state.feedback import XdsFeedback
from aether.testing import fold_events, make_pod, pod_added

NODE = "node-a"
POD = make_pod("web-1", node_name=NODE)
CAPTURED = attrs.evolve(POD, netns="/run/netns/web-1")


def _snapshot(*pods: Pod) -> Snapshot:
    return project_node(fold_events(*(pod_added(pod) for pod in pods)), node_name=NODE, now=0)


def _feedback(*, acked: str = "", nacked: str = "", error: str = "") -> XdsFeedback:
    return XdsFeedback(
        node_id=NODE, type_url=LISTENER_TYPE, acked_version=acked, nacked_version=nacked, error_message=error
    )


def test_a_pod_awaits_its_outbound_and_inbound_listeners_and_its_capture_once_it_has_a_netns() -> None:
    """Without a netns: outbound and inbound; with one: capture too."""
    assert awaited_listener_names(POD) == {"outbound_http_web-1.default", "inbound_web-1.default"}
    assert awaited_listener_names(CAPTURED) == {
        "outbound_http_web-1.default",
        "inbound_web-1.default",
        "capture_web-1.default",
    }


def test_the_listeners_are_acked_when_the_proxy_acked_the_version_holding_them() -> None:
    """The snapshot holds them and the proxy's ACKed LDS version is the snapshot's."""
    snapshot = _snapshot(POD)
    version = snapshot.version(LISTENER_TYPE)
    assert listeners_verdict(POD, snapshot=snapshot, feedback=_feedback(acked=version)) == ACKED


@pytest.mark.parametrize(
    ("error", "expected"),
    [("bind: no such netns", "bind: no such netns"), ("", "NACK without a message")],
    ids=["with its message", "without one"],
)
def test_a_nack_of_the_version_holding_them_carries_the_proxys_error(error: str, expected: str) -> None:
    """The proxy rejected the version: NACKED, with its message (or a placeholder: never empty)."""
    snapshot = _snapshot(POD)
    feedback = _feedback(acked="older", nacked=snapshot.version(LISTENER_TYPE), error=error)
    assert listeners_verdict(POD, snapshot=snapshot, feedback=feedback) == ListenersVerdict(
        status=ListenersStatus.NACKED, error=expected
    )


def test_anything_else_waits() -> None:
    """No snapshot, no answer from the proxy, a snapshot without the pod's listeners, or an answer to another
    version: WAITING."""
    snapshot = _snapshot(POD)
    version = snapshot.version(LISTENER_TYPE)
    assert listeners_verdict(POD, snapshot=None, feedback=_feedback(acked=version)) == WAITING
    assert listeners_verdict(POD, snapshot=snapshot, feedback=None) == WAITING
    assert listeners_verdict(POD, snapshot=snapshot, feedback=_feedback(acked="older")) == WAITING
    assert listeners_verdict(POD, snapshot=snapshot, feedback=_feedback(nacked="older")) == WAITING
    other = make_pod("web-2", node_name=NODE)
    assert listeners_verdict(other, snapshot=snapshot, feedback=_feedback(acked=version)) == WAITING
    # A captured pod waits for its capture listener too, which a snapshot of it without its netns lacks.
    assert listeners_verdict(CAPTURED, snapshot=snapshot, feedback=_feedback(acked=version)) == WAITING
