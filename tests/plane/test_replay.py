"""`aether.plane.replay`: folding a log directory from its newest usable checkpoint."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import attrs
import immutables
import pytest
import trio

from aether.core.events import Endpoint, Protocol, Record, encode_event
from aether.core.reduce import fold_all
from aether.core.state import EMPTY_STATE, State, decode_state, encode_state, state_to_proto
from aether.log import open_event_log
from aether.log.frame import FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE
from aether.plane.replay import UndecodableRecordError, replay_log
from aether.proto.log.v1 import log_pb2
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


def _write_payload(directory: Path, payload: bytes) -> None:
    async def write() -> None:
        async with open_event_log(directory) as log:
            await log.append_many([encode_event(record.event) for record in _records()])
            await log.write_checkpoint(seq=2, payload=payload)

    trio.run(write)


def _many_endpoints() -> State:
    """The records' state with 300 endpoints more (so its endpoints decode as columns)."""
    state = fold_all(EMPTY_STATE, _records())
    endpoints = {(Protocol.HTTP, f"10.1.{index // 250}.{index % 250}"): index for index in range(300)}
    web = immutables.Map[tuple[Protocol, str], Endpoint](
        {key: make_endpoint(key[1], weight=index + 1) for key, index in endpoints.items()}
    ).update(state.registry.endpoints["default/web"])
    return attrs.evolve(
        state, registry=attrs.evolve(state.registry, endpoints=immutables.Map({"default/web": web}))
    )


def _cut_short(message: log_pb2.State) -> bytes:
    return message.SerializeToString(deterministic=True)[:-7]


def _with_unknown_protocol(message: log_pb2.State) -> bytes:
    message.registry.endpoints[150].protocol = 7  # type: ignore[assignment]
    return message.SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        pytest.param(
            _cut_short,
            r"cannot decode checkpoint state: not an aether\.log\.v1\.State \(.+\)",
            id="truncated",
        ),
        pytest.param(
            _with_unknown_protocol,
            r"cannot decode checkpoint state: enum value 7 is unknown \(written by a newer version\?\)",
            id="unknown-protocol",
        ),
    ],
)
def test_a_checkpoint_whose_state_does_not_decode_is_skipped_and_replay_folds_from_seq_1(
    tmp_path: Path, damage: Callable[[log_pb2.State], bytes], reason: str
) -> None:
    """A checkpoint of many endpoints, its frame sound but its state cut short or holding an enum value this version
    does not know, is skipped with the codec's reason: replay folds the records from seq 1."""
    assert decode_state(encode_state(_many_endpoints())) == _many_endpoints()
    _write_payload(tmp_path / "log", damage(state_to_proto(_many_endpoints())))
    replay = replay_log(tmp_path / "log")
    assert (replay.state, replay.checkpoint_seq, replay.records_folded) == (
        fold_all(EMPTY_STATE, _records()),
        None,
        2,
    )
    assert [item.path.name for item in replay.skipped_checkpoints] == ["00000000000000000002.ckpt"]
    assert re.fullmatch(reason, replay.skipped_checkpoints[0].reason)
