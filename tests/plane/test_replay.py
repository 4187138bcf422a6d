"""`aether.plane.replay`: folding a log directory from its newest usable checkpoint."""

from __future__ import annotations

from pathlib import Path

import attrs
import immutables
import pytest
import trio

from aether.core.events import Record, encode_event
from aether.core.reduce import fold_all
from aether.core.state import EMPTY_STATE, State, encode_state
from aether.log import open_event_log
from aether.log.frame import FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE
from aether.plane.replay import UndecodableRecordError, replay_log
from aether.testing import endpoint_added, make_endpoint, registry_service_added


def _records() -> list[Record]:
    events = [
        registry_service_added("default/web", version="1"),
        endpoint_added(make_endpoint(), version="2"),
    ]
    return [Record(seq=seq, event=event) for seq, event in enumerate(events, 1)]


def _write(directory: Path, *, checkpoint: State) -> None:
    async def write() -> None:
        async with open_event_log(directory) as log:
            await log.append_many([encode_event(record.event) for record in _records()])
            await log.write_checkpoint(seq=2, payload=encode_state(checkpoint))

    trio.run(write)


def test_replay_starts_from_a_sound_checkpoint(tmp_path: Path) -> None:
    """A checkpoint at the last record is used and nothing more is folded."""
    expected = fold_all(EMPTY_STATE, _records())
    _write(tmp_path / "log", checkpoint=expected)
    replay = replay_log(tmp_path / "log")
    assert (replay.state, replay.checkpoint_seq, replay.records_folded, replay.skipped_checkpoints) == (
        expected,
        2,
        0,
        (),
    )
    assert replay.last_observed_at == _records()[-1].event.observed_at


def test_a_checkpoint_that_breaks_an_invariant_is_skipped_with_its_reason(tmp_path: Path) -> None:
    """A checkpoint whose state holds endpoints outside the catalog is not used: replay folds from seq 1."""
    expected = fold_all(EMPTY_STATE, _records())
    broken = attrs.evolve(expected, registry=attrs.evolve(expected.registry, services=immutables.Map()))
    _write(tmp_path / "log", checkpoint=broken)
    replay = replay_log(tmp_path / "log")
    assert (replay.state, replay.checkpoint_seq, replay.records_folded) == (expected, None, 2)
    assert [(item.path.name, item.reason) for item in replay.skipped_checkpoints] == [
        ("00000000000000000002.ckpt", "endpoints of 'default/web' but the service is not in the catalog")
    ]


def test_a_record_that_does_not_decode_amid_endpoint_upserts_is_named_with_file_and_offset(
    tmp_path: Path,
) -> None:
    """Replay decodes runs of upserts at once; a run holding a record that does not decode is read record by record,
    and the error names that record's segment, offset and seq."""
    events = [registry_service_added("default/web", version="1")] + [
        endpoint_added(make_endpoint(ip=f"10.0.0.{index}"), version=str(index + 1)) for index in range(1, 6)
    ]
    payloads = [encode_event(event) for event in events]
    payloads[4] = b"\xff\xff"

    async def write() -> None:
        async with open_event_log(tmp_path) as log:
            await log.append_many(payloads)

    trio.run(write)
    offset = SEGMENT_HEADER_SIZE + sum(FRAME_HEADER_SIZE + len(payload) for payload in payloads[:4])
    with pytest.raises(UndecodableRecordError) as caught:
        replay_log(tmp_path)
    assert (caught.value.seq, caught.value.offset) == (5, offset)
    assert caught.value.segment.parent == tmp_path / "segments"
    assert "not an aether.log.v1.Event" in str(caught.value)


def test_a_run_of_endpoint_upserts_replays_to_the_state_folded_live(tmp_path: Path) -> None:
    """Upserts of one kind in a row (decoded as one batch) and a stale one among them fold as one by one."""
    events = [registry_service_added("default/web", version="1")] + [
        endpoint_added(make_endpoint(ip=f"10.0.0.{index % 4}", weight=index + 1), version=str(version))
        for index, version in enumerate([2, 3, 3, 5, 4, 6, 7])
    ]
    records = [Record(seq=seq, event=event) for seq, event in enumerate(events, 1)]

    async def write() -> None:
        async with open_event_log(tmp_path) as log:
            await log.append_many([encode_event(record.event) for record in records])

    trio.run(write)
    replayed = replay_log(tmp_path)
    assert replayed.state == fold_all(EMPTY_STATE, records)
    assert replayed.records_folded == len(records)
    assert replayed.last_observed_at == events[-1].observed_at
