"""Benchmark: event log append throughput with group commit, against one fsync per frame.

Run ``python bench/bench_append.py``. It appends ~100-byte payloads from 1, 16 and 256 concurrent
trio tasks for a few seconds each, and measures, in the same run and directory, the raw rate of
``os.write`` + ``os.fdatasync`` of one frame per sync (the sync the log uses) as the reference. A single
appender's latency percentiles are printed against the reference's own per-sync latency: the difference is the
log's overhead (framing, the hand-off to the worker thread and back). A last row has the 256 appenders hand
16 events per call (``append_many``, as the journal hands its batches): each appender's wake-up then carries 16
events, where one per call is bound by trio waking each task. CPU time per event is printed for every row (it
moves less than events/s on a shared machine).

Two references bound the one-event-a-call row from below, in the same run: the trio floor (the same wake-ups with no
log and no I/O) and a bare group commit (`_BareCommit`: the log's frames, one write and one fdatasync per batch, the
next batch started the moment one is durable, appenders woken directly, and none of the log's checks, segments or
error handling), the least any group commit on trio does per event here. Figures are printed and written to
``bench/results/append.json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import outcome
import trio
import trio.lowlevel

from aether.log import open_event_log
from aether.log.frame import encode_frame, encode_frames, encode_segment_header

# Events are a few hundred bytes at most once encoded; 100 bytes is a small, typical one.
PAYLOAD = b"e" * 100

CONCURRENCY = (1, 16, 256)

BURST = 16
"""Events per `append_many` call in the bursts row: a node's pod churn, or the journal's batch under load."""

# Seconds per measured run: long enough for thousands of fsyncs on a fast disk, short enough
# for the whole benchmark (two reference runs, three log runs) to stay under ~20 seconds.
LOG_SECONDS = 3.0
REFERENCE_SECONDS = 1.5

RESULTS = Path(__file__).parent / "results" / "append.json"


def _percentiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)

    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))] * 1e6

    return {"p50_us": at(0.5), "p99_us": at(0.99), "max_us": ordered[-1] * 1e6}


def measure_reference(directory: Path, *, seconds: float) -> dict[str, Any]:
    """Write and sync one frame at a time, the way a log without group commit would."""
    path = directory / "reference.seg"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        os.write(descriptor, encode_segment_header(1))
        os.fsync(descriptor)
        frames = 0
        latencies: list[float] = []
        start = time.perf_counter()
        deadline = start + seconds
        while (began := time.perf_counter()) < deadline:
            frames += 1
            os.write(descriptor, encode_frame(seq=frames, payload=PAYLOAD))
            os.fdatasync(descriptor)
            latencies.append(time.perf_counter() - began)
        elapsed = time.perf_counter() - start
    finally:
        os.close(descriptor)
        path.unlink()
    return {
        "frames": frames,
        "seconds": elapsed,
        "frames_per_second": frames / elapsed,
        "latency": _percentiles(latencies),
    }


@attrs.frozen
class _Driven:
    """What `_append_from` measured: each call's latency, the wall and CPU seconds of the whole run."""

    latencies: list[float]
    seconds: float
    cpu_seconds: float


async def _append_from(appenders: int, seconds: float, call: Callable[[], Awaitable[object]]) -> _Driven:
    """Make `call` from ``appenders`` concurrent tasks, one call after another in each, until the time is up."""
    latencies: list[float] = []

    async def call_until(deadline: float) -> None:
        while trio.current_time() < deadline:
            began = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - began)

    cpu_start = time.process_time()
    start = time.perf_counter()
    deadline = trio.current_time() + seconds
    async with trio.open_nursery() as nursery:
        for _ in range(appenders):
            nursery.start_soon(call_until, deadline)
    return _Driven(
        latencies=latencies,
        seconds=time.perf_counter() - start,
        cpu_seconds=time.process_time() - cpu_start,
    )


def _rates(
    *, appenders: int, per_call: int, events: int, batches: int, fsyncs: int, driven: _Driven
) -> dict[str, Any]:
    return {
        "appenders": appenders,
        "per_call": per_call,
        "cpu_us_per_event": driven.cpu_seconds / events * 1e6,
        "events": events,
        "batches": batches,
        "fsyncs": fsyncs,
        "seconds": driven.seconds,
        "events_per_second": events / driven.seconds,
        "fsyncs_per_second": fsyncs / driven.seconds,
        "events_per_batch": events / batches,
        "latency": _percentiles(driven.latencies),
    }


