"""Benchmark: event log append throughput with group commit, against one fsync per frame.

Run ``python bench/bench_append.py``. It appends ~100-byte payloads from 1, 16 and 256 concurrent
trio tasks for a few seconds each, and measures, in the same run and directory, the raw rate of
``os.write`` + ``os.fsync`` of one frame per fsync as the reference. Figures are printed and written
to ``bench/results/append.json``.
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

from aether.log import open_event_log
from aether.log.frame import encode_frame, encode_segment_header

# Events are a few hundred bytes at most once encoded; 100 bytes is a small, typical one.
PAYLOAD = b"e" * 100

CONCURRENCY = (1, 16, 256)

# Seconds per measured run: long enough for thousands of fsyncs on a fast disk, short enough
# for the whole benchmark (two reference runs, three log runs) to stay under ~20 seconds.
LOG_SECONDS = 3.0
REFERENCE_SECONDS = 1.5

RESULTS = Path(__file__).parent / "results" / "append.json"


def measure_reference(directory: Path, *, seconds: float) -> dict[str, float]:
    """Write and fsync one frame at a time, the way a log without group commit would."""
    path = directory / "reference.seg"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        os.write(descriptor, encode_segment_header(1))
        os.fsync(descriptor)
        frames = 0
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            frames += 1
            os.write(descriptor, encode_frame(seq=frames, payload=PAYLOAD))
            os.fsync(descriptor)
        elapsed = time.perf_counter() - start
    finally:
        os.close(descriptor)
        path.unlink()
    return {"frames": frames, "seconds": elapsed, "frames_per_second": frames / elapsed}


async def measure_log(directory: Path, *, appenders: int, seconds: float) -> dict[str, float]:
    """Append from ``appenders`` concurrent tasks until the time is up."""

    async def append_until(deadline: float) -> None:
        while trio.current_time() < deadline:
            await log.append(PAYLOAD)

    async with open_event_log(directory) as log:
        start = time.perf_counter()
        deadline = trio.current_time() + seconds
        async with trio.open_nursery() as nursery:
            for _ in range(appenders):
                nursery.start_soon(append_until, deadline)
        elapsed = time.perf_counter() - start
        statistics = log.statistics()
    return {
        "appenders": appenders,
        "events": statistics.appends,
        "batches": statistics.batches,
        "fsyncs": statistics.fsyncs,
        "seconds": elapsed,
        "events_per_second": statistics.appends / elapsed,
        "fsyncs_per_second": statistics.fsyncs / elapsed,
        "events_per_batch": statistics.appends / statistics.batches,
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
        after = measure_reference(directory, seconds=REFERENCE_SECONDS)
    reference_rate = (before["frames_per_second"] + after["frames_per_second"]) / 2

    print(f"reference: os.write + os.fsync per frame: {reference_rate:,.0f} frames/s (= fsyncs/s)")
    print(f"  before {before['frames_per_second']:,.0f}/s, after {after['frames_per_second']:,.0f}/s")
    header = ["appenders", "events/s", "fsyncs/s", "events/batch", "events/s ÷ ref", "fsyncs/s ÷ ref"]
    print("  ".join(f"{title:>14}" for title in header))
    for run in runs:
        run["events_per_second_ratio"] = run["events_per_second"] / reference_rate
        run["fsyncs_per_second_ratio"] = run["fsyncs_per_second"] / reference_rate
        cells = [
            f"{run['appenders']:>14}",
            f"{run['events_per_second']:>14,.0f}",
            f"{run['fsyncs_per_second']:>14,.0f}",
            f"{run['events_per_batch']:>14,.1f}",
            f"{run['events_per_second_ratio']:>14.2f}",
            f"{run['fsyncs_per_second_ratio']:>14.2f}",
        ]
        print("  ".join(cells))

    results: dict[str, Any] = {
        "benchmark": "append",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "payload_bytes": len(PAYLOAD),
        "reference": {
            "description": "os.write + os.fsync of one frame per fsync",
            "frames_per_second": reference_rate,
            "before": before,
            "after": after,
        },
        "runs": runs,
    }
    arguments.output.parent.mkdir(parents=True, exist_ok=True)
    arguments.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {arguments.output}")


if __name__ == "__main__":
    main()
