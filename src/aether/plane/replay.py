"""Folding a log directory back into state: the newest usable checkpoint, then the records after it.

This is what `aether log replay` prints and what an agent does at start-up: the same code, so a replayed state is
the state the agent served.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs

from aether.core.errors import CodecError
from aether.core.events import (
    Event,
    PendingUpsert,
    Record,
    UpsertBatch,
    decode_event,
    decode_for_fold,
    decode_upsert_batch,
)
from aether.core.project.node import NodeProjector
from aether.core.reduce import fold_event, fold_many
from aether.core.state import EMPTY_STATE, State, decode_state, state_problems
from aether.log import (
    CheckpointError,
    InvalidCheckpoint,
    LogError,
    LogRangeError,
    LogRecord,
    RecordBatch,
    list_checkpoints,
    read_checkpoint,
    read_last_seq,
    scan_log,
    scan_log_batches,
)
from aether.plane.collector import collector_paused

__all__ = [
    "Contribution",
    "Replay",
    "UndecodableRecordError",
    "checkpoint_problems",
    "decode_record",
    "decoded_records",
    "explain_resource",
    "replay_log",
    "resume_replay",
]


@attrs.define(kw_only=True, str=False)
class UndecodableRecordError(LogError):
    """A record whose frame is sound but whose payload the event codec cannot decode."""

    segment: Path
    offset: int
    seq: int
    reason: str

    def __str__(self) -> str:
        return f"{self.segment} at offset {self.offset}: record {self.seq}: {self.reason}"


@attrs.frozen(kw_only=True)
class Replay:
    """The result of folding a log."""

    state: State
    last_observed_at: int = 0
    """The observation time of the record at `state.seq` (0 for an empty log): the "now" of projections, so that
    replaying a log projects exactly what was served."""
    checkpoint_seq: int | None
    """The seq of the checkpoint replay started from, or None when it folded from the first record."""
    records_folded: int
    """How many records were folded after the checkpoint."""
    skipped_checkpoints: tuple[InvalidCheckpoint, ...]
    """Checkpoints that could not be used, newest first, each with its reason (never skipped silently)."""


def decoded_records(directory: Path, *, from_seq: int = 1, to_seq: int | None = None) -> Iterator[Record]:
    """Yield the log's records from `from_seq` to `to_seq` as decoded events.

    Raises:
        LogError: a damaged log (see `aether.log.scan_log`), or `UndecodableRecordError` naming file and offset.
    """
    for item in scan_log(directory, from_seq=from_seq, to_seq=to_seq):
        yield Record(seq=item.seq, event=decode_record(item))


def decode_record(item: LogRecord) -> Event:
    """Decode one record's payload, naming its file and offset when it does not decode."""
    try:
        return decode_event(item.payload)
    except CodecError as exc:
        raise _undecodable(item, exc) from exc


def _undecodable(item: LogRecord, exc: CodecError) -> UndecodableRecordError:
    return UndecodableRecordError(segment=item.segment, offset=item.offset, seq=item.seq, reason=str(exc))


def checkpoint_problems(state: State, *, seq: int) -> tuple[str, ...]:
    """Return why a checkpoint's decoded `state` cannot be used as the state at `seq` (empty: it can)."""
    mismatch = (
        () if state.seq == seq else (f"state inside is at seq {state.seq!r}, the checkpoint claims {seq!r}",)
    )
    return mismatch + state_problems(state)


def _starting_point(
    directory: Path, *, until: int
) -> tuple[State, int | None, tuple[InvalidCheckpoint, ...]]:
    skipped: list[InvalidCheckpoint] = []
    for file in reversed(list_checkpoints(directory)):
        if file.seq > until:
            continue
        try:
            checkpoint = read_checkpoint(file.path, last_seq=until)
            state = decode_state(checkpoint.payload)
        except (CheckpointError, CodecError) as exc:
            skipped.append(InvalidCheckpoint(path=file.path, reason=str(exc)))
            continue
        problems = checkpoint_problems(state, seq=checkpoint.seq)
        if problems:
            skipped.append(InvalidCheckpoint(path=file.path, reason="; ".join(problems)))
            continue
        return state, checkpoint.seq, tuple(skipped)
    return EMPTY_STATE, None, tuple(skipped)


class _Decoded:
    """The `(seq, event)` pairs of log records, decoded as `fold_many` takes them (a run of endpoint upserts as one
    `UpsertBatch`, any other record one by one); counts the records and keeps the last event's observation time."""

    def __init__(self, batches: Iterator[RecordBatch]) -> None:
        self._batches = batches
        self.count = 0
        self._last: Event | PendingUpsert | UpsertBatch | None = None

    @property
    def observed_at(self) -> int:
        """The observation time of the last event (0 before any)."""
        return 0 if self._last is None else self._last.observed_at

    def __iter__(self) -> Iterator[tuple[int, Event | PendingUpsert | UpsertBatch]]:
        count = self.count
        last: Event | PendingUpsert | UpsertBatch | None = None
        try:
            for batch in self._batches:
                upserts = decode_upsert_batch(batch.payloads)
                if upserts is not None:
                    count += len(upserts)
                    last = upserts
                    yield batch.first_seq, upserts
                    continue
                for item in batch.records():  # the careful way: each record, named when it does not decode
                    try:
                        last = decode_for_fold(item.payload)
                    except CodecError as exc:
                        raise _undecodable(item, exc) from exc
                    count += 1
                    yield item.seq, last
        finally:
            self.count = count
            if last is not None:
                self._last = last


