"""The embedded backend: the registry in a local directory, kept in Aether's durable log (`aether.log`).

Each mutation that changes the registry is one log record, so a record's seq is the version it produced;
a checkpoint (every endpoint at a version) bounds replay. Survives a restart of the registrar.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import trio

from aether.core.events.registry import Protocol
from aether.log import EventLog, LogError, LogStatistics, open_event_log, read_newest_checkpoint
from aether.proto.registrar.v1 import store_pb2
from aether.registrar.backends.base import BackendFeed
from aether.registrar.convert import (
    endpoint_from_proto,
    registration_from_proto,
    registration_to_proto,
    unregistration_from_proto,
    unregistration_to_proto,
)
from aether.registrar.errors import InvalidRequestError, StoreError
from aether.registrar.snapshot import (
    HISTORY_LIMIT,
    Change,
    EndpointRegistered,
    EndpointsUnregistered,
    Mutation,
    RegistrySnapshot,
    apply,
    empty_snapshot,
    snapshot_of,
)

__all__ = ["CHECKPOINT_EVERY", "EmbeddedBackend", "open_embedded_backend"]

CHECKPOINT_EVERY = 10_000
"""Write a checkpoint once this many versions have passed since the last one.

It bounds a restart's replay to this many records (well under a second), and equals `HISTORY_LIMIT`, so the
history a restarted registrar rebuilds from the records after its checkpoint is of the same order.
"""


class EmbeddedBackend:
    """The registry in a local directory. Get one from `open_embedded_backend`."""

    def __init__(self, log: EventLog, *, history_limit: int, checkpoint_every: int) -> None:
        self._log = log
        self._history_limit = history_limit
        self._checkpoint_every = checkpoint_every
        self._checkpointed = 0

    @property
    def description(self) -> str:
        """`embedded <directory>`."""
        return f"embedded {self.directory}"

    @property
    def writable(self) -> bool:
        """Always True: the registrar is the store's only writer."""
        return True

    @property
    def directory(self) -> Path:
        """The store's directory."""
        return self._log.directory

    def statistics(self) -> LogStatistics:
        """Return the counters of the log holding the store."""
        return self._log.statistics()

    async def load(self) -> RegistrySnapshot:
        """Return the stored registry: the newest checkpoint, then every record after it replayed.

        Raises:
            StoreError: The directory is damaged, or a record does not replay to its own version.
        """
        with _store_errors(self.directory):
            snapshot = await trio.to_thread.run_sync(
                functools.partial(_load, self._log, history_limit=self._history_limit)
            )
        self._checkpointed = snapshot.history_floor
        return snapshot

    async def apply(
        self, mutation: Mutation, *, snapshot: RegistrySnapshot, changes: tuple[Change, ...]
    ) -> None:
        """Append `mutation` to the log (durable on return); checkpoint every `checkpoint_every` versions.

        Raises:
            StoreError: Writing failed; the registry must not move on without it.
        """
        del changes  # the record is the mutation; the changes follow from replaying it
        with _store_errors(self.directory):
            seq = await self._log.append(_record(mutation).SerializeToString(deterministic=True))
            assert seq == snapshot.version, f"record seq {seq} != version {snapshot.version}; this is a bug"
            if snapshot.version - self._checkpointed >= self._checkpoint_every:
                await self._log.write_checkpoint(seq=seq, payload=_checkpoint(snapshot))
                self._checkpointed = snapshot.version

    async def serve_updates(
        self,
        updates: trio.abc.SendChannel[BackendFeed],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Return at once: nobody but this registrar changes the store, so there is nothing to report."""
        del updates
        task_status.started()
        await trio.lowlevel.checkpoint()


@contextlib.asynccontextmanager
async def open_embedded_backend(
    directory: Path, *, history_limit: int = HISTORY_LIMIT, checkpoint_every: int = CHECKPOINT_EVERY
) -> AsyncIterator[EmbeddedBackend]:
    """Open (creating it if missing or empty) the store in `directory` for the duration of the block.

    Raises:
        StoreError: `directory` is not a store, or is damaged beyond what a crash explains.

    Resource handling:
        The log's committer runs for the block; records appended before the block ends are durable.
    """
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every: must be at least 1 (got {checkpoint_every!r})")
    with _store_errors(directory):
        async with open_event_log(directory) as log:
            yield EmbeddedBackend(log, history_limit=history_limit, checkpoint_every=checkpoint_every)


@contextlib.contextmanager
def _store_errors(directory: Path) -> Iterator[None]:
    """Translate the log's exceptions into `StoreError` (chained)."""
    try:
        yield
    except LogError as exc:
        raise StoreError(str(directory), reason=str(exc)) from exc


def _record(mutation: Mutation) -> store_pb2.StoreRecord:
    match mutation:
        case EndpointRegistered(endpoint=endpoint):
            return store_pb2.StoreRecord(registered=registration_to_proto(endpoint))
        case EndpointsUnregistered():
            return store_pb2.StoreRecord(unregistered=unregistration_to_proto(mutation))
        case _:  # pragma: no cover - the type checker proves this unreachable
            raise TypeError(f"mutation: unknown type {type(mutation).__name__!r}")


def _checkpoint(snapshot: RegistrySnapshot) -> bytes:
    message = store_pb2.StoreCheckpoint(
        version=snapshot.version,
        endpoints=[registration_to_proto(endpoint) for endpoint in snapshot.sorted_endpoints()],
    )
    return message.SerializeToString(deterministic=True)


def _load(log: EventLog, *, history_limit: int) -> RegistrySnapshot:
    newest = read_newest_checkpoint(log.directory, last_seq=log.last_seq).checkpoint
    snapshot = empty_snapshot()
    if newest is not None:
        stored = store_pb2.StoreCheckpoint.FromString(newest.payload)
        endpoints = [
            endpoint_from_proto(
                request.endpoint, service=request.service_name, protocol=Protocol(request.protocol)
            )
            for request in stored.endpoints
        ]
        snapshot = snapshot_of(endpoints, version=newest.seq)
    for record in log.read(from_seq=snapshot.version + 1):
        try:
            mutation = _mutation(store_pb2.StoreRecord.FromString(record.payload))
        except (InvalidRequestError, ValueError) as exc:
            raise StoreError(
                str(log.directory), reason=f"record {record.seq} does not decode: {exc}"
            ) from exc
        snapshot, changes = apply(snapshot, mutation, history_limit=history_limit)
        if not changes or snapshot.version != record.seq:
            raise StoreError(
                str(log.directory), reason=f"record {record.seq} does not replay to version {record.seq}"
            )
    return snapshot


def _mutation(record: store_pb2.StoreRecord) -> Mutation:
    which = record.WhichOneof("change")
    if which == "registered":
        return registration_from_proto(record.registered)
    if which == "unregistered":
        return unregistration_from_proto(record.unregistered)
    raise ValueError(f"unknown record kind {which!r}")
