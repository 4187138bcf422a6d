"""The pod metadata the agent's CNI service decides with: the node's pods as its own log holds them.

The CNI runtime knows a pod's name, namespace, uid, sandbox and IPs, but not its labels or service account. The
agent's log does, for every pod a Kubernetes watch (or a manifest directory) reported on this node: those pods are
folded into `state.pods` before their sandbox exists. So the lookup reads the journal's latest state; a pod the
log does not know yet is None, and the CNI service then goes by what the plugin sent.
"""

from __future__ import annotations

from aether.cni.server import PodMetadata, PodNotKnown
from aether.core.state import State

__all__ = ["StatePodLookup"]


class StatePodLookup:
    """A `PodLookup` over the journal's state: subscribe `follow` to the journal, pass the object as the lookup.

    Args:
        authoritative: The log is fed by a watch of this node's pods, so a pod it lacks is one the watch has not
            delivered yet: `PodNotKnown` (the runtime retries) rather than None (the plugin's metadata, which has
            no labels, would start the pod outside the mesh).
    """

    def __init__(self, *, authoritative: bool = False) -> None:
        self._state: State | None = None
        self._authoritative = authoritative

    def follow(self, state: State, now: int) -> None:
        """Take the journal's newest state (a journal subscriber: `now` is unused)."""
        self._state = state

    def __call__(self, namespace: str, name: str) -> PodMetadata | None:
        record = None if self._state is None else self._state.pods.get(f"{namespace}/{name}")
        if record is None:
            if self._authoritative:
                raise PodNotKnown(namespace, name, reason="the agent's pod watch has not delivered it yet")
            return None
        pod = record.pod
        return PodMetadata(
            uid=pod.uid, service_account=pod.service_account, labels=pod.labels, annotations=pod.annotations
        )
