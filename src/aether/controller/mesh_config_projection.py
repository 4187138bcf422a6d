"""The MeshConfig projection: every namespace's MeshConfig, merged over aether-system's fallback, written into its
ConfigMap `aether-mesh-config` (`aether.kube.mesh_config`), by the leader only.

One owner task holds the MeshConfigs and our ConfigMaps as the reflectors last saw them (STYLE C9) and, after each
batch of changes (and every `resync`) while leading, writes each ConfigMap whose content differs: created when
missing, replaced (conditional on its resourceVersion) when changed. A 409 or any refusal is logged and tried again
at the next pass. A MeshConfig that breaks the CRD's rules is logged once, naming the field and the rule, and its
ConfigMap keeps the last good content; an invalid fallback holds every namespace at its last good content. A deleted
MeshConfig leaves its ConfigMap as it was (the agent and the edge keep the config in force).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import attrs
import trio

from aether.core.events import MeshConfig
from aether.kube.api import KubeClient
from aether.kube.errors import KubeError
from aether.kube.mesh_config import (
    CONFIG_MAPS,
    FALLBACK_NAMESPACE,
    MESH_CONFIG_KEY,
    MESH_CONFIG_MAP,
    MESH_CONFIGS,
    PROJECTION_LABELS,
    MeshConfigInvalid,
    effective_spec,
    mesh_config_from_text,
    projected_config_map,
    spec_of,
)
from aether.kube.resources import JsonObject
from aether.kube.watch import Deleted, Reflector, Synced, Update, Upserted, WatchQuery, serve_reflectors

__all__ = [
    "MESH_CONFIG_QUERIES",
    "MeshConfigProjection",
    "MeshConfigProjectionStatistics",
    "serve_mesh_config_projection",
]

LOG = logging.getLogger("aether.controller.meshconfig")

MESH_CONFIG_QUERIES = (
    WatchQuery(resource=MESH_CONFIGS),
    WatchQuery(
        resource=CONFIG_MAPS,
        label_selector=",".join(f"{key}={value}" for key, value in sorted(PROJECTION_LABELS.items())),
    ),
)
"""Every MeshConfig, and the ConfigMaps the projection wrote (by their labels)."""
DEFAULT_PROJECTION_RESYNC = 10.0
"""Seconds between passes without changes: a new leader projects within this, a refused write is tried again."""


@attrs.frozen(kw_only=True)
class MeshConfigProjectionStatistics:
    """Counters of the projection."""

    rounds: int
    """Times the owner loop woke (a change or a resync), leading or not."""
    passes: int
    """Rounds that reconciled (synced and leading)."""
    writes: int
    """ConfigMaps created or replaced."""
    failures: int
    """Writes refused (a conflict included) or lost with the API."""
    invalid: int
    """MeshConfigs refused by the CRD's rules now."""


