"""The writer: :func:`open_event_log` and :class:`EventLog`, group commit with one fsync per batch.

One committer task owns the active segment. Appenders add their payloads to the pending batch (no hand-off, no
wait to be taken) and wait once, on that batch, until it is written and synced; the committer takes the whole
pending batch each time the previous one is durable. Each append then costs one task switch, not three (hand over,
be taken, be woken), which is what bounds group commit with hundreds of appenders.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import NoReturn, TypeVar, final

import attrs
import trio

from aether.log.active_segment import ActiveSegment, open_for_append, roll_over, write_batch
from aether.log.errors import (
    CheckpointSeqError,
    LogBrokenError,
    LogClosedError,
    LogError,
    LogWriteError,
    PayloadTooLargeError,
)
from aether.log.frame import FRAME_HEADER_SIZE, MAX_PAYLOAD, SEGMENT_HEADER_SIZE
from aether.log.lock import LogLock, lock_log
from aether.log.reader import scan_log
from aether.log.recovery import RecoveryReport
from aether.log.retention import DEFAULT_RETENTION_MARGIN, write_checkpoint_and_retain
from aether.log.segment import LogRecord

__all__ = [
    "DEFAULT_SEGMENT_MAX_BYTES",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "EventLog",
    "LogStatistics",
    "open_event_log",
]

DEFAULT_SEGMENT_MAX_BYTES = 64 * 2**20
"""Roll over to a new segment once the active one reaches this size (64 MiB).

Retention deletes whole segments, so smaller segments free disk sooner after a checkpoint;
larger ones mean fewer files and fewer rollover fsyncs. 64 MiB is about 300,000 typical events.
"""

MAX_BATCH_BYTES = 4 * 2**20
"""Stop adding appends to a batch once its frames reach this size (4 MiB).

By then one fsync is dominated by the bytes it flushes, so a larger batch gains no throughput;
the bound keeps one batch's memory, its write latency and the tail a crash can tear small.
One append_many larger than this still goes out whole, as a batch of its own.
"""

MAX_BATCH_RECORDS = 65_536
"""Stop adding appends to a batch once it holds this many records.

