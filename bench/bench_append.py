"""Benchmark: event log append throughput with group commit, against one fsync per frame.

Run ``python bench/bench_append.py``. It appends ~100-byte payloads from 1, 16 and 256 concurrent
trio tasks for a few seconds each, and measures, in the same run and directory, the raw rate of
``os.write`` + ``os.fdatasync`` of one frame per sync (the sync the log uses) as the reference. A single
appender's latency percentiles are printed against the reference's own per-sync latency: the difference is the
log's overhead (framing, the hand-off to the worker thread and back). A last row has the 256 appenders hand
16 events per call (``append_many``, as the journal hands its batches): each appender's wake-up then carries 16
events, where one per call is bound by trio waking each task. CPU time per event is printed for every row (it
moves less than events/s on a shared machine). Figures are printed and written to ``bench/results/append.json``.
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
from pathlib import Path
from typing import Any

import trio
import trio.lowlevel

from aether.log import open_event_log
from aether.log.frame import encode_frame, encode_segment_header

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


async def measure_log(
    directory: Path, *, appenders: int, seconds: float, per_call: int = 1
) -> dict[str, Any]:
    """Append from ``appenders`` concurrent tasks until the time is up, each call `append` of one payload, or with
    ``per_call`` > 1 `append_many` of that many (a source handing a burst whole, as the journal does)."""
    latencies: list[float] = []
    burst = [PAYLOAD] * per_call

    async def append_until(deadline: float) -> None:
        while trio.current_time() < deadline:
            began = time.perf_counter()
            if per_call == 1:
                await log.append(PAYLOAD)
            else:
                await log.append_many(burst)
            latencies.append(time.perf_counter() - began)

    async with open_event_log(directory) as log:
        cpu_start = time.process_time()
        start = time.perf_counter()
        deadline = trio.current_time() + seconds
        async with trio.open_nursery() as nursery:
            for _ in range(appenders):
                nursery.start_soon(append_until, deadline)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        statistics = log.statistics()
    return {
        "appenders": appenders,
        "per_call": per_call,
        "cpu_us_per_event": cpu / statistics.appends * 1e6,
        "events": statistics.appends,
        "batches": statistics.batches,
        "fsyncs": statistics.fsyncs,
        "seconds": elapsed,
        "events_per_second": statistics.appends / elapsed,
        "fsyncs_per_second": statistics.fsyncs / elapsed,
        "events_per_batch": statistics.appends / statistics.batches,
        "latency": _percentiles(latencies),
    }


async def measure_trio_floor(*, appenders: int, seconds: float) -> dict[str, float]:
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

    start = time.perf_counter()
    deadline = trio.current_time() + seconds
    async with trio.open_nursery() as nursery:
        nursery.start_soon(committer, deadline)
        for _ in range(appenders):
            nursery.start_soon(waiter, deadline)
    elapsed = time.perf_counter() - start
    return {"appenders": appenders, "events_per_second": events / elapsed}


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
        f"trio floor: {floor['appenders']} tasks waking once per round, no I/O: {floor['events_per_second']:,.0f}/s"
        f" (the log's {busiest['events_per_second'] / floor['events_per_second']:.2f} of it)"
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
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {arguments.output}")


if __name__ == "__main__":
    main()
