"""The node's pods as the Kubernetes API has them: the labels and service account the CNI runtime cannot pass.

`PodDirectory.lookup` is a `PodLookup` for the agent's CNI service. It is fed by a reflector over the pods
scheduled on this node (`spec.nodeName`), all of them: whether a pod is managed is the core's decision, made from
the labels this provides. Until its first list, and for a pod it has not seen, it raises `PodNotKnown`, so a CNI
ADD that outruns the watch is retried by the runtime instead of starting the pod outside the mesh.
"""

from __future__ import annotations

import logging

import attrs
import trio

from aether.cni.server import PodMetadata, PodNotKnown
from aether.core.events.pods import PodAdded
from aether.kube.api import KubeClient
from aether.kube.convert import ObjectError, object_events, object_meta
from aether.kube.resources import PODS, JsonObject
from aether.kube.watch import Deleted, Synced, Update, Upserted, WatchQuery, serve_reflector

__all__ = ["PodDirectory", "PodDirectoryStatistics", "node_pods_query", "serve_pod_directory"]

LOG = logging.getLogger("aether.cni.pods")


def node_pods_query(node_name: str) -> WatchQuery:
    """Every pod scheduled on `node_name` (the API server filters on `spec.nodeName`)."""
    return WatchQuery(resource=PODS, field_selector=f"spec.nodeName={node_name}")


@attrs.frozen(kw_only=True)
class PodDirectoryStatistics:
    """What the directory holds."""

    synced: bool
    """True once the first list arrived."""
    pods: int
    rejected: int
    """Pod objects that could not be read (each logged, and left out)."""


class PodDirectory:
    """The node's pods by `(namespace, name)`; one task (`serve_pod_directory`) applies the watch's updates."""

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str], PodMetadata] = {}
        self._synced = False
        self._rejected = 0

    def statistics(self) -> PodDirectoryStatistics:
        """Return what the directory holds."""
        return PodDirectoryStatistics(synced=self._synced, pods=len(self._pods), rejected=self._rejected)

    def lookup(self, namespace: str, name: str) -> PodMetadata:
        """Return the pod's metadata.

        Raises:
            PodNotKnown: the first list has not arrived, or the pod is not in it nor in any change since.
        """
        if not self._synced:
            raise PodNotKnown(
                namespace, name, reason="the agent's pod watch has not listed the node's pods yet"
            )
        known = self._pods.get((namespace, name))
        if known is None:
            raise PodNotKnown(namespace, name, reason="the agent's pod watch has not seen it")
        return known

    def apply(self, update: Update) -> None:
        """Fold one reflector update (interruptions keep what is known: a stale label beats no answer)."""
        match update:
            case Synced(objects=objects):
                self._pods = {}
                for obj in objects:
                    self._upsert(obj)
                self._synced = True
            case Upserted(object=obj):
                self._upsert(obj)
            case Deleted(object=obj):
                try:
                    meta = object_meta(obj)
                except ObjectError:
                    return
                self._pods.pop((meta.namespace, meta.name), None)
            case _:
                pass

    def _upsert(self, obj: JsonObject) -> None:
        try:
            events = object_events(obj, source="kubernetes", observed_at=0)
        except ObjectError as exc:
            self._rejected += 1
            LOG.warning("pod object skipped: %s", exc)
            return
        for event in events:
            if isinstance(event, PodAdded):
                pod = event.pod
                self._pods[(pod.namespace, pod.name)] = PodMetadata(
                    uid=pod.uid,
                    service_account=pod.service_account,
                    labels=pod.labels,
                    annotations=pod.annotations,
                )


async def serve_pod_directory(
    client: KubeClient,
    *,
    node_name: str,
    task_status: trio.TaskStatus[PodDirectory] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep a `PodDirectory` of `node_name`'s pods until cancelled; `task_status` gets it at once (not yet synced).

    Error handling: the reflector retries a lost API server with backoff; meanwhile the directory answers from what
    it last knew (see `aether.kube.watch.Reflector.run`).
    """
    directory = PodDirectory()
    send, receive = trio.open_memory_channel[Update](0)
    async with trio.open_nursery() as nursery, receive:
        nursery.start_soon(serve_reflector, client, node_pods_query(node_name), send)
        task_status.started(directory)
        async for update in receive:
            directory.apply(update)
