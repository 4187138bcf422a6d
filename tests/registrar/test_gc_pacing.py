"""GC pacing: survivors are frozen every interval, a full collection reclaims frozen cycles, leaving unfreezes."""

from __future__ import annotations

import gc
import weakref

import trio
import trio.testing

from aether.registrar.gc_pacing import serve_gc_pacing


class _Cycle:
    def __init__(self) -> None:
        self.me = self


async def test_survivors_are_frozen_and_a_full_collection_reclaims_frozen_cycles(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A cycle frozen at 1 s outlives the young collection at 2 s and is reclaimed by the full one at 3 s."""
    del autojump_clock
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: serve_gc_pacing(
                    freeze_interval=1, full_interval=3, task_status=task_status
                )
            )
            cycle = _Cycle()
            alive = weakref.ref(cycle)
            await trio.sleep(1.5)
            assert gc.get_freeze_count() > 0
            del cycle
            await trio.sleep(1)
            assert alive() is not None, "frozen: the young collection at 2 s must not see it"
            await trio.sleep(1)
            assert alive() is None, "the full collection at 3 s reclaims it"
            nursery.cancel_scope.cancel()
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
