"""Envoy hot restart under `aether proxy-supervisor` against a cold Envoy restart, under one request loop.

For each hot restart (SIGHUP to the supervisor): the take-over time (from the signal until the new epoch's admin API
says LIVE, its listener inherited) and the requests that failed from the signal until the old epoch had exited.
The reference, measured in the same run on the same bootstrap and port: a cold restart (stop Envoy, start a new one,
wait until LIVE) with the same request loop running, and the requests it failed. The loop opens a fresh connection
per request (as many clients do), about 200 requests/s.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
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
from aether.testing.request_loop import RequestLoop
from aether.testing.xds_resources import LOOPBACK, pick_free_port

PAUSE = 0.002
# Between two requests of the loop: about 250 requests/s with the request's own time (the load).

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


async def hot_restarts(work: Path, port: int, count: int) -> tuple[list[dict[str, float]], float]:
    """Return each hot restart's figures and the loop's request rate over them all."""
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
        loop = RequestLoop(LOOPBACK, port, pause=PAUSE)
        nursery.start_soon(loop.run)
        await trio.sleep(0.5)  # the loop's first requests: a steady state before the first restart
        began, answered_before = time.perf_counter(), loop.answered
        for epoch in range(1, count + 1):
            parent = int(await trio.Path(runtime / "envoy.pid").read_text())
            start = time.perf_counter()
            process.send_signal(signal.SIGHUP)
            await _until(functools.partial(_admin_live, runtime / "admin-address", epoch))
            taken_over = time.perf_counter()

            async def parent_gone(pid: int = parent) -> bool:
                return not _alive(pid)

            await _until(parent_gone)
            end = time.perf_counter()
            figures.append(
                {
                    "take_over_s": taken_over - start,
                    "parent_exit_s": end - start,
                    "failed": loop.failed_between(start, end),
                }
            )
        rate = (loop.answered - answered_before) / (time.perf_counter() - began)
        process.send_signal(signal.SIGTERM)
        await process.wait()
        nursery.cancel_scope.cancel()
    return figures, rate


async def cold_restarts(work: Path, port: int, count: int) -> list[dict[str, float]]:
    bootstrap = direct_response_bootstrap(port, "cold")
    figures = []
    async with trio.open_nursery() as nursery:
        loop = RequestLoop(LOOPBACK, port, pause=PAUSE)
        envoy_cm = open_envoy(bootstrap, work_dir=work / "cold", log_level="error")
        await envoy_cm.__aenter__()
        nursery.start_soon(loop.run)
        await trio.sleep(0.5)
        for _ in range(count):
            start = time.perf_counter()
            await envoy_cm.__aexit__(None, None, None)
            envoy_cm = open_envoy(bootstrap, work_dir=work / "cold", log_level="error")
            await envoy_cm.__aenter__()  # returns once /ready is 200
            end = time.perf_counter()
            await trio.sleep(0.2)  # requests that were in flight across the gap land within this
            figures.append({"restart_s": end - start, "failed": loop.failed_between(start, end + 0.2)})
        await envoy_cm.__aexit__(None, None, None)
        nursery.cancel_scope.cancel()
    return figures


async def main(count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="aebhr", dir="/tmp") as directory:
        work = Path(directory)
        hot, rate = await hot_restarts(work / "hot", pick_free_port(), count)
        cold = await cold_restarts(work, pick_free_port(), count)
    take_over = statistics.median(item["take_over_s"] for item in hot)
    cold_restart = statistics.median(item["restart_s"] for item in cold)
    return {
        "restarts": count,
        "requests_per_s_during_hot_restarts": rate,
        "hot": hot,
        "cold": cold,
        "hot_take_over_median_s": take_over,
        "hot_failed_total": sum(item["failed"] for item in hot),
        "cold_restart_median_s": cold_restart,
        "cold_failed_total": sum(item["failed"] for item in cold),
        "take_over_vs_cold_restart": take_over / cold_restart,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 restarts of each kind instead of 5")
    parser.add_argument("--restarts", type=int, help="restarts of each kind (the issue's figure: 20)")
    arguments = parser.parse_args()
    figures = trio.run(main, arguments.restarts or (2 if arguments.quick else 5))
    print(
        f"hot restart: take-over {figures['hot_take_over_median_s'] * 1000:.0f} ms (median of"
        f" {figures['restarts']}), {figures['hot_failed_total']} failed requests"
        f" at {figures['requests_per_s_during_hot_restarts']:.0f} requests/s"
    )
    print(
        f"cold restart (reference): {figures['cold_restart_median_s'] * 1000:.0f} ms until LIVE,"
        f" {figures['cold_failed_total']} failed requests"
    )
    print(f"take-over / cold restart: {figures['take_over_vs_cold_restart']:.2f}")
    write_results("hot_restart", figures)