_BATCH_SIZE = 1024
"""Records decoded at once (`decode_upsert_batch`): large enough that the per-batch cost vanishes, small enough that a
batch broken by a record of another kind (decoded one by one) costs little."""


def replay_log(directory: Path, *, until: int | None = None, use_checkpoints: bool = True) -> Replay:
    """Fold the log in `directory` up to `until` (default: its last record).

    Args:
        directory: The log directory (read only; nothing is modified).
        until: The last seq to fold.
        use_checkpoints: Start from the newest valid checkpoint at or before `until`; False folds every record,
            which needs the log to start at seq 1 (retention not yet run).

    Raises:
        LogError: a damaged log, a record that does not decode, or records missing before the oldest segment.
    """
    last = read_last_seq(directory) if until is None else until
    with collector_paused():
        state, checkpoint_seq, skipped = (
            _starting_point(directory, until=last) if use_checkpoints else (EMPTY_STATE, None, ())
        )
    return _fold_tail(
        directory,
        Replay(state=state, checkpoint_seq=checkpoint_seq, records_folded=0, skipped_checkpoints=skipped),
        last=last,
    )


def resume_replay(directory: Path, since: Replay, *, until: int | None = None) -> Replay:
    """Fold the records of `directory` after `since` (an earlier replay of the same log) up to `until` (default:
    its last record): what a standby does to keep up with the owner's log, and once more when it takes over.

    Falls back to a whole `replay_log` when `since` is ahead of the log (a tail recovery cut) or when retention
    has deleted records `since` did not fold yet.

    Raises:
        LogError: as `replay_log`.
    """
    last = read_last_seq(directory) if until is None else until
    if since.state.seq > last:
        return replay_log(directory, until=last)
    try:
        return _fold_tail(directory, since, last=last)
    except LogRangeError:
        return replay_log(directory, until=last)


def _fold_tail(directory: Path, start: Replay, *, last: int) -> Replay:
    """Fold the records after `start.state` up to `last` onto it."""
    state = start.state
    observed_at = start.last_observed_at
    with collector_paused():
        decoded = _Decoded(scan_log_batches(directory, from_seq=state.seq + 1, to_seq=last, size=_BATCH_SIZE))
        state = fold_many(state, decoded)
        folded = decoded.count
        if folded:
            observed_at = decoded.observed_at
        if not observed_at and state.seq:
            observed_at = next(
                decoded_records(directory, from_seq=state.seq, to_seq=state.seq)
            ).event.observed_at
    return attrs.evolve(
        start, state=state, last_observed_at=observed_at, records_folded=start.records_folded + folded
    )


@attrs.frozen(kw_only=True)
class Contribution:
    """One event that changed a resource of the projected snapshot."""

    seq: int
    kind: str
    """The event's class name."""
    subject: str
    observed_at: int
    type_url: str
    change: str
    """`created`, `changed` or `removed`."""


def explain_resource(
    directory: Path, *, resource: str, node_name: str, until: int | None = None
) -> list[Contribution]:
    """Return the events after which the projected resource named `resource` (of any type) appeared, changed or
    disappeared, replaying the log from seq 1 and projecting `node_name`'s snapshot after every event.

    The projection is the agent's (`NodeProjector`, at each event's observation time), so the answer explains the
    bytes the agent served: every change to them is listed, and no event that left them alone is.

    Raises:
        LogError: as `replay_log` (with checkpoints off: the log must start at seq 1).
    """
    last = read_last_seq(directory) if until is None else until
    projector = NodeProjector(node_name=node_name)
    state = EMPTY_STATE
    held: dict[str, str] = {}
    found: list[Contribution] = []
    with collector_paused():
        for item in scan_log(directory, from_seq=1, to_seq=last):
            event = decode_record(item)
            state = fold_event(state, event, seq=item.seq)
            snapshot = projector.project(state, now=event.observed_at)
            for type_url in sorted(set(snapshot.resources) | set(held)):
                current = snapshot.of_type(type_url).get(resource)
                digest = current.digest if current is not None else None
                before = held.get(type_url)
                if digest == before:
                    continue
                change = "created" if before is None else "removed" if digest is None else "changed"
                found.append(
                    Contribution(
                        seq=item.seq,
                        kind=type(event).__name__,
                        subject=event.subject,
                        observed_at=event.observed_at,
                        type_url=type_url,
                        change=change,
                    )
                )
                if digest is None:
                    del held[type_url]
                else:
                    held[type_url] = digest
    return found