class MeshConfigProjection:
    """The owner task's state: MeshConfigs and projected ConfigMaps by namespace."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._configs: dict[str, JsonObject] = {}
        self._maps: dict[str, JsonObject] = {}
        self._unsynced = set(MESH_CONFIG_QUERIES)
        self._problems: dict[str, str] = {}
        self._counts = {"rounds": 0, "passes": 0, "writes": 0, "failures": 0}

    def statistics(self) -> MeshConfigProjectionStatistics:
        """Return the counters."""
        return MeshConfigProjectionStatistics(invalid=len(self._problems), **self._counts)

    @property
    def synced(self) -> bool:
        """Both collections have listed once (nothing is written before: it would overwrite what it cannot see)."""
        return not self._unsynced

    def mesh_config(self) -> MeshConfig | None:
        """The MeshConfig of the ConfigMap projected into aether-system, the one the agents and the edge read (so
        the trust domain they check SVIDs against and the mesh domain they serve), or None while there is none or
        it does not parse."""
        stored = self._maps.get(FALLBACK_NAMESPACE)
        text = None if stored is None else (stored.get("data") or {}).get(MESH_CONFIG_KEY)
        return None if not isinstance(text, str) else _mesh_config_of_text(text)

    def fold(self, query: WatchQuery, update: Update) -> None:
        """Take one reflector update."""
        held = self._configs if query.resource == MESH_CONFIGS else self._maps
        match update:
            case Synced(objects=listed):
                self._unsynced.discard(query)
                held.clear()
                for obj in listed:
                    self._hold(held, obj)
            case Upserted(object=obj):
                self._hold(held, obj)
            case Deleted(object=obj):
                metadata = obj.get("metadata") or {}
                if held.get(str(metadata.get("namespace", ""))) is not None:
                    held.pop(str(metadata.get("namespace", "")))
            case _:
                return

    def _hold(self, held: dict[str, JsonObject], obj: JsonObject) -> None:
        metadata = obj.get("metadata") or {}
        if held is self._maps and metadata.get("name") != MESH_CONFIG_MAP:
            return
        held[str(metadata.get("namespace", ""))] = obj

    def _spec(self, namespace: str) -> dict[str, Any] | None:
        try:
            spec = spec_of(self._configs[namespace])
        except MeshConfigInvalid as error:
            if self._problems.get(namespace) != str(error):  # said once, not at every pass
                LOG.warning("%s; its ConfigMap keeps the last good content", error)
            self._problems[namespace] = str(error)
            return None
        self._problems.pop(namespace, None)
        return spec

    async def reconcile(self) -> None:
        """Write every ConfigMap whose projected content differs from what is stored."""
        self._counts["passes"] += 1
        fallback: dict[str, Any] | None = None
        if FALLBACK_NAMESPACE in self._configs:
            fallback = self._spec(FALLBACK_NAMESPACE)
            if fallback is None:
                return
        for namespace in sorted(self._configs):
            own = fallback if namespace == FALLBACK_NAMESPACE else self._spec(namespace)
            if own is None:
                continue
            wanted = projected_config_map(
                namespace, own if namespace == FALLBACK_NAMESPACE else effective_spec(fallback, own)
            )
            await self._write(namespace, wanted)

    async def _write(self, namespace: str, wanted: JsonObject) -> None:
        stored = self._maps.get(namespace)
        if (
            stored is not None
            and (stored.get("data") or {}).get(MESH_CONFIG_KEY) == wanted["data"][MESH_CONFIG_KEY]
        ):
            return
        try:
            if stored is None:
                written = await self._client.create(CONFIG_MAPS, wanted, namespace=namespace)
            else:
                metadata = {
                    **stored["metadata"],
                    "labels": {**(stored["metadata"].get("labels") or {}), **PROJECTION_LABELS},
                }
                written = await self._client.replace(
                    CONFIG_MAPS, {**stored, "metadata": metadata, "data": wanted["data"]}
                )
        except KubeError as error:
            self._counts["failures"] += 1
            LOG.warning(
                "ConfigMap %s/%s not written (tried again later): %s", namespace, MESH_CONFIG_MAP, error
            )
            return
        self._counts["writes"] += 1
        self._maps[namespace] = written
        LOG.info("projected the MeshConfig of %s into ConfigMap %s", namespace, MESH_CONFIG_MAP)


@functools.lru_cache(maxsize=4)
def _mesh_config_of_text(text: str) -> MeshConfig | None:
    """A projected `mesh-config.yaml`, parsed once per content (asked at every pod review); None if it does not."""
    try:
        return mesh_config_from_text(text, where=f"ConfigMap {FALLBACK_NAMESPACE}/{MESH_CONFIG_MAP}")
    except MeshConfigInvalid:
        return None


async def serve_mesh_config_projection(
    client: KubeClient,
    *,
    leading: Callable[[], bool],
    resync: float = DEFAULT_PROJECTION_RESYNC,
    task_status: trio.TaskStatus[MeshConfigProjection] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Project the MeshConfigs until cancelled, writing only while `leading()` holds."""
    projection = MeshConfigProjection(client)
    send, receive = trio.open_memory_channel[tuple[WatchQuery, Update]](0)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            serve_reflectors, [Reflector(client, query) for query in MESH_CONFIG_QUERIES], send
        )
        task_status.started(projection)
        async with receive:
            while True:
                with trio.move_on_after(resync):
                    projection.fold(*await receive.receive())
                    while True:
                        try:
                            projection.fold(*receive.receive_nowait())
                        except trio.WouldBlock:
                            break
                projection._counts["rounds"] += 1
                if projection.synced and leading():
                    await projection.reconcile()
