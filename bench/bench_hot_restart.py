"""Envoy hot restart under `aether proxy-supervisor` against a cold Envoy restart, under one request loop.

For each hot restart (SIGHUP to the supervisor): the take-over time (from the signal until the new epoch's admin API
says LIVE, its listener inherited) and the requests that failed from the signal until the old epoch had exited; and
every request that failed over the whole run. The reference, measured in the same run on the same bootstrap: a cold
restart (stop Envoy, start a new one, wait until LIVE) under the same load, and the requests it failed.

The load is `aether.testing.fixed_rate` (C, compiled here with the machine's compiler: Debian `gcc`): 250 requests/s
by default (the issue's figure), a fresh connection each (as many clients do), open loop (a request is due at its
time whatever the server does), at most 64 in flight; its achieved rate is printed with the figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
from _common import write_results

from aether.envoy.process import open_envoy
from aether.http1 import http_get
from aether.testing.envoy import direct_response_bootstrap, wait_for
from aether.testing.fixed_rate import LoadResult, compile_fixed_rate, fixed_rate_load
from aether.testing.xds_resources import LOOPBACK, pick_free_port

RATE = 250.0
"""Requests/s of the load (the issue's figure)."""
STEADY = 0.5
"""Seconds of load before the first restart and after the last one."""

STEP_TIMEOUT = 60.0
# A hot restart's parent exits after --parent-shutdown-time-s (2 s here); 60 s only turns a wedge into an error.

POLL = 0.005
# How often the take-over and the old epoch's exit are checked: the figures' resolution.


async def _admin_live(address_file: Path, epoch: int | None) -> bool:
    """The Envoy whose admin address is in `address_file` answers /ready 200 (at restart epoch `epoch`)."""
    try:
        host, _, port = (await trio.Path(address_file).read_text()).strip().rpartition(":")
        ready = await http_get(host, int(port), "/ready", timeout=1)
        if ready.status != 200:
            return False
        if epoch is None:
            return True
        info = json.loads((await http_get(host, int(port), "/server_info", timeout=1)).body)
    except (OSError, ValueError, trio.BrokenResourceError, trio.TooSlowError):
        return False
    return int(info["command_line_options"]["restart_epoch"]) == epoch


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def _until(predicate: Callable[[], Awaitable[bool]]) -> None:
    await wait_for(predicate, timeout=STEP_TIMEOUT, interval=POLL)


def _windows_failed(windows: list[tuple[float, float]], result: LoadResult) -> list[int]:
    return [result.failed_between(start, end) for start, end in windows]


def _load_figures(result: LoadResult) -> dict[str, Any]:
    return {
        "requests": result.started,
        "answered": result.answered,
        "failed": result.failed,
        "late": result.late,
        "waited": result.waited,
        "most_in_flight": result.most_in_flight,
        "requests_per_s": result.rate,
        "failures": [list(item) for item in result.failures[:20]],
    }


async def hot_restarts(
    work: Path, port: int, count: int, load_binary: Path, rate: float
) -> tuple[list[dict[str, float]], LoadResult]:
    """Return each hot restart's figures and the load's figures over the whole run."""
    await trio.Path(work).mkdir(parents=True, exist_ok=True)
    bootstrap = work / "bootstrap.json"
    await trio.Path(bootstrap).write_text(json.dumps(direct_response_bootstrap(port, "hot")))
    runtime = work / "run"
    command = [
        *(sys.executable, "-m", "aether.cli", "proxy-supervisor", "--bootstrap", str(bootstrap)),
        *("--node-name", f"bench-{os.getpid()}", "--runtime-dir", str(runtime)),
        *("--drain-time-s", "1", "--parent-shutdown-time-s", "2", "--", "--concurrency", "1", "-l", "error"),
    ]
    figures = []
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(
            functools.partial(trio.run_process, command, check=False, stdout=subprocess.DEVNULL)
        )
        await _until(functools.partial(_admin_live, runtime / "admin-address", 0))
        windows = []
        async with fixed_rate_load(load_binary, LOOPBACK, port, rate=rate) as load:
            await trio.sleep(STEADY)  # a steady state before the first restart
            for epoch in range(1, count + 1):
                parent = int(await trio.Path(runtime / "envoy.pid").read_text())
                start = time.monotonic()
                process.send_signal(signal.SIGHUP)
                await _until(functools.partial(_admin_live, runtime / "admin-address", epoch))
                taken_over = time.monotonic()

                async def parent_gone(pid: int = parent) -> bool:
                    return not _alive(pid)

                await _until(parent_gone)
                end = time.monotonic()
                windows.append((start, end))
                figures.append({"take_over_s": taken_over - start, "parent_exit_s": end - start})
            await trio.sleep(STEADY)
        assert load.result is not None
        for item, failed in zip(figures, _windows_failed(windows, load.result), strict=True):
            item["failed"] = failed
        process.send_signal(signal.SIGTERM)
        await process.wait()
        nursery.cancel_scope.cancel()
    return figures, load.result


async def cold_restarts(
    work: Path, port: int, count: int, load_binary: Path, rate: float
) -> tuple[list[dict[str, float]], LoadResult]:
    """Return each cold restart's figures and the load's figures over the whole run."""
    bootstrap = direct_response_bootstrap(port, "cold")
    figures, windows = [], []
    envoy_cm = open_envoy(bootstrap, work_dir=work / "cold", log_level="error")
    await envoy_cm.__aenter__()
    try:
        async with fixed_rate_load(load_binary, LOOPBACK, port, rate=rate) as load:
            await trio.sleep(STEADY)
            for _ in range(count):
                start = time.monotonic()
                await envoy_cm.__aexit__(None, None, None)
                envoy_cm = open_envoy(bootstrap, work_dir=work / "cold", log_level="error")
                await envoy_cm.__aenter__()  # returns once /ready is 200
                end = time.monotonic()
                await trio.sleep(0.2)  # requests that were in flight across the gap end within this
                windows.append((start, end + 0.2))
                figures.append({"restart_s": end - start})
            await trio.sleep(STEADY)
    finally:
        await envoy_cm.__aexit__(None, None, None)
    assert load.result is not None
    for item, failed in zip(figures, _windows_failed(windows, load.result), strict=True):
        item["failed"] = failed
    return figures, load.result


async def main(count: int, rate: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="aebhr", dir="/tmp") as directory:
        work = Path(directory)
        load_binary = compile_fixed_rate(work)
        hot, hot_load = await hot_restarts(work / "hot", pick_free_port(), count, load_binary, rate)
        cold, cold_load = await cold_restarts(work, pick_free_port(), count, load_binary, rate)
    take_over = statistics.median(item["take_over_s"] for item in hot)
    cold_restart = statistics.median(item["restart_s"] for item in cold)
    return {
        "restarts": count,
        "rate_asked": rate,
        "hot": hot,
        "cold": cold,
        "hot_load": _load_figures(hot_load),
        "cold_load": _load_figures(cold_load),
        "hot_take_over_median_s": take_over,
        "hot_take_over_max_s": max(item["take_over_s"] for item in hot),
        "hot_failed_total": hot_load.failed,
        "cold_restart_median_s": cold_restart,
        "cold_failed_total": cold_load.failed,
        "take_over_vs_cold_restart": take_over / cold_restart,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 restarts of each kind instead of 20")
    parser.add_argument("--restarts", type=int, help="restarts of each kind (the issue's figure: 20)")
    parser.add_argument("--rate", type=float, default=RATE, help=f"requests/s (default {RATE:.0f})")
    arguments = parser.parse_args()
    if shutil.which("cc") is None and shutil.which("gcc") is None and not os.environ.get("CC"):
        print("bench_hot_restart: skipped: the fixed-rate load needs a C compiler (apt-get install gcc)")
        sys.exit(0)
    figures = trio.run(main, arguments.restarts or (2 if arguments.quick else 20), arguments.rate)
    hot_load, cold_load = figures["hot_load"], figures["cold_load"]
    print(
        f"hot restart: take-over {figures['hot_take_over_median_s'] * 1000:.0f} ms (median of"
        f" {figures['restarts']}; max {figures['hot_take_over_max_s'] * 1000:.0f} ms);"
        f" {hot_load['failed']} failed of {hot_load['requests']} requests at {hot_load['requests_per_s']:.0f}"
        f" requests/s ({hot_load['late']} late, {hot_load['waited']} waited for one of"
        f" {hot_load['most_in_flight']} in flight)"
    )
    print(
        f"cold restart (reference): {figures['cold_restart_median_s'] * 1000:.0f} ms until LIVE;"
        f" {cold_load['failed']} failed of {cold_load['requests']} requests at"
        f" {cold_load['requests_per_s']:.0f} requests/s"
    )
    print(f"take-over / cold restart: {figures['take_over_vs_cold_restart']:.2f}")
    write_results("hot_restart", figures)
