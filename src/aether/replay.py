"""Folding a log directory back into state: the newest usable checkpoint, then the records after it.

This is what `aether log replay` prints and what an agent does at start-up: the same code, so a replayed state is
the state the agent served.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path

import attrs

from aether.core.errors import CodecError
from aether.core.events import Event, Record, decode_event
from aether.core.reduce import fold_event
from aether.core.state import EMPTY_STATE, State, decode_state, state_problems
from aether.log import (
    CheckpointError,
    InvalidCheckpoint,
    LogError,
    LogRecord,
    list_checkpoints,
    read_checkpoint,
    read_last_seq,
    scan_log,
)


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
        raise UndecodableRecordError(
            segment=item.segment, offset=item.offset, seq=item.seq, reason=str(exc)
        ) from exc


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


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block.

    Folding allocates millions of small immutable objects that never form cycles; the collector's passes over them
    cost about 40% of a replay's time and can free nothing. Reference counting still frees everything.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


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
        folded = 0
        observed_at = 0
        for item in scan_log(directory, from_seq=state.seq + 1, to_seq=last):
            event = decode_record(item)
            state = fold_event(state, event, seq=item.seq)
            observed_at = event.observed_at
            folded += 1
        if not folded and state.seq:
            observed_at = next(
                decoded_records(directory, from_seq=state.seq, to_seq=state.seq)
            ).event.observed_at
    return Replay(
        state=state,
        last_observed_at=observed_at,
        checkpoint_seq=checkpoint_seq,
        records_folded=folded,
        skipped_checkpoints=skipped,
    )
