"""The embedded backend: the registry survives reopening, from records alone or from a checkpoint plus records."""

from __future__ import annotations

from pathlib import Path

import pytest

from aether.log import open_event_log
from aether.registrar.backends.embedded import open_embedded_backend
from aether.registrar.errors import StoreError
from aether.registrar.snapshot import ChangeKind, Mutation, RegistrySnapshot, apply, resync
from tests.registrar._builders import DB, register, unregister

MUTATIONS: list[Mutation] = [
    register("10.0.0.1"),
    register("10.0.0.2"),
    register("10.0.1.1", service=DB),
    register("10.0.0.2", weight=5),
    unregister("10.0.0.1"),
]


async def _store(directory: Path, *, checkpoint_every: int) -> RegistrySnapshot:
    async with open_embedded_backend(directory, checkpoint_every=checkpoint_every) as backend:
        snapshot = await backend.load()
        for mutation in MUTATIONS:
            snapshot, changes = apply(snapshot, mutation)
            await backend.apply(mutation, snapshot=snapshot, changes=changes)
    return snapshot


async def test_reopening_replays_every_record_with_its_history(tmp_path: Path) -> None:
    """Without a checkpoint, the reloaded registry equals the one stored, history included."""
    stored = await _store(tmp_path, checkpoint_every=100)
    async with open_embedded_backend(tmp_path) as backend:
        loaded = await backend.load()
    assert loaded == stored
    assert [change.kind for change in resync(loaded, last_version=3)] == [
        ChangeKind.ENDPOINT_UPDATED,
        ChangeKind.ENDPOINT_REMOVED,
        ChangeKind.SNAPSHOT_COMPLETE,
    ]


async def test_reopening_starts_at_the_newest_checkpoint(tmp_path: Path) -> None:
    """Checkpoints at versions 2 and 4: same endpoints and version 5; history from version 4 on."""
    stored = await _store(tmp_path, checkpoint_every=2)
    async with open_embedded_backend(tmp_path) as backend:
        loaded = await backend.load()
    assert (loaded.version, loaded.sorted_endpoints(), loaded.catalog()) == (
        stored.version,
        stored.sorted_endpoints(),
        stored.catalog(),
    )
    assert (loaded.history_floor, tuple(loaded.history.keys())) == (4, (5,))


async def test_a_record_that_does_not_replay_is_a_store_error(tmp_path: Path) -> None:
    """A log whose record changes nothing (not written by this backend) is refused with the record's seq."""
    async with open_event_log(tmp_path) as log:
        await log.append(b"")
    async with open_embedded_backend(tmp_path) as backend:
        with pytest.raises(
            StoreError, match=r"^registry store '.*': record 1 does not decode: unknown record kind None$"
        ):
            await backend.load()