Framing runs in a worker thread, but waking the waiters runs in the event loop;
this caps how long one batch's wake-ups can hold the loop (tens of milliseconds at most).
"""


@attrs.frozen(kw_only=True)
class LogStatistics:
    """Counters of an open :class:`EventLog`, since it was opened."""

    appends: int
    """Records made durable."""
    batches: int
    """Batches written; each is one write and one fsync."""
    fsyncs: int
    """fsync calls on segment files and the segments directory (one per batch, two per rollover)."""
    bytes_written: int
    """Bytes appended to segments, headers included."""
    rollovers: int
    """New segments started."""
    checkpoints_written: int
    """Checkpoints written."""
    segments_deleted: int
    """Segments deleted by retention."""
    segments: int
    """Segment files the log has now."""
    last_seq: int
    """The seq of the last durable record."""
    appenders_waiting: int
    """Appenders blocked before adding their payloads: the pending batch is full (`MAX_BATCH_BYTES` or
    `MAX_BATCH_RECORDS`) while the one before it is being written."""


@attrs.define(kw_only=True)
class _Batch:
    """The payloads of every append since the committer last took a batch, and what answers their appenders."""

    payloads: list[bytes] = attrs.Factory(list)
    size: int = 0
    """Bytes of the frames the payloads become."""
    done: trio.Event = attrs.Factory(trio.Event)
    # Set by the committer, before done is set: the seq of the first payload, or the error answering all.
    first_seq: int = 0
    error: LogError | None = None


@attrs.define(kw_only=True)
class _CheckpointRequest:
    seq: int
    payload: bytes
    done: trio.Event = attrs.Factory(trio.Event)
    error: LogError | None = None


@final
class EventLog:
    """A durable, append-only log of opaque payloads, open for appending.

    Get one from :func:`open_event_log`; it is only usable inside that ``async with`` block.
    """

    def __init__(
        self,
        *,
        directory: Path,
        recovery: RecoveryReport,
        active: ActiveSegment,
        segments: int,
        segment_max_bytes: int,
        retention_margin: int,
    ) -> None:
        self._directory = directory
        self._recovery = recovery
        self._segment_max_bytes = segment_max_bytes
        self._retention_margin = retention_margin
        self._pending = _Batch()
        self._checkpoint_requests: collections.deque[_CheckpointRequest] = collections.deque()
        self._committer_idle = trio.lowlevel.ParkingLot()
        """Where the committer waits for a pending batch or a checkpoint request."""
        self._room = trio.lowlevel.ParkingLot()
        """Where appenders wait while the pending batch is full."""
        # Invariant: apart from `_closed` (set by open_event_log on exit), the fields below change only in
        # the committer task, and never while one of its worker threads runs.
        self._active = active
        self._last_seq = recovery.last_seq
        self._closed = False
        self._failure: LogWriteError | None = None
        self._appends = 0
        self._batches = 0
        self._fsyncs = 0
        self._bytes_written = 0
        self._rollovers = 0
        self._checkpoints_written = 0
        self._segments_deleted = 0
        self._segments = segments

    @property
    def directory(self) -> Path:
        """The log directory."""
        return self._directory

    @property
    def recovery(self) -> RecoveryReport:
        """What recovery found and did when the log was opened."""
        return self._recovery

    @property
    def last_seq(self) -> int:
        """The seq of the last durable record (0 for a log without records)."""
        return self._last_seq

    def statistics(self) -> LogStatistics:
        """Return the log's counters since it was opened."""
        return LogStatistics(
            appends=self._appends,
            batches=self._batches,
            fsyncs=self._fsyncs,
            bytes_written=self._bytes_written,
            rollovers=self._rollovers,
            checkpoints_written=self._checkpoints_written,
            segments_deleted=self._segments_deleted,
            segments=self._segments,
            last_seq=self._last_seq,
            appenders_waiting=self._room.statistics().tasks_waiting,
        )

    async def append(self, payload: bytes) -> int:
        """Append one payload; return once it is durable.

        Args:
            payload: The opaque payload, at most :data:`~aether.log.frame.MAX_PAYLOAD` bytes.

        Returns:
            The record's seq.

        Raises:
            TypeError: If the payload is not ``bytes``; nothing was appended.
            PayloadTooLargeError: If the payload is too large; nothing was appended.
            LogWriteError: If writing or syncing the batch holding it failed.
            LogBrokenError: If an earlier write failed; the log appends nothing more.
            LogClosedError: If the log was closed.

        Error handling:
            If the call is cancelled while it waits for its batch to be synced, the record may still
            become durable; its seq is then simply not returned.
        """
        # append_many's steps, for one payload without a tuple or a coroutine frame between this task and its
        # wait: a task parks and resumes through every frame it is in, once per append.
        _check_payload(payload)
        await trio.lowlevel.checkpoint_if_cancelled()  # cancelled: nothing was appended
        self._check_usable()
        size = len(payload) + FRAME_HEADER_SIZE
        while not self._has_room(1, size):
            await self._wait_for_room()
        pending, start = self._add((payload,), size)
        await pending.done.wait()
        return self._first_seq(pending, start)

    async def append_many(self, payloads: Iterable[bytes]) -> range:
        """Append payloads as consecutive records in one batch; return once they are durable.

        Args:
            payloads: The opaque payloads, each at most :data:`~aether.log.frame.MAX_PAYLOAD` bytes.

        Returns:
            The records' seqs (empty, starting after the last seq, when there are no payloads).

        Raises:
            TypeError: If a payload is not ``bytes``; nothing was appended.
            PayloadTooLargeError: If a payload is too large; nothing was appended.
            LogWriteError: If writing or syncing the batch holding them failed.
            LogBrokenError: If an earlier write failed; the log appends nothing more.
            LogClosedError: If the log was closed.

        Error handling:
            If the call is cancelled while it waits for its batch to be synced (the payloads are in
            the pending batch from the moment the call does not raise at once), the records may still
            become durable, all of them or none.
        """
        batch = tuple(payloads)
        for payload in batch:
            _check_payload(payload)
        await trio.lowlevel.checkpoint_if_cancelled()  # cancelled: nothing was appended
        self._check_usable()
        if not batch:
            await trio.lowlevel.checkpoint()
            return range(self._last_seq + 1, self._last_seq + 1)
        size = sum(map(len, batch)) + FRAME_HEADER_SIZE * len(batch)
        while not self._has_room(len(batch), size):
            await self._wait_for_room()
        pending, start = self._add(batch, size)
        await pending.done.wait()
        first = self._first_seq(pending, start)
        return range(first, first + len(batch))

    async def write_checkpoint(self, *, seq: int, payload: bytes) -> None:
        """Write a checkpoint at ``seq``, then delete what it makes unnecessary.

        The checkpoint is durable before anything is deleted. Retention then deletes the segments
        whose records all have seqs at or below both ``seq - retention_margin`` and the older kept
        checkpoint's seq (never the active segment), and all but the newest two checkpoints.
        Appends wait while this runs: the committer does it between batches.

        Args:
            seq: The seq of the last record the payload includes; at most :attr:`last_seq`.
            payload: The opaque checkpoint payload.

        Raises:
            CheckpointSeqError: If ``seq`` is not in ``0..last_seq``.
            LogWriteError: If writing the checkpoint or deleting old files failed;
                appends are not affected.
            LogBrokenError: If an earlier append write failed.
            LogClosedError: If the log was closed.
        """
        self._check_usable()
        if not 0 <= seq <= self._last_seq:
            raise CheckpointSeqError(self._directory, seq=seq, last_seq=self._last_seq)
        request = _CheckpointRequest(seq=seq, payload=payload)
        self._checkpoint_requests.append(request)
        self._committer_idle.unpark()
        await request.done.wait()
        if request.error is not None:
            self._raise(request.error)

    def read(self, *, from_seq: int = 1) -> Iterator[LogRecord]:
        """Read durable records from ``from_seq`` up to the current :attr:`last_seq`.

        This is blocking file I/O: call it (and iterate) in a worker thread, e.g. with
        ``trio.to_thread.run_sync(lambda: list(log.read(from_seq=n)))``.

        Args:
            from_seq: The first seq to read.

        Returns:
            An iterator over the records, as :func:`~aether.log.reader.scan_log` gives them.
        """
        return scan_log(self._directory, from_seq=from_seq, to_seq=self._last_seq)

    def _has_room(self, records: int, size: int) -> bool:
        """Whether the pending batch can take `records` payloads of `size` frame bytes: it is empty (one call's
        payloads always go out whole, however many), or stays within `MAX_BATCH_BYTES` and `MAX_BATCH_RECORDS`."""
        pending = self._pending
        return not pending.payloads or (
            pending.size + size <= MAX_BATCH_BYTES and len(pending.payloads) + records <= MAX_BATCH_RECORDS
        )

    async def _wait_for_room(self) -> None:
        """Wait until the committer takes the full pending batch (a new, empty one is then pending)."""
        await self._room.park()
        self._check_usable()

    def _add(self, payloads: tuple[bytes, ...], size: int) -> tuple[_Batch, int]:
        """Add payloads to the pending batch; return it and the payloads' index in it."""
        pending = self._pending
        start = len(pending.payloads)
        pending.payloads.extend(payloads)
        pending.size += size
        if not start:
            # The committer parks only while nothing is pending, so the first payloads of a batch wake it; a
            # later append finds it woken already, or busy and bound to look at the pending batch next.
            self._committer_idle.unpark()
        return pending, start

    def _first_seq(self, batch: _Batch, start: int) -> int:
        """The seq of the payload at index `start` of a batch the committer answered, or its error raised."""
        if batch.error is not None:
            self._raise(batch.error)
        return batch.first_seq + start

    def _check_usable(self) -> None:
        if self._closed:
            raise LogClosedError(self._directory)
        if self._failure is not None:
            raise LogBrokenError(self._directory) from self._failure

    def _raise(self, error: LogError) -> NoReturn:
        # One error answers every waiter of a batch; each raises its own copy so tracebacks do not pile up.
        if isinstance(error, LogWriteError):
            raise LogWriteError(error.path, operation=error.operation, error=error.error) from error.error
        if isinstance(error, LogBrokenError):
            raise LogBrokenError(self._directory) from self._failure
        raise error

    async def _run_committer(self) -> None:
        # The batch or checkpoint taken and not yet answered; `finally` answers it, and everything still pending,
        # if this task dies (cancelled) or returns (the log closed: nothing is pending then).
        in_flight: _Batch | _CheckpointRequest | None = None
        try:
            while True:
                if self._checkpoint_requests:
                    in_flight = self._checkpoint_requests.popleft()
                    await self._checkpoint(in_flight)
                elif self._pending.payloads:
                    in_flight, self._pending = self._pending, _Batch()
                    self._room.unpark_all()
                    await self._commit(in_flight)
                elif self._closed:
                    return
                else:
                    await self._committer_idle.park()
        finally:
            self._closed = True
            self._room.unpark_all()
            for waiting in [in_flight, self._pending, *self._checkpoint_requests]:
                if waiting is not None and not waiting.done.is_set():
                    waiting.error = LogClosedError(self._directory)
                    waiting.done.set()

    def _close(self) -> None:
        """Refuse new appends; the committer writes what is pending, then returns."""
        self._closed = True
        self._committer_idle.unpark()
        self._room.unpark_all()

    async def _commit(self, batch: _Batch) -> None:
        if self._failure is not None:
            batch.error = LogBrokenError(self._directory)
            batch.done.set()
            return
        first_seq = self._last_seq + 1
        payloads = batch.payloads
        try:
            # Checked between batches, so a segment may overshoot the limit by one batch.
            if self._active.size >= self._segment_max_bytes and self._active.size > SEGMENT_HEADER_SIZE:
                roll = functools.partial(roll_over, self._directory, self._active, first_seq=first_seq)
                self._active = await _in_worker_thread(roll)
                self._rollovers += 1
                self._segments += 1
                self._fsyncs += 2
                self._bytes_written += SEGMENT_HEADER_SIZE
            write = functools.partial(write_batch, self._active, first_seq=first_seq, payloads=payloads)
            self._active = await _in_worker_thread(write)
        except LogWriteError as error:
            self._failure = error
            batch.error = error
            batch.done.set()
            return
        self._batches += 1
        self._fsyncs += 1
        self._bytes_written += batch.size
        self._appends += len(payloads)
        self._last_seq += len(payloads)
        batch.first_seq = first_seq
        batch.done.set()

    async def _checkpoint(self, request: _CheckpointRequest) -> None:
        work = functools.partial(
            write_checkpoint_and_retain,
            self._directory,
            seq=request.seq,
            payload=request.payload,
            retention_margin=self._retention_margin,
        )
        try:
            plan = await trio.to_thread.run_sync(work)
        except LogWriteError as error:
            request.error = error
        else:
            self._checkpoints_written += 1
            self._segments_deleted += len(plan.segments)
            self._segments -= len(plan.segments)
        request.done.set()


