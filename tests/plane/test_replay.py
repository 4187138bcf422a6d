"""`aether.plane.replay`: folding a log directory from its newest usable checkpoint."""

from __future__ import annotations

from pathlib import Path

import attrs
import immutables
import trio

from aether.core.events import Record, encode_event
from aether.core.reduce import fold_all
from aether.core.state import EMPTY_STATE, State, encode_state
from aether.log import open_event_log
from aether.plane.replay import replay_log
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
