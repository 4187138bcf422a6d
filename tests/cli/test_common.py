"""`run_until_stopped`: SIGTERM and SIGINT unwind a role like a cancellation, so its cleanup runs and it exits
normally."""

from __future__ import annotations

import os
import signal

import pytest
import trio
import trio.lowlevel

from aether.cli.common import run_until_stopped


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_cancels_main_and_its_cleanup_runs(stop: signal.Signals) -> None:
    """The role's `finally` runs (Python's default SIGTERM would skip it, its SIGINT would raise anywhere) and the
    call returns normally; the handlers are put back afterwards."""
    unwound: list[str] = []
    before = signal.getsignal(stop)

    async def main() -> None:
        try:
            os.kill(os.getpid(), stop)
            await trio.sleep_forever()
        finally:
            unwound.append("cleanup")

    run_until_stopped(main)
    assert unwound == ["cleanup"]
    assert signal.getsignal(stop) == before


def test_a_main_that_returns_ends_the_run() -> None:
    """No signal: the run ends when `main` does (the SIGTERM watcher does not keep it alive)."""
    done: list[bool] = []

    async def main() -> None:
        await trio.lowlevel.checkpoint()
        done.append(True)

    run_until_stopped(main)
    assert done == [True]
