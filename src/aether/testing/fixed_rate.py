"""A fixed-rate HTTP load (`loadgen/fixed-rate.c`), compiled with the machine's C compiler, for the hand-over
benchmarks and fault loops: requests at a fixed rate whatever the server does, a fresh connection each, at most
`concurrency` in flight, every failure with when it happened.

Why C: a request loop in Python holds about 200 requests/s on this project's two cores while Envoy, the agent and
the supervisor share them, and it slows down exactly when a hand-over makes the server slower, which hides
failures. The C loop is open (request i is due at start + i / rate) and costs a few percent of one core at 250/s.

    executable = compile_fixed_rate(directory)
    async with fixed_rate_load(executable, "127.0.0.1", port, rate=250) as load:
        ...  # the hand-overs
    assert load.result.failed == 0
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import trio

from aether.testing.cni_shim import compile_c

__all__ = ["FIXED_RATE_SOURCE", "FixedRateLoad", "LoadResult", "compile_fixed_rate", "fixed_rate_load"]

FIXED_RATE_SOURCE = Path(__file__).parent / "loadgen" / "fixed-rate.c"
"""The load generator's one source file (libc only; package data)."""

STOP_TIMEOUT = 15.0
"""Seconds the generator may take to finish after SIGTERM: it waits for its requests in flight, 5 s at most each."""


@attrs.frozen(kw_only=True)
class LoadResult:
    """What one run of the load did."""

    started: int
    """Requests started."""
    answered: int
    """Requests answered 200."""
    failed: int
    """Requests refused, reset, closed early, answered another status, or timed out (5 s)."""
    late: int
    """Requests that started more than 10 ms after they were due (the concurrency bound was reached, or the
    generator got no CPU in time on a loaded machine)."""
    waited: int
    """Requests that were due while `concurrency` requests were in flight (the server was slower than the rate)."""
    most_in_flight: int
    """The most requests in flight at once."""
    seconds: float
    """From the first request due until the last one ended."""
    failures: tuple[tuple[float, str], ...]
    """`(time.monotonic() moment, why)` of each failure."""

    @property
    def rate(self) -> float:
        """Requests started per second: the rate the load achieved."""
        return self.started / self.seconds if self.seconds > 0 else 0.0

    def failed_between(self, start: float, end: float) -> int:
        """How many requests failed between the `time.monotonic()` moments `start` and `end`."""
        return sum(1 for moment, _ in self.failures if start <= moment <= end)


@attrs.define(eq=False)
class FixedRateLoad:
    """A running load; `result` is set once its `fixed_rate_load` block has exited."""

    process: trio.Process
    result: LoadResult | None = None


def compile_fixed_rate(directory: Path, *, name: str = "fixed-rate") -> Path:
    """Compile the load generator into `directory`/`name` and return its path.

    Raises:
        FileNotFoundError: no C compiler (`gcc` on Debian; or set CC).
        subprocess.CalledProcessError: the compiler refused the source (its stderr in the exception).
    """
    return compile_c(FIXED_RATE_SOURCE, directory / name)


@contextlib.asynccontextmanager
async def fixed_rate_load(
    executable: Path,
    host: str,
    port: int,
    *,
    rate: float,
    concurrency: int = 64,
    host_header: str | None = None,
    max_seconds: float = 3600.0,
) -> AsyncIterator[FixedRateLoad]:
    """Run the load at `rate` requests/s against `host:port` (an IPv4 address) for the block's duration (at most
    `max_seconds`: `await load.process.wait()` in the block runs it that long); on exit the load stops, finishes
    its requests in flight and its figures are in `.result`.

    Resource handling:
        The generator is stopped (SIGTERM, SIGKILL after `STOP_TIMEOUT`) and reaped on every exit, also when the
        block raises or is cancelled; `.result` is then left None.
    """
    command = [
        str(executable),
        *(host, str(port), repr(float(rate)), repr(float(max_seconds)), str(concurrency)),
        host_header or f"{host}:{port}",
    ]
    process = await trio.lowlevel.open_process(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    load = FixedRateLoad(process=process)
    output = bytearray()
    assert process.stdout is not None

    async def read_output() -> None:
        assert process.stdout is not None
        while chunk := await process.stdout.receive_some():
            output.extend(chunk)

    try:
        # Its first byte (a newline) says it runs and handles SIGTERM: a stop before that would kill it unreported.
        with trio.fail_after(STOP_TIMEOUT):
            output.extend(await process.stdout.receive_some())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_output)
            yield load
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
            with trio.fail_after(STOP_TIMEOUT):
                await process.wait()
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"the fixed-rate load exited with status {process.returncode}: {bytes(output)!r}")
    document = json.loads(bytes(output))
    load.result = LoadResult(
        started=document["started"],
        answered=document["answered"],
        failed=document["failed"],
        late=document["late"],
        waited=document["waited"],
        most_in_flight=document["most_in_flight"],
        seconds=document["seconds"],
        failures=tuple((float(moment), str(why)) for moment, why in document["failures"]),
    )
