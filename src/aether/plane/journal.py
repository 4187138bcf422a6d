"""The journal: the one owner of a node's event log and folded state.

Sources send events over a channel; the journal appends them in batches (one fsync per batch, through the log's
group commit), folds them, and hands each new state to its subscribers (the projection that publishes snapshots).
Start-up replays the newest checkpoint plus the tail, so the node serves what it served before a crash.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import attrs
import trio

from aether.core.errors import CodecError
from aether.core.events import Event, ResourceAcked, encode_event
from aether.core.reduce import fold_many
from aether.core.state import State, encode_state
from aether.log import EventLog, LogLock, open_event_log
from aether.plane.collector import collector_paused
from aether.plane.replay import Replay, replay_log, resume_replay
from aether.telemetry import JournalMetrics, change_tracer, current_telemetry

__all__ = ["CHECKPOINT_EVERY", "MAX_BATCH", "Journal", "JournalStatistics", "open_journal"]

MAX_BATCH = 1024
"""Events folded per batch at most: large enough to amortize an fsync, small enough to publish promptly."""

_log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 10_000
"""Records between checkpoints: start-up then folds at most this many after the checkpoint (well under a second)."""


@attrs.frozen(kw_only=True)
class JournalStatistics:
    """Counters of the journal."""

    seq: int
    appended: int
    batches: int
    checkpoints: int
    refused: int = 0
    """Events that could not be encoded (a value their wire type cannot hold): logged, never appended."""


class Journal:
    """Owns the log and the state: `submit` events from any task; read `state`; subscribe to changes."""

    def __init__(self, *, log: EventLog, replay: Replay, send: trio.MemorySendChannel[Event]) -> None:
        self._log = log
        self._state = replay.state
        self.replay = replay
        """What start-up replayed (checkpoint and records folded)."""
        self._send = send
        self._last_observed_at = replay.last_observed_at
        self._subscribers: list[Callable[[State, int], None]] = []
        self._appended = self._batches = self._checkpoints = self._refused = 0
        self._since_checkpoint = replay.records_folded
        telemetry = current_telemetry()
        self._metrics = JournalMetrics.of(telemetry)
        self._tracer = change_tracer(telemetry)

    @property
    def state(self) -> State:
        """The state folded up to the last durable record."""
        return self._state

    def sender(self) -> trio.MemorySendChannel[Event]:
        """Return a send channel of the journal's own for one source (close it when the source ends)."""
        return self._send.clone()

    @property
    def last_observed_at(self) -> int:
        """When the last folded record was observed (ns since the epoch): the "now" projections are made at."""
        return self._last_observed_at

    def subscribe(self, callback: Callable[[State, int], None]) -> None:
        """Call `callback(state, last_observed_at)` now and after every batch (it must not block: publish, return)."""
        self._subscribers.append(callback)
        callback(self._state, self._last_observed_at)

    def statistics(self) -> JournalStatistics:
        """Return the journal's counters."""
        return JournalStatistics(
            seq=self._state.seq,
            appended=self._appended,
            batches=self._batches,
            checkpoints=self._checkpoints,
            refused=self._refused,
        )

    async def _serve(self, receive: trio.MemoryReceiveChannel[Event]) -> None:
        async with receive:
            async for first in receive:
                batch = [first]
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(receive.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                await self._apply(batch)

    def _encoded(self, batch: list[Event]) -> tuple[list[Event], list[bytes]]:
        """Return the events of `batch` that encode, with their bytes; log and count the others.

        A backstop: sources range-check what they observe, but an event the log cannot hold must never stop the
        journal (every later event would be lost) nor reach the log half-written.
        """
        events: list[Event] = []
        payloads: list[bytes] = []
        for event in batch:
            try:
                payload = encode_event(event)
            except CodecError as error:
                self._refused += 1
                _log.error(
                    "event refused, not appended: %s (source %r, %s)", error, event.source, event.subject
                )
                continue
            events.append(event)
            payloads.append(payload)
        return events, payloads

    async def _apply(self, batch: list[Event]) -> None:
        batch, payloads = self._encoded(batch)
        if not batch:
            return
        started = time.time_ns()
        seqs = await self._log.append_many(payloads)
        committed = time.time_ns()
        state = self._state
        with collector_paused():
            state = fold_many(state, zip(seqs, batch, strict=True))
        folded = time.time_ns()
        self._state = state
        self._last_observed_at = batch[-1].observed_at
        self._appended += len(batch)
        self._batches += 1
        self._since_checkpoint += len(batch)
        if self._since_checkpoint >= CHECKPOINT_EVERY:
            await self._log.write_checkpoint(seq=state.seq, payload=encode_state(state))
            self._checkpoints += 1
            self._since_checkpoint = 0
        for callback in self._subscribers:
            callback(state, self._last_observed_at)
        if self._metrics.recording:
            self._record(batch, started=started, committed=committed)
        if self._tracer is not None and not all(type(event) is ResourceAcked for event in batch):
            # A batch of ACKs only is the end of the changes that were pushed (their push spans end with an
            # `aether.xds.ack`), not a change of its own: tracing it would double the cost of every push.
            self._trace(batch, seqs, started=started, committed=committed, folded=folded)

    def _record(self, batch: list[Event], *, started: int, committed: int) -> None:
        self._metrics.commit_duration.record((committed - started) / 1e9)
        for kind, count in collections.Counter(type(event).__name__ for event in batch).items():
            attributes = {"aether.event.kind": kind}
            self._metrics.appended.add(count, attributes)
            self._metrics.folded.add(count, attributes)

    def _trace(
        self, batch: list[Event], seqs: Sequence[int], *, started: int, committed: int, folded: int
    ) -> None:
        assert self._tracer is not None
        change = self._tracer.start_change(
            first_seq=seqs[0], last_seq=seqs[-1], events=list(zip(seqs, batch, strict=True)), start=started
        )
        change.hop("aether.log.commit", start=started, end=committed)
        change.hop("aether.fold", start=committed, end=folded)
        change.hop("aether.project", start=folded, end=time.time_ns())
        change.end()


@contextlib.asynccontextmanager
async def open_journal(
    directory: Path, *, lock: LogLock | None = None, warm: Replay | None = None
) -> AsyncIterator[Journal]:
    """Open the node's log in `directory` (created if missing), replay it, and run the journal for the block.

    Args:
        directory: The log directory.
        lock: The log's lock, already held (a standby's); None takes it now (`aether.log.open_event_log`).
        warm: A replay of this log made before the lock was held (a standby's); only the records after it are
            folded. None replays from the newest checkpoint.

    Raises:
        LogLockedError: Another process owns the log (the error names its pid).

    Resource handling:
        The appending task and the log's committer live for the block; events sent after the block ends are lost
        with a `trio.ClosedResourceError` at the sender.
    """
    async with open_event_log(directory, lock=lock) as log:
        replay = await trio.to_thread.run_sync(
            replay_log if warm is None else functools.partial(resume_replay, since=warm), directory
        )
        # Buffer 0 would make every source wait for the fsync of each batch; a bounded buffer lets sources run
        # ahead by one batch while the journal is writing, and pushes back beyond that.
        send, receive = trio.open_memory_channel[Event](MAX_BATCH)
        journal = Journal(log=log, replay=replay, send=send)
        async with trio.open_nursery() as nursery, send:
            nursery.start_soon(journal._serve, receive)
            yield journal
            nursery.cancel_scope.cancel()
