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

from aether.agent.journal import Journal
from aether.core.state import State
from aether.dns.errors import RecordsFileRejected
from aether.dns.records import parse_records

__all__ = ["MeshRecordsStatistics", "mesh_dns_records", "serve_mesh_records"]


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
    records: int
    writes: int


class _Writer:
    def __init__(self, path: Path, *, clock: Callable[[], float]) -> None:
        self.path = path
        self.clock = clock
        self.generation = 0
        self.written: dict[str, str] | None = None
        self.latest: dict[str, str] = {}
        self.changed = trio.Event()
        self.writes = 0

    def resume(self) -> None:
        """Continue from the file a previous agent left: its generation, and its records if they still hold."""
        try:
            parsed = parse_records(self.path.read_bytes())
        except (OSError, RecordsFileRejected):
            return
        self.generation = parsed.records.generation
        self.written = {
            f"{namespace}/{service}": str(address)
            for (namespace, service), address in sorted(parsed.records.addresses.items())
        }

    def observe(self, state: State, now: int) -> None:
        records = mesh_dns_records(state)
        if records != self.latest:
            self.latest = records
            self.changed.set()

    def write(self, records: Mapping[str, str]) -> None:
        document = {"writtenAt": int(self.clock()), "generation": self.generation, "records": dict(records)}
        side = self.path.with_name(f".{self.path.name}.writing")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(side, "w", encoding="utf-8") as file:
            file.write(json.dumps(document, sort_keys=True, indent=1) + "\n")
            file.flush()
            os.fsync(file.fileno())
        side.chmod(0o644)  # mesh-dns runs as another user and only reads it
        os.replace(side, self.path)
        self.writes += 1


async def serve_mesh_records(
    path: Path,
    *,
    journal: Journal,
    clock: Callable[[], float] = time.time,
    task_status: trio.TaskStatus[Callable[[], MeshRecordsStatistics]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep the record file at `path` equal to the journal's state until cancelled.

    Writes once at start (so mesh-dns has a file, possibly empty, as soon as the agent runs), then after every
    state change that changes the records. Bursts coalesce: the latest records win (STYLE C10).

    Args:
        path: The record file (its directory is created).
        journal: Whose state to follow.
        clock: Seconds since the epoch, for `writtenAt`.
        task_status: Receives a function returning the writer's statistics, once the first file is written.

    Error handling:
        A failed write (disk full, permissions) raises: the agent stops rather than serve DNS from stale records
        without saying so.
    """
    writer = _Writer(path, clock=clock)
    await trio.to_thread.run_sync(writer.resume)
    journal.subscribe(writer.observe)

    def statistics() -> MeshRecordsStatistics:
        return MeshRecordsStatistics(
            generation=writer.generation, records=len(writer.written or {}), writes=writer.writes
        )

    started = False
    while True:
        records = writer.latest
        if records != writer.written or not started:
            if records != writer.written:
                writer.generation += 1
            await trio.to_thread.run_sync(writer.write, records)
            writer.written = records
        if not started:
            started = True
            task_status.started(statistics)
        writer.changed = trio.Event()
        if writer.latest == writer.written:
            await writer.changed.wait()
