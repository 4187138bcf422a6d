"""Garbage-collector pacing for a long-running registrar: no full collection in the middle of a fan-out.

CPython's full (generation 2) collection walks every tracked object. With a thousand agent connections it took up
to 180 ms here, during which no watcher is served; it set the fan-out p99 (180 ms, against 30 ms without it,
`bench/bench_registrar.py`). Almost everything the registrar holds is long-lived (the immutable registry, the
connections), so `serve_gc_pacing` keeps full collections off the hot path: every `FREEZE_INTERVAL` it collects
the young generations and freezes the survivors (`gc.freeze`: left out of every later collection), and every
`FULL_INTERVAL` it unfreezes them and runs one full collection, so that cyclic garbage frozen meanwhile (the
objects of closed connections) is reclaimed.
"""

from __future__ import annotations

import gc

import trio

__all__ = ["FREEZE_INTERVAL", "FULL_INTERVAL", "serve_gc_pacing"]

FREEZE_INTERVAL = 1.0
"""Seconds between freezes: young garbage gets a second to die by reference counting or a young collection first,
and a young collection of what one second allocates takes a few milliseconds."""

FULL_INTERVAL = 600.0
"""Seconds between full collections: one pause of a few hundred milliseconds every ten minutes, instead of one
every few seconds under load; memory held by frozen cyclic garbage is bounded by ten minutes of disconnections."""


async def serve_gc_pacing(
    *,
    freeze_interval: float = FREEZE_INTERVAL,
    full_interval: float = FULL_INTERVAL,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Pace the process's garbage collector until cancelled (see the module docstring); unfreeze on the way out.

    Process-wide: run it once per process, in the role that owns the process (`aether registrar`).
    """
    task_status.started()
    since_full = 0.0
    try:
        while True:
            await trio.sleep(freeze_interval)
            since_full += freeze_interval
            if since_full >= full_interval:
                gc.unfreeze()
                gc.collect()
                since_full = 0.0
            else:
                gc.collect(1)
            gc.freeze()
    finally:
        gc.unfreeze()
