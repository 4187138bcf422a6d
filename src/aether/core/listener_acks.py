"""Whether a node's proxy has taken a pod's listeners: the verdict the CNI server waits on before AddPod answers.

The pod's listeners are in force once the proxy ACKed a listener version that holds all of them; a NACK of that
version is the proxy refusing them. Anything else (no snapshot yet, a version without them, no answer yet) waits.
"""

from __future__ import annotations

import enum

import attrs

from aether.core.events.pods import Pod
from aether.core.project.names import capture_listener_name, inbound_listener_name, outbound_listener_name
from aether.core.snapshot import LISTENER_TYPE, Snapshot
from aether.core.state.feedback import XdsFeedback


class ListenersStatus(enum.Enum):
    """Where a pod's listeners are."""

    WAITING = "waiting"
    """Not yet in a version the proxy answered."""
    ACKED = "acked"
    """The proxy accepted a version holding them all."""
    NACKED = "nacked"
    """The proxy rejected the version holding them."""


@attrs.frozen(kw_only=True)
class ListenersVerdict:
    """Where a pod's listeners are, and the proxy's error when it rejected them."""

    status: ListenersStatus
    error: str = ""
    """The proxy's error message (NACKED only; never empty then)."""


WAITING = ListenersVerdict(status=ListenersStatus.WAITING)
ACKED = ListenersVerdict(status=ListenersStatus.ACKED)


def awaited_listener_names(pod: Pod) -> frozenset[str]:
    """The listeners a pod needs before it starts: outbound and inbound, and capture once it has a netns."""
    names = {outbound_listener_name(pod), inbound_listener_name(pod)}
    if pod.netns:
        names.add(capture_listener_name(pod))
    return frozenset(names)


def listeners_verdict(
    pod: Pod, *, snapshot: Snapshot | None, feedback: XdsFeedback | None
) -> ListenersVerdict:
    """Return where `pod`'s listeners are, given the node's published `snapshot` and its proxy's LDS `feedback`."""
    if snapshot is None or feedback is None:
        return WAITING
    held = snapshot.of_type(LISTENER_TYPE)
    if not all(name in held for name in awaited_listener_names(pod)):
        return WAITING
    version = snapshot.version(LISTENER_TYPE)
    if feedback.acked_version == version:
        return ACKED
    if feedback.nacked_version == version:
        return ListenersVerdict(
            status=ListenersStatus.NACKED, error=feedback.error_message or "NACK without a message"
        )
    return WAITING
