"""The Kubernetes backend: a read-only registry whose endpoints are the cluster's meshed Pods, placed by their Nodes.

Two reflectors (the Pods labelled `aether.io/managed=true`, and the Nodes) feed one owner task, which keeps each
pod's endpoint (`aether.kube.endpoints.pod_endpoint_of`) and sends the registrar what changed. Registrations are
refused: in a cluster, the API server is the registry.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable

import attrs
import trio

from aether.core.events.registry import Endpoint, EndpointKey
from aether.kube.api import DEFAULT_PAGE_SIZE, KubeClient
from aether.kube.endpoints import MANAGED_SELECTOR, pod_endpoint_of
from aether.kube.errors import KubeError
from aether.kube.resources import NODES, PODS, JsonObject, object_key
from aether.kube.watch import (
    Deleted,
    Reflector,
    Resumed,
    Synced,
    Update,
    Upserted,
    WatchInterrupted,
    WatchQuery,
    serve_reflectors,
)
from aether.registrar.backends.base import BackendFeed, StoreAvailability
from aether.registrar.errors import StoreError
from aether.registrar.snapshot import (
    Change,
    EndpointsReplaced,
    EndpointsUpdated,
    Mutation,
    RegistrySnapshot,
    snapshot_of,
)
from aether.rpc.backoff import DEFAULT_BACKOFF, Backoff

__all__ = ["KubernetesBackend", "KubernetesBackendStatistics"]

LOG = logging.getLogger("aether.registrar.kubernetes")

POD_QUERY = WatchQuery(resource=PODS, label_selector=MANAGED_SELECTOR)
NODE_QUERY = WatchQuery(resource=NODES)
# Invariant: these read exactly `aether.kube.access.REGISTRAR_KUBERNETES_ACCESS.watches` (its RBAC; a test checks).
_SOURCES = {POD_QUERY: "pods", NODE_QUERY: "nodes"}


@attrs.frozen(kw_only=True)
class KubernetesBackendStatistics:
    """Counters of a `KubernetesBackend`."""

    pods: int
    """Labelled pods known (with or without an endpoint)."""
    nodes: int
    endpoints: int
    """Pods that stand for an endpoint now."""
    interrupted: tuple[str, ...]
    """The watches (`pods`, `nodes`) that lost the API server and have not resumed."""


class KubernetesBackend:
    """The registry as the Kubernetes API shows it (read-only); see the module docstring.

    Args:
        client: The API client (in-cluster, kubeconfig or explicit URL).
        backoff: Waits between failed lists and watches.
        rng: The jitter's source (a seeded `random.Random` in tests).
        page_size: Objects per list page.

    Versions: the first snapshot takes the API's resourceVersion (an etcd revision, numeric in practice), so a
    restarted registrar starts past every version it served before; later updates let the registrar number them.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        backoff: Backoff = DEFAULT_BACKOFF,
        rng: random.Random | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        self._client = client
        self._backoff = backoff
        self._rng = rng or random.Random()
        self._page_size = page_size
        self._pods: dict[str, JsonObject] = {}
        self._nodes: dict[str, JsonObject] = {}
        self._endpoints: dict[str, Endpoint] = {}
        """By pod key: the pods that stand for an endpoint."""
        self._versions = {"pods": "", "nodes": ""}
        self._interrupted: set[str] = set()
        self._reported: dict[str, str] = {}
        """The problems last logged per pod, so each is logged once, not at every status change."""

    @property
    def description(self) -> str:
        """`kubernetes <server>`."""
        return f"kubernetes {self._client.config.server}"

    @property
    def writable(self) -> bool:
        """False: endpoints come from the cluster's pods."""
        return False

    def statistics(self) -> KubernetesBackendStatistics:
        """Return the backend's counters."""
        return KubernetesBackendStatistics(
            pods=len(self._pods),
            nodes=len(self._nodes),
            endpoints=len(self._endpoints),
            interrupted=tuple(sorted(self._interrupted)),
        )

    async def load(self) -> RegistrySnapshot:
        """List the labelled pods and the nodes (retrying until the API answers); return their endpoints."""
        failures = 0
        while True:
            try:
                nodes = await self._reflector(NODE_QUERY).list()
                pods = await self._reflector(POD_QUERY).list()
                break
            except KubeError as error:
                failures += 1
                delay = self._backoff.delay(failures, rng=self._rng)
                LOG.warning("%s: first list failed: %s; retrying in %.2f s", self.description, error, delay)
                await trio.sleep(delay)
        self._versions = {"pods": pods.resource_version, "nodes": nodes.resource_version}
        self._nodes = {object_key(obj): obj for obj in nodes.items}
        self._pods = {object_key(obj): obj for obj in pods.items}
        self._endpoints = {}
        for key in sorted(self._pods):
            self._derive(key)
        version = max((int(v) for v in self._versions.values() if v.isascii() and v.isdigit()), default=0)
        return snapshot_of(self._endpoints.values(), version=version)

    async def apply(
        self, mutation: Mutation, *, snapshot: RegistrySnapshot, changes: tuple[Change, ...]
    ) -> int | None:
        """Never called (the backend is not `writable`); refuses, should a caller forget."""
        del mutation, snapshot, changes
        await trio.lowlevel.checkpoint()
        raise StoreError(
            self.description, reason="read-only: endpoints come from the cluster's labelled pods"
        )

    async def serve_updates(
        self,
        updates: trio.abc.SendChannel[BackendFeed],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Watch pods and nodes from where `load` listed them; send the endpoint changes until cancelled."""
        send, receive = trio.open_memory_channel[tuple[WatchQuery, Update]](0)
        reflectors = [
            self._reflector(query, resource_version=self._versions[_SOURCES[query]]) for query in _SOURCES
        ]
        async with trio.open_nursery() as nursery, receive:
            await nursery.start(serve_reflectors, reflectors, send)
            task_status.started()
            async for query, update in receive:
                for feed in self._fold(_SOURCES[query], update):
                    await updates.send(feed)

    def _reflector(self, query: WatchQuery, *, resource_version: str = "") -> Reflector:
        return Reflector(
            self._client,
            query,
            backoff=self._backoff,
            rng=self._rng,
            page_size=self._page_size,
            resource_version=resource_version,
        )

    def _fold(self, source: str, update: Update) -> list[BackendFeed]:
        """Apply one reflector update; return what to tell the registrar."""
        match update:
            case WatchInterrupted(reason=reason):
                was_available = not self._interrupted
                self._interrupted.add(source)
                return (
                    [StoreAvailability(available=False, reason=f"{source}: {reason}")]
                    if was_available
                    else []
                )
            case Resumed():
                self._interrupted.discard(source)
                return [] if self._interrupted else [StoreAvailability(available=True)]
            case Synced(objects=objects):
                table = self._pods if source == "pods" else self._nodes
                table.clear()
                table.update((object_key(obj), obj) for obj in objects)
                self._endpoints = {}
                for key in sorted(self._pods):
                    self._derive(key)
                return [EndpointsReplaced(endpoints=tuple(self._endpoints.values()))]
            case Upserted(object=obj) | Deleted(object=obj):
                key = object_key(obj)
                table = self._pods if source == "pods" else self._nodes
                if isinstance(update, Upserted):
                    table[key] = obj
                else:
                    table.pop(key, None)
                affected = [key] if source == "pods" else self._pods_on(key)
                return self._rederive(affected)
            case _:  # pragma: no cover - the type checker proves this unreachable
                raise AssertionError(f"reflector update {update!r}: unknown type (a bug)")

    def _pods_on(self, node: str) -> list[str]:
        return sorted(
            key for key, pod in self._pods.items() if (pod.get("spec") or {}).get("nodeName") == node
        )

    def _rederive(self, keys: Iterable[str]) -> list[BackendFeed]:
        before: dict[EndpointKey, Endpoint] = {}
        after: dict[EndpointKey, Endpoint] = {}
        for key in keys:
            if (old := self._endpoints.get(key)) is not None:
                before[old.key] = old
            if (new := self._derive(key)) is not None:
                after[new.key] = new
        removed = tuple(sorted(before.keys() - after.keys()))
        upserted = tuple(endpoint for k, endpoint in sorted(after.items()) if before.get(k) != endpoint)
        if not removed and not upserted:
            return []
        return [EndpointsUpdated(upserted=upserted, removed=removed)]

    def _derive(self, key: str) -> Endpoint | None:
        """Recompute the endpoint of pod `key` (gone when the pod is), remember it, and log new problems."""
        pod = self._pods.get(key)
        if pod is None:
            self._endpoints.pop(key, None)
            self._reported.pop(key, None)
            return None
        node_name = str((pod.get("spec") or {}).get("nodeName") or "")
        derived = pod_endpoint_of(pod, node=self._nodes.get(node_name))
        problems = "; ".join(derived.problems)
        if problems and self._reported.get(key) != problems:
            LOG.warning("%s", problems)
        self._reported[key] = problems
        if derived.endpoint is None:
            self._endpoints.pop(key, None)
        else:
            self._endpoints[key] = derived.endpoint
        return derived.endpoint