_T = TypeVar("_T")


def _check_payload(payload: object) -> None:
    if not isinstance(payload, bytes):
        raise TypeError(f"payload: must be bytes (got {type(payload).__name__!r})")
    if len(payload) > MAX_PAYLOAD:
        raise PayloadTooLargeError(len(payload), maximum=MAX_PAYLOAD)


async def _in_worker_thread(function: Callable[[], _T]) -> _T:
    """Return `function()` run in one of trio's cached worker threads; not cancellable (the committer's write
    must finish). As `trio.to_thread.run_sync`, without its capacity limiter and the scheduler passes that
    acquiring and releasing it cost: one hand-off to the thread and one back, which is a single appender's
    latency on top of the sync."""
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()
    result: list[_T] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            result.append(function())
        except BaseException as error:  # handed to the task, which raises it
            failure.append(error)

    def deliver(_outcome: object) -> None:
        token.run_sync_soon(trio.lowlevel.reschedule, task)

    trio.lowlevel.start_thread_soon(work, deliver)
    await trio.lowlevel.wait_task_rescheduled(lambda _raise_cancel: trio.lowlevel.Abort.FAILED)
    if failure:
        raise failure[0]
    return result[0]


@contextlib.asynccontextmanager
async def open_event_log(
    directory: Path,
    *,
    segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
    retention_margin: int = DEFAULT_RETENTION_MARGIN,
    create: bool = True,
    lock: LogLock | None = None,
) -> AsyncIterator[EventLog]:
    """Take the log's lock, open it for appending (recover it), then run its committer until the block exits.

    Args:
        directory: The log directory.
        segment_max_bytes: Roll over to a new segment once the active one reaches this size.
        retention_margin: Records before the newest checkpoint that retention keeps.
        create: Create the log if ``directory`` is missing or empty.
        lock: The log's lock, already held (a standby that waited for it: `aether.log.lock.wait_lock_log`);
            None takes it now. Either way it is released when the block exits.

    Yields:
        The open log; its :attr:`~EventLog.recovery` says what recovery found and did.

    Raises:
        LogLockedError: If another process owns the log (it holds the lock); nothing was read or modified.
        NotALogError: If ``directory`` is not a log (and, with ``create``, not missing or empty).
        LogDamageError: If recovery found damage a crash cannot explain; nothing was modified.
        LogWriteError: If creating the log, cutting a torn tail or opening the segment failed.

    Resource handling:
        The committer runs in a nursery of its own for the duration of the block.
        On a normal exit, appends already handed to the committer are written before the block
        finishes; later appends raise :class:`LogClosedError`. The segment file is closed on exit.

    Error handling:
        A failed write or fsync does not end the block: every append in that batch raises
        :class:`LogWriteError`, and every later one :class:`LogBrokenError`.
        An exception leaving the block is wrapped in an ``ExceptionGroup`` by the nursery.
    """
    if segment_max_bytes < 1:
        raise ValueError(f"segment_max_bytes: must be at least 1 (got {segment_max_bytes!r})")
    if retention_margin < 0:
        raise ValueError(f"retention_margin: must be at least 0 (got {retention_margin!r})")
    held = (
        lock
        if lock is not None
        else await trio.to_thread.run_sync(functools.partial(lock_log, directory, create=create))
    )
    try:
        async with _opened_log(
            directory,
            create=create,
            segment_max_bytes=segment_max_bytes,
            retention_margin=retention_margin,
        ) as log:
            yield log
    finally:
        held.release()


@contextlib.asynccontextmanager
async def _opened_log(
    directory: Path, *, create: bool, segment_max_bytes: int, retention_margin: int
) -> AsyncIterator[EventLog]:
    opened = await trio.to_thread.run_sync(functools.partial(open_for_append, directory, create=create))
    log = EventLog(
        directory=directory,
        recovery=opened.recovery,
        active=opened.active,
        segments=opened.segments,
        segment_max_bytes=segment_max_bytes,
        retention_margin=retention_margin,
    )
    try:
        async with trio.open_nursery() as committer_nursery:
            committer_nursery.start_soon(log._run_committer)
            try:
                yield log
            finally:
                log._close()
    finally:
        # The committer and its worker threads have finished, so nothing else uses the descriptor.
        os.close(log._active.descriptor)
