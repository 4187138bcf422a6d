"""The fixed-rate C load (`aether.testing.fixed_rate`): every request answered 200 counts as answered, a refused
connection and another status each count as a failure with its time, and it stops when told."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from aether.demo.upstream import open_http_upstream
from aether.http1 import http_get
from aether.testing.fixed_rate import FixedRateLoad, compile_fixed_rate, fixed_rate_load
from aether.testing.xds_resources import LOOPBACK, pick_free_port
from tests.needs import needs

pytestmark = needs("cc")

RATE = 200.0
SECONDS = 0.5
"""How long a load runs by itself (its own bound), in the tests that wait for it to end."""


@pytest.fixture(scope="module")
def executable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_fixed_rate(tmp_path_factory.mktemp("fixed-rate"))


async def _run_out(load: FixedRateLoad) -> None:
    with trio.fail_after(60):
        await load.process.wait()


async def test_every_answered_request_counts(executable: Path) -> None:
    """Against a server answering 200 (with a length, so the load closes first), nothing fails."""
    async with (
        open_http_upstream(name="fixed") as upstream,
        fixed_rate_load(executable, *upstream.address, rate=RATE, max_seconds=SECONDS) as load,
    ):
        await _run_out(load)

    assert load.result is not None
    assert load.result.started > 0
    assert load.result.answered == load.result.started
    assert (load.result.failed, load.result.failures) == (0, ())
    assert 0 < load.result.most_in_flight <= 64


async def test_a_refused_connection_is_a_failure_with_its_time(executable: Path) -> None:
    """Nothing listens: every request fails, each with the moment (time.monotonic) and the reason."""
    began = time.monotonic()
    async with fixed_rate_load(
        executable, LOOPBACK, pick_free_port(), rate=RATE, max_seconds=SECONDS
    ) as load:
        await _run_out(load)
    ended = time.monotonic()

    assert load.result is not None
    assert load.result.started > 0
    assert load.result.answered == 0
    assert load.result.failed == load.result.started == len(load.result.failures)
    assert {why for _, why in load.result.failures} == {"Connection refused"}
    assert load.result.failed_between(began, ended) == load.result.failed
    assert load.result.failed_between(ended, ended + 1) == 0


async def test_another_status_is_a_failure(executable: Path) -> None:
    """A server answering 503 fails every request, naming the status."""
    port = pick_free_port()

    async def answer(stream: trio.SocketStream) -> None:
        async with stream:
            await stream.receive_some()
            await stream.send_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")

    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_tcp, answer, port)
        async with fixed_rate_load(executable, LOOPBACK, port, rate=RATE, max_seconds=SECONDS) as load:
            await _run_out(load)
        nursery.cancel_scope.cancel()

    assert load.result is not None
    assert load.result.failed == load.result.started > 0
    assert {why for _, why in load.result.failures} == {"status 503"}


async def test_the_load_stops_when_its_block_ends(executable: Path) -> None:
    """A load with an hour to run ends with its block (SIGTERM) and reports, its requests in flight finished."""
    async with (
        open_http_upstream(name="fixed") as upstream,
        fixed_rate_load(executable, *upstream.address, rate=RATE) as load,
    ):
        assert (await http_get(*upstream.address, "/", timeout=10)).status == 200

    assert load.process.returncode == 0
    assert load.result is not None
    assert load.result.failed == 0
    assert load.result.answered == load.result.started
