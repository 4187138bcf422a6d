"""Properties of the log as a whole: replay equals live folding, checkpoint + tail equals full replay, and a log
cut anywhere inside its last record recovers to exactly the records before it.

These run the real log on disk (tmp directories, real fsyncs): examples are fewer than in the pure properties.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from aether.core.events import (
    Event,
    PendingUpsert,
    Record,
    UpsertBatch,
    decode_event,
    decode_for_fold,
    decode_upsert_batch,
    encode_event,
)
from aether.core.reduce import fold_all, fold_many
from aether.core.state import EMPTY_STATE, decode_state, encode_state, state_digest
from aether.log import open_event_log, recover_log, scan_log
from aether.plane.replay import replay_log
from property_tests.strategies import records, upsert_runs

DISK_SETTINGS = settings(max_examples=40, deadline=None)


def _write(directory: Path, sequence: Sequence[Record], *, checkpoint_at: int | None = None) -> None:
    """Append `sequence` through the real writer (group commit), with a checkpoint after `checkpoint_at` records."""

    async def write() -> None:
        async with open_event_log(directory) as log:
            split = len(sequence) if checkpoint_at is None else checkpoint_at
            if split:
                await log.append_many([encode_event(record.event) for record in sequence[:split]])
            if checkpoint_at is not None:
                state = fold_all(EMPTY_STATE, sequence[:checkpoint_at])
                await log.write_checkpoint(seq=state.seq, payload=encode_state(state))
            if sequence[split:]:
                await log.append_many([encode_event(record.event) for record in sequence[split:]])

    trio.run(write)


@DISK_SETTINGS
@given(records())
def test_replaying_the_log_gives_the_state_folded_live(sequence: tuple[Record, ...]) -> None:
    """(a) Written to disk and replayed, a sequence folds to the state (and digest) folded in memory."""
    with tempfile.TemporaryDirectory() as raw:
        _write(Path(raw) / "log", sequence)
        replayed = replay_log(Path(raw) / "log").state
    live = fold_all(EMPTY_STATE, sequence)
    assert replayed == live
    assert state_digest(replayed) == state_digest(live)


@settings(max_examples=100, deadline=None)
@given(records())
def test_checkpoint_plus_tail_equals_full_replay_at_every_position(sequence: tuple[Record, ...]) -> None:
    """(b) For every position, the checkpointed state (through its codec) plus the tail folds to the full state."""
    full = fold_all(EMPTY_STATE, sequence)
    for position in range(len(sequence) + 1):
        checkpoint = decode_state(encode_state(fold_all(EMPTY_STATE, sequence[:position])))
        assert fold_all(checkpoint, sequence[position:]) == full


@DISK_SETTINGS
@given(records(), st.data())
def test_replay_starts_from_a_real_checkpoint_and_folds_only_the_tail(
    sequence: tuple[Record, ...], data: st.DataObject
) -> None:
    """(b) On disk: replay uses the checkpoint at the drawn position, folds only the tail, and agrees."""
    position = data.draw(st.integers(0, len(sequence)))
    with tempfile.TemporaryDirectory() as raw:
        _write(Path(raw) / "log", sequence, checkpoint_at=position)
        replayed = replay_log(Path(raw) / "log")
    assert replayed.checkpoint_seq == position
    assert replayed.records_folded == len(sequence) - position
    assert replayed.state == fold_all(EMPTY_STATE, sequence)


@settings(max_examples=25, deadline=None)
@given(records().filter(bool))
def test_a_log_cut_inside_its_last_record_recovers_to_the_records_before_it(
    sequence: tuple[Record, ...],
) -> None:
    """(e) Truncated at every byte offset of its last record, the log recovers to exactly the earlier records."""
    before_last = fold_all(EMPTY_STATE, sequence[:-1])
    with tempfile.TemporaryDirectory() as raw:
        directory = Path(raw) / "log"
        _write(directory, sequence)
        last = list(scan_log(directory))[-1]
        whole = last.segment.read_bytes()
        for cut in range(last.offset, len(whole)):
            last.segment.write_bytes(whole[:cut])
            report = recover_log(directory)
            assert report.last_seq == len(sequence) - 1
            assert report.cut is None if cut == last.offset else report.cut is not None
            if report.cut is not None:
                assert (report.cut.offset, report.cut.bytes_cut) == (last.offset, cut - last.offset)
            assert last.segment.read_bytes() == whole[: last.offset]
            assert replay_log(directory).state == before_last


@settings(max_examples=200, deadline=None)
@given(records())
def test_folding_unbuilt_upserts_gives_the_state_of_decoded_events(sequence: tuple[Record, ...]) -> None:
    """Replay's path (`decode_for_fold`: endpoint upserts left unbuilt as `PendingUpsert`, built only for the last
    upsert of each endpoint in a run) folds the encoded records to the state `decode_event` + `fold_many` gives,
    byte for byte."""
    payloads = [(record.seq, encode_event(record.event)) for record in sequence]
    lazy = fold_many(EMPTY_STATE, ((seq, decode_for_fold(payload)) for seq, payload in payloads))
    built = fold_many(EMPTY_STATE, ((seq, decode_event(payload)) for seq, payload in payloads))
    assert lazy == built == fold_all(EMPTY_STATE, sequence)
    assert encode_state(lazy) == encode_state(built)


def _in_batches(
    payloads: Sequence[bytes], size: int
) -> list[tuple[int, Event | PendingUpsert | UpsertBatch]]:
    """Replay's items: each `size` records as one `UpsertBatch` when it decodes as one, else one by one."""
    items: list[tuple[int, Event | PendingUpsert | UpsertBatch]] = []
    for start in range(0, len(payloads), size):
        chunk = payloads[start : start + size]
        batch = decode_upsert_batch(chunk)
        if batch is not None:
            items.append((start + 1, batch))
        else:
            items.extend((start + 1 + index, decode_for_fold(payload)) for index, payload in enumerate(chunk))
    return items


@settings(max_examples=300, deadline=None)
@given(upsert_runs(), st.integers(1, 12))
def test_folding_upsert_batches_gives_the_state_of_decoded_events(
    sequence: tuple[Record, ...], size: int
) -> None:
    """Replay's batch path (`decode_upsert_batch`: runs of upserts decoded as columns, taken by a fold run whole or
    folded record by record) folds the encoded records to the state `decode_event` + `fold_many` gives, byte for
    byte, whatever the batch size."""
    payloads = [encode_event(record.event) for record in sequence]
    batched = fold_many(EMPTY_STATE, _in_batches(payloads, size))
    built = fold_many(EMPTY_STATE, ((seq, decode_event(payload)) for seq, payload in enumerate(payloads, 1)))
    assert batched == built == fold_all(EMPTY_STATE, sequence)
    assert encode_state(batched) == encode_state(built)
