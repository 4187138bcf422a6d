"""The mesh-dns record file: the agent's sink that writes `<ns>/<svc>` → virtual IP from its state, atomically.

The file is mesh-dns's only input (DESIGN.md section 4), which is what keeps DNS up while the agent restarts:

    {"writtenAt": <unix seconds>, "generation": <n>, "records": {"<namespace>/<service>": "<IPv4>"}}

`generation` grows by one each time the records change, also across agent restarts (the writer continues from
the file it finds); the file is replaced by rename, so a reader sees the old file or the new one, never a mix.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
import trio

from aether.core.state import State
from aether.dns.errors import RecordsFileRejected
from aether.dns.records import parse_records
from aether.plane.journal import Journal
from aether.sync import LatestValue

__all__ = ["MeshRecordsStatistics", "MeshRecordsWriter", "mesh_dns_records", "serve_mesh_records"]


def mesh_dns_records(state: State) -> dict[str, str]:
    """Return the records of `state`: every Service with an IPv4 ClusterIP, keyed `<namespace>/<name>`, sorted.

    A Service's mesh name `<name>.<namespace>.<meshDomain>` resolves to its ClusterIP, a destination the pod's
    capture diverts to its proxy. Headless Services (`None`), Services without an address yet and IPv6-only
    ones have no record (mesh-dns answers A records only).
    """
    records: dict[str, str] = {}
    for service in state.kube.services.values():
        try:
            address = ipaddress.IPv4Address(service.cluster_ip)
        except ValueError:
            continue
        records[f"{service.meta.namespace}/{service.meta.name}"] = str(address)
    return dict(sorted(records.items()))


@attrs.frozen(kw_only=True)
class MeshRecordsStatistics:
    """What the writer has done."""

    generation: int
    """The generation of the file on disk."""
    records: int
    writes: int


class MeshRecordsWriter:
    """The handle `serve_mesh_records` starts with: its statistics, and a way to wait for a generation on disk."""

    def __init__(self, path: Path, *, clock: Callable[[], float]) -> None:
        self.path = path
        self._clock = clock
        self._generation = 0
        self._written: dict[str, str] | None = None
        self._latest: LatestValue[dict[str, str]] = LatestValue({})
        """The records of the journal's latest state."""
        self._wrote: LatestValue[int | None] = LatestValue(None)
        """The generation of the last file this writer wrote (None before the first)."""
        self._writes = 0

    def statistics(self) -> MeshRecordsStatistics:
        """Return what the writer has done."""
        return MeshRecordsStatistics(
            generation=self._generation, records=len(self._written or {}), writes=self._writes
        )

    async def wait_generation(self, generation: int) -> None:
        """Block until the file on disk has at least `generation`."""
        await self._wrote.wait_value(lambda wrote: wrote is not None and wrote >= generation)

    def _resume(self) -> None:
        """Continue from the file a previous agent left: its generation, and its records if they still hold."""
        try:
            parsed = parse_records(self.path.read_bytes())
        except (OSError, RecordsFileRejected):
            return
        self._generation = parsed.records.generation
        self._written = {
            f"{namespace}/{service}": str(address)
            for (namespace, service), address in sorted(parsed.records.addresses.items())
        }

    def _observe(self, state: State, now: int) -> None:
        records = mesh_dns_records(state)
        if records != self._latest.value:
            self._latest.set(records)

    def _write(self, records: Mapping[str, str], generation: int) -> None:
        document = {"writtenAt": int(self._clock()), "generation": generation, "records": dict(records)}
        side = self.path.with_name(f".{self.path.name}.writing")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(side, "w", encoding="utf-8") as file:
            file.write(json.dumps(document, sort_keys=True, indent=1) + "\n")
            file.flush()
            os.fsync(file.fileno())
        side.chmod(0o644)  # mesh-dns may run as another user; it only reads
        os.replace(side, self.path)

    async def _serve(self, task_status: trio.TaskStatus[MeshRecordsWriter]) -> None:
        first = True
        while True:
            records = self._latest.value
            if records != self._written or first:
                generation = self._generation + (records != self._written)
                await trio.to_thread.run_sync(self._write, records, generation)
                self._generation, self._written = generation, records
                self._writes += 1
                self._wrote.set(generation)
            if first:
                first = False
                task_status.started(self)
            await self._latest.wait_value(lambda latest: latest != self._written)


async def serve_mesh_records(
    path: Path,
    *,
    journal: Journal,
    clock: Callable[[], float] = time.time,
    task_status: trio.TaskStatus[MeshRecordsWriter] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep the record file at `path` equal to the journal's state until cancelled.

    Writes once at start (so mesh-dns has a file, possibly empty, as soon as the agent runs), then after every
    state change that changes the records. Bursts coalesce: the latest records win (STYLE C10).

    Args:
        path: The record file (its directory is created).
        journal: Whose state to follow.
        clock: Seconds since the epoch, for `writtenAt`.
        task_status: Receives the `MeshRecordsWriter` once the first file is written.

    Error handling:
        A failed write (disk full, permissions) raises: the agent stops rather than let mesh-dns serve stale
        records without anyone knowing.
    """
    writer = MeshRecordsWriter(path, clock=clock)
    await trio.to_thread.run_sync(writer._resume)
    journal.subscribe(writer._observe)
    await writer._serve(task_status)
