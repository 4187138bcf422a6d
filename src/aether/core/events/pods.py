"""Pod events: what the CNI server and the Kubernetes pod watch observe about pods on this node, and how the node's
pods join the mesh (`NodeCaptureConfigured`)."""

from __future__ import annotations

import attrs

from aether.core.events.base import Event
from aether.core.values import EMPTY_STR_MAP, StrMap, freeze_str_map, freeze_strs


@attrs.frozen(kw_only=True)
class Pod:
    """A pod as observed: identity, placement and the metadata the mesh reads."""

    namespace: str
    name: str
    uid: str = ""
    node_name: str = ""
    service_account: str = "default"
    labels: StrMap = attrs.field(default=EMPTY_STR_MAP, converter=freeze_str_map)
    annotations: StrMap = attrs.field(default=EMPTY_STR_MAP, converter=freeze_str_map)
    ips: tuple[str, ...] = attrs.field(default=(), converter=freeze_strs)
    netns: str = ""
    """Path of the pod's network namespace; empty when the pod shares the node's (local mode)."""
    container_id: str = ""

    @property
    def key(self) -> str:
        """`<namespace>/<name>`."""
        return f"{self.namespace}/{self.name}"


@attrs.frozen(kw_only=True)
class PodAdded(Event):
    """A pod was added on this node (CNI ADD, or first seen by the pod watch). Upserts the pod."""

    pod: Pod

    @property
    def subject(self) -> str:
        return f"pod/{self.pod.key}"


@attrs.frozen(kw_only=True)
class PodUpdated(Event):
    """A known pod changed (labels, annotations, IPs). Upserts the pod: an unknown pod is added."""

    pod: Pod

    @property
    def subject(self) -> str:
        return f"pod/{self.pod.key}"


@attrs.frozen(kw_only=True)
class PodRemoved(Event):
    """A pod left this node (CNI DEL, or deleted in the API). With a `uid`, only that incarnation is removed."""

    namespace: str
    name: str
    uid: str = ""

    @property
    def subject(self) -> str:
        return f"pod/{self.namespace}/{self.name}"


@attrs.frozen(kw_only=True)
class NodeCaptureConfigured(Event):
    """The agent of `node_name` started with its CNI service (`captured`) or without it.

    Captured: the node's pods join the mesh through CNI ADD, each in its own network namespace, which the ADD
    reports; their listeners bind only there, so a pod known before its ADD (from the pod watch or a manifest)
    gets no listeners and no registration until the ADD supplies its namespace. Not captured (the default of a
    node no event names): a pod without a namespace binds on its own IP (local mode).

    The agent appends it at start-up when its log's state says otherwise, before any source runs.
    """

    node_name: str
    captured: bool

    @property
    def subject(self) -> str:
        return f"node/{self.node_name}"
