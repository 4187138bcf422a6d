"""`RequestLoop`: counts answers, and records a failure (with its time) when nothing answers."""

from __future__ import annotations

import time

import trio

from aether.demo.upstream import open_http_upstream
from aether.testing.envoy import wait_for
from aether.testing.request_loop import RequestLoop


async def test_the_loop_counts_answers_then_failures_once_the_server_is_gone() -> None:
    """Requests answered 200 count as answered; after the server stops, each refused request is a failure.

    The request in flight at `stop()` may fail mid-exchange (the server drops its connection) rather than at
    connect; every request after it finds nothing listening.
    """
    async with open_http_upstream(name="loop") as upstream, trio.open_nursery() as nursery:
        loop = RequestLoop(*upstream.address, pause=0.001)
        nursery.start_soon(loop.run)

        async def answered() -> bool:
            return loop.answered >= 3

        await wait_for(answered, timeout=10)
        assert loop.failures == []
        stopped = time.perf_counter()
        upstream.stop()

        async def failing() -> bool:
            return len(loop.failures) >= 3

        await wait_for(failing, timeout=10)
        nursery.cancel_scope.cancel()

    assert loop.failed_between(stopped, time.perf_counter()) == len(loop.failures)
    assert all("connect" in what for _, what in loop.failures[1:]), loop.failures
