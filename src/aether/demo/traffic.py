"""The demo's traffic: requests by mesh name through the traffic source's outbound listener, and what they met.

Each service gets `concurrency` request loops. A loop keeps one HTTP/1.1 connection to `<source IP>:18081` and
sends `GET /` with `Host: <service>.<namespace>.<meshDomain>`, like an application using the mesh's explicit
proxy port. The answering replica names itself in the `x-upstream-name` header; every exchange becomes a
`Sample`. A failed exchange (no answer, or a status other than 200) is a sample too, with the status 0 when
nothing came back, and the loop reconnects.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence

import attrs
import trio

from aether.demo.upstream import UPSTREAM_NAME_HEADER
from aether.http1 import HttpConnection

__all__ = ["OUTBOUND_PORT", "Connect", "Sample", "Traffic", "split_of"]

OUTBOUND_PORT = 18081
REQUEST_TIMEOUT = 5.0
"""Seconds one request may take, retries through the mesh included."""
PAUSE = 0.004
"""Seconds a loop rests between requests (bounds the load at a few hundred requests per second)."""


Connect = Callable[[], Awaitable[trio.SocketStream]]
"""Opens a connection to the traffic source's outbound listener (inside its network namespace, with `--netns`)."""


@attrs.frozen(kw_only=True)
class Sample:
    """One request and what answered it."""

    at: float
    """When the answer came (the traffic's clock, seconds)."""
    service: str
    backend: str
    """The replica that answered (empty when none did)."""
    status: int
    """The HTTP status; 0 when no response came."""

    @property
    def ok(self) -> bool:
        return self.status == 200


def split_of(samples: Iterable[Sample]) -> dict[str, int]:
    """Count the successful samples per answering replica."""
    counts: collections.Counter[str] = collections.Counter(sample.backend for sample in samples if sample.ok)
    return dict(sorted(counts.items()))


class Traffic:
    """The samples of every loop, newest last (bounded), and running totals."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, keep: int = 50_000) -> None:
        self.clock = clock
        self.samples: collections.deque[Sample] = collections.deque(maxlen=keep)
        self.ok = 0
        self.failed = 0
        """Failed requests since the first one succeeded."""
        self.failed_before_up = 0
        self.first_ok_at: float | None = None

    def record(self, sample: Sample) -> None:
        self.samples.append(sample)
        if sample.ok:
            self.ok += 1
            if self.first_ok_at is None:
                self.first_ok_at = sample.at
        elif self.first_ok_at is None:
            self.failed_before_up += 1  # nothing listens until Envoy has its first configuration
        else:
            self.failed += 1

    def since(self, moment: float, *, service: str | None = None) -> list[Sample]:
        """Return the samples answered after `moment` (of `service` only, when given), oldest first."""
        found: list[Sample] = []
        for sample in reversed(self.samples):
            if sample.at < moment:
                break
            if service is None or sample.service == service:
                found.append(sample)
        found.reverse()
        return found

    async def drive(
        self, *, connect: Connect, services: Sequence[tuple[str, str]], concurrency: int = 2
    ) -> None:
        """Run the request loops until cancelled; `services` holds `(service, authority)` pairs, `connect` opens
        a connection to the traffic source's outbound listener."""
        async with trio.open_nursery() as nursery:
            for service, authority in services:
                for _ in range(concurrency):
                    nursery.start_soon(self._loop, connect, service, authority)

    async def _loop(self, connect: Connect, service: str, authority: str) -> None:
        """Send requests on one keep-alive connection at a time.

        As HTTP clients do, a request that got no answer on a connection already used before (the proxy closed it
        while idle, or drained it after a listener update) is sent again on a fresh connection before it counts
        as failed: only the first request on a connection can tell that the mesh failed.
        """
        headers = [("host", authority), ("user-agent", "aether-demo")]
        while True:
            try:
                with trio.fail_after(REQUEST_TIMEOUT):
                    stream = await connect()
            except (OSError, trio.TooSlowError):
                self.record(Sample(at=self.clock(), service=service, backend="", status=0))
                await trio.sleep(0.2)  # nothing listens yet (Envoy not configured): do not spin
                continue
            async with stream:
                connection = HttpConnection(stream, client=True, peer=f"{service} (through the mesh)")
                fresh = True
                while True:
                    sample = await self._exchange(connection, headers, service)
                    if sample.status == 0 and not fresh:
                        break  # a reused connection that went away: send again on a new one
                    self.record(sample)
                    if sample.status == 0 or not connection.next_cycle():
                        break
                    fresh = False
                    await trio.sleep(PAUSE)

    async def _exchange(
        self, connection: HttpConnection, headers: Sequence[tuple[str, str]], service: str
    ) -> Sample:
        """Send `GET /` and read the answer; a failed exchange is a sample with the status 0."""
        try:
            with trio.fail_after(REQUEST_TIMEOUT):
                await connection.send_request("GET", "/", headers=headers)
                response = await connection.receive_response()
        except (OSError, ValueError, trio.BrokenResourceError, trio.TooSlowError):
            return Sample(at=self.clock(), service=service, backend="", status=0)
        backend = response.headers.get(UPSTREAM_NAME_HEADER, "")
        return Sample(at=self.clock(), service=service, backend=backend, status=response.status)