async def measure_log(
    directory: Path, *, appenders: int, seconds: float, per_call: int = 1
) -> dict[str, Any]:
    """Append from ``appenders`` concurrent tasks until the time is up, each call `append` of one payload, or with
    ``per_call`` > 1 `append_many` of that many (a source handing a burst whole, as the journal does)."""
    burst = [PAYLOAD] * per_call
    async with open_event_log(directory) as log:
        if per_call == 1:
            driven = await _append_from(appenders, seconds, functools.partial(log.append, PAYLOAD))
        else:
            driven = await _append_from(appenders, seconds, functools.partial(log.append_many, burst))
        statistics = log.statistics()
    return _rates(
        appenders=appenders,
        per_call=per_call,
        events=statistics.appends,
        batches=statistics.batches,
        fsyncs=statistics.fsyncs,
        driven=driven,
    )


class _BareCommit:
    """The least a group commit on trio does per event: the reference for the log at one event a call.

    The log's frames, one write and one fdatasync per batch in a worker thread, the next batch started the moment
    the one before it is durable (so one batch fills while the other syncs), and each appender woken directly
    (`trio.lowlevel.reschedule`). Nothing else: no checks, no cancellation, no segments, no rollover.
    """

    def __init__(self, descriptor: int) -> None:
        self._descriptor = descriptor
        self._token = trio.lowlevel.current_trio_token()
        self._payloads: list[bytes] = []
        self._waiters: list[trio.lowlevel.Task] = []
        self._syncing = False
        self._next_seq = 1
        self.appends = 0
        self.batches = 0

    async def append(self, payload: bytes) -> None:
        self._payloads.append(payload)
        self._waiters.append(trio.lowlevel.current_task())
        if not self._syncing:
            self._start()
        await trio.lowlevel.wait_task_rescheduled(_cannot_abort)

    def _start(self) -> None:
        payloads, waiters = self._payloads, self._waiters
        self._payloads, self._waiters = [], []
        first_seq = self._next_seq
        self._next_seq += len(payloads)
        self._syncing = True
        descriptor = self._descriptor

        def write() -> None:  # the worker thread
            os.write(descriptor, encode_frames(first_seq=first_seq, payloads=payloads))
            os.fdatasync(descriptor)

        def durable(result: outcome.Outcome[None]) -> None:  # the worker thread
            self._token.run_sync_soon(self._answer, waiters, result)

        trio.lowlevel.start_thread_soon(write, durable)

    def _answer(self, waiters: list[trio.lowlevel.Task], result: outcome.Outcome[None]) -> None:
        failure = result.error if isinstance(result, outcome.Error) else None
        for task in waiters:
            trio.lowlevel.reschedule(
                task,
                outcome.Value(None) if failure is None else outcome.Error(OSError(f"bare commit: {failure}")),
            )
        self.appends += len(waiters)
        self.batches += 1
        if self._payloads:
            self._start()
        else:
            self._syncing = False


def _cannot_abort(raise_cancel: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


async def measure_bare_commit(directory: Path, *, appenders: int, seconds: float) -> dict[str, Any]:
    """Append one payload a call from ``appenders`` tasks to a `_BareCommit` until the time is up."""
    path = directory / "bare.seg"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        os.write(descriptor, encode_segment_header(1))
        os.fsync(descriptor)
        bare = _BareCommit(descriptor)
        driven = await _append_from(appenders, seconds, functools.partial(bare.append, PAYLOAD))
    finally:
        os.close(descriptor)
        path.unlink()
    return _rates(
        appenders=appenders,
        per_call=1,
        events=bare.appends,
        batches=bare.batches,
        fsyncs=bare.batches,
        driven=driven,
    )


async def measure_trio_floor(*, appenders: int, seconds: float) -> dict[str, Any]:
    """The same waits with no log: each task parks on the pending round's event, a committer task sets it after a
    worker-thread call that does nothing. What trio itself costs per append (its ceiling for group commit)."""
    events = 0
    pending = trio.Event()
    joined = 0

    async def waiter(deadline: float) -> None:
        nonlocal events, joined
        while trio.current_time() < deadline:
            joined += 1
            await pending.wait()
            events += 1

    async def committer(deadline: float) -> None:
        nonlocal pending, joined
        while trio.current_time() < deadline + 0.1:
            await trio.to_thread.run_sync(int)
            if joined:
                current, pending, joined = pending, trio.Event(), 0
                current.set()
            else:
                await trio.lowlevel.checkpoint()

    cpu_start = time.process_time()
    start = time.perf_counter()
    deadline = trio.current_time() + seconds
    async with trio.open_nursery() as nursery:
        nursery.start_soon(committer, deadline)
        for _ in range(appenders):
            nursery.start_soon(waiter, deadline)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    return {
        "appenders": appenders,
        "events_per_second": events / elapsed,
        "cpu_us_per_event": cpu / events * 1e6,
    }


def main() -> None:
    """Run the benchmark, print the figures and write them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--directory", type=Path, help="where to put the temporary logs (default: the temp dir)"
    )
    parser.add_argument(
        "--output", type=Path, default=RESULTS, help=f"JSON results file (default: {RESULTS})"
    )
    arguments = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-append-", dir=arguments.directory) as name:
        directory = Path(name)
        # Reference before and after the log runs, averaged, so drift in the disk's speed shows less.
        before = measure_reference(directory, seconds=REFERENCE_SECONDS)
        runs = [
            trio.run(
                functools.partial(
                    measure_log, directory / f"log-{count}", appenders=count, seconds=LOG_SECONDS
                )
            )
            for count in CONCURRENCY
        ]
        burst_run = trio.run(
            functools.partial(
                measure_log,
                directory / "log-bursts",
                appenders=CONCURRENCY[-1],
                seconds=LOG_SECONDS,
                per_call=BURST,
            )
        )
        bare = trio.run(
            functools.partial(measure_bare_commit, directory, appenders=CONCURRENCY[-1], seconds=LOG_SECONDS)
        )
        after = measure_reference(directory, seconds=REFERENCE_SECONDS)
        floor = trio.run(
            functools.partial(measure_trio_floor, appenders=CONCURRENCY[-1], seconds=REFERENCE_SECONDS)
        )
    reference_rate = (before["frames_per_second"] + after["frames_per_second"]) / 2

    print(f"reference: os.write + os.fdatasync per frame: {reference_rate:,.0f} frames/s (= syncs/s)")
    print(f"  before {before['frames_per_second']:,.0f}/s, after {after['frames_per_second']:,.0f}/s")
    header = [
        "appenders",
        "per call",
        "events/s",
        "fsyncs/s",
        "events/batch",
        "events/s ÷ ref",
        "cpu us/event",
    ]
    print("  ".join(f"{title:>14}" for title in header))
    for run in [*runs, burst_run]:
        run["events_per_second_ratio"] = run["events_per_second"] / reference_rate
        run["fsyncs_per_second_ratio"] = run["fsyncs_per_second"] / reference_rate
        cells = [
            f"{run['appenders']:>14}",
            f"{run['per_call']:>14}",
            f"{run['events_per_second']:>14,.0f}",
            f"{run['fsyncs_per_second']:>14,.0f}",
            f"{run['events_per_batch']:>14,.1f}",
            f"{run['events_per_second_ratio']:>14.2f}",
            f"{run['cpu_us_per_event']:>14.2f}",
        ]
        print("  ".join(cells))
    single = runs[0]["latency"]
    reference_latency = {
        key: (before["latency"][key] + after["latency"][key]) / 2 for key in ("p50_us", "p99_us", "max_us")
    }
    print(
        f"1 appender latency: p50 {single['p50_us']:,.0f} us, p99 {single['p99_us']:,.0f} us"
        f" (reference write+sync p50 {reference_latency['p50_us']:,.0f} us, p99 {reference_latency['p99_us']:,.0f} us;"
        f" overhead at p50 {single['p50_us'] - reference_latency['p50_us']:,.0f} us)"
    )
    busiest = runs[-1]
    print(
        f"trio floor: {floor['appenders']} tasks waking once per round, no I/O: {floor['events_per_second']:,.0f}/s,"
        f" {floor['cpu_us_per_event']:.2f} us CPU per event"
        f" (the log's {busiest['events_per_second'] / floor['events_per_second']:.2f} of it)"
    )
    print(
        f"bare group commit (frames, write, fdatasync, direct wake-ups, one batch filling while one syncs; no checks):"
        f" {bare['events_per_second']:,.0f} events/s, {bare['cpu_us_per_event']:.2f} us CPU per event,"
        f" {bare['events_per_batch']:.0f}-record batches (the log's {busiest['events_per_second'] / bare['events_per_second']:.2f} of it)"
    )
    print(
        f"aim: {busiest['appenders']} appenders >= 200,000 events/s:"
        f" {'met' if busiest['events_per_second'] >= 200_000 else 'NOT met'}"
        f" ({busiest['events_per_second']:,.0f}; the disk's syncs/s here bound it at"
        f" {reference_rate * busiest['events_per_batch']:,.0f} with {busiest['events_per_batch']:.0f}-record batches)"
    )

    print(
        f"{burst_run['appenders']} appenders handing {BURST} events per call (append_many):"
        f" {burst_run['events_per_second']:,.0f} events/s, {burst_run['cpu_us_per_event']:.2f} us CPU per event"
        f" against {busiest['cpu_us_per_event']:.2f} one per call"
    )

    results: dict[str, Any] = {
        "benchmark": "append",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "payload_bytes": len(PAYLOAD),
        "reference": {
            "description": "os.write + os.fdatasync of one frame per sync",
            "frames_per_second": reference_rate,
            "latency": reference_latency,
            "before": before,
            "after": after,
        },
        "runs": runs,
        "bursts": burst_run,
        "trio_floor": floor,
        "bare_commit": bare,
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {arguments.output}")


if __name__ == "__main__":
    main()
