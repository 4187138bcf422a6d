"""The cost of telemetry: changes through the journal (append, fold, projection, publication) and xDS push → ACK
against a real Envoy, with telemetry off, with metrics on, and with metrics and tracing at 100% sampling.

The three modes run in the same process, interleaved round by round (off, metrics, traces, off, ...), and each
figure is the best round: the ratios compare like with like on a noisy machine. Exports go to a real collector in
its own process (rotel, exporting to its blackhole), so the exporters' threads really work while we measure and
only our side of the cost is counted.
Aims (issue 19): metrics on ≤ 5% slower, tracing at 100% ≤ 10% slower.

`--callgrind` measures the changes' instruction counts instead (valgrind's callgrind, every thread of the process,
so the export threads' encoding is counted): each mode runs twice, with N and 2N changes, in its own process
under valgrind, and the difference over N is the instructions of one change, free of start-up and of the
machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio
from _common import write_results

from aether.core.events import Event
from aether.core.project.edge import EdgeOptions, project_edge
from aether.core.snapshot import ROUTE_TYPE, Snapshot
from aether.core.state import State
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import open_envoy
from aether.plane.plane import open_plane
from aether.rpc.listen import ListenAddress
from aether.telemetry import OtlpEndpoint, TelemetryConfig, telemetry_running
from aether.testing import gateway_object_upserted
from aether.testing.gateway_objects import EDGE_LISTENER, edge_gateway_events, gateway_api_object
from aether.testing.otlp_collector import ROTEL_AGENT
from aether.testing.xds_resources import pick_free_port
from aether.xds.protocol import TypeStatus
from aether.xds.server import XdsServer

NODE = "bench-edge"
MODES = ("off", "metrics", "traces")


def _route(index: int) -> Event:
    return gateway_object_upserted(
        gateway_api_object(
            "HTTPRoute",
            "web",
            {
                "parentRefs": [{"name": "edge", "namespace": "edge"}],
                "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": f"/v{index}"}}]}],
            },
        )
    )


def _project(state: State, now: int) -> Snapshot:
    del now
    return project_edge(state, node_id=NODE, options=EdgeOptions(bind="127.0.0.1", cleartext=True))


def _config(mode: str, sink_port: int, *, export_interval: float = 1.0) -> TelemetryConfig:
    return TelemetryConfig(
        service_name="aether-bench",
        endpoint=None if mode == "off" else OtlpEndpoint.parse(f"http://127.0.0.1:{sink_port}"),
        metrics=mode != "off",
        traces=mode == "traces",
        sampling=1.0,
        export_interval=export_interval,
    )


def _acked(server: XdsServer) -> str:
    for stream in server.status():
        for row in stream.types:
            if row.type_url == ROUTE_TYPE and row.status is TypeStatus.SYNCED:
                return row.acked_version
    return ""


async def _changes(work: Path, *, changes: int) -> float:
    """CPU seconds per change (this process, export threads included): one route edit at a time through the
    journal, until its snapshot is published. CPU, not wall time: the fsync of each batch would drown the figure."""
    async with open_plane(work / "log", project=_project) as plane, plane.journal.sender() as send:
        for event in edge_gateway_events(listeners=[{**EDGE_LISTENER, "port": pick_free_port()}]):
            await send.send(event)
        seen = plane.cache.get(NODE)
        start = time.process_time()
        for index in range(changes):
            await send.send(_route(index))
            seen = await plane.cache.wait_newer(NODE, seen=seen)
            while seen.seq < plane.journal.state.seq:  # the gateway's batch may publish first
                seen = await plane.cache.wait_newer(NODE, seen=seen)
        return (time.process_time() - start) / changes


async def _pushes(work: Path, *, pushes: int) -> tuple[float, float]:
    """Seconds per route edit from the event to Envoy's ACK of the new route configuration: wall time, and this
    process's CPU time (the control plane's share: Envoy runs in its own process)."""
    async with open_plane(work / "log", project=_project) as plane, trio.open_nursery() as nursery:
        xds = await nursery.start(
            functools.partial(
                plane.serve,
                xds=ListenAddress.parse(f"127.0.0.1:{pick_free_port()}"),
                admin_socket=work / "admin.sock",
                parts={},
            )
        )
        async with plane.journal.sender() as send:
            for event in edge_gateway_events(listeners=[{**EDGE_LISTENER, "port": pick_free_port()}]):
                await send.send(event)
            await send.send(_route(0))
            bootstrap = ads_bootstrap(node_id=NODE, xds_tcp=(xds.host, xds.port), delta=True)
            async with open_envoy(bootstrap, work_dir=work / "envoy", wait_live=False):
                server = plane.server
                seen = plane.cache.get(NODE)
                with trio.fail_after(60):
                    while not _acked(server):
                        seen = await plane.cache.wait_newer(NODE, seen=seen)
                wall = cpu = 0.0
                for index in range(1, pushes + 1):
                    before = _acked(server)
                    start, start_cpu = time.perf_counter(), time.process_time()
                    await send.send(_route(index))
                    with trio.fail_after(60):
                        while _acked(server) == before:  # the ACK is folded: a new snapshot is published
                            seen = await plane.cache.wait_newer(NODE, seen=seen)
                    wall += time.perf_counter() - start
                    cpu += time.process_time() - start_cpu
        nursery.cancel_scope.cancel()
    return wall / pushes, cpu / pushes


@contextlib.contextmanager
def _blackhole_collector() -> Iterator[int]:
    """Run rotel with its blackhole exporter; yield its OTLP/HTTP port."""
    port = pick_free_port()
    command = [
        str(ROTEL_AGENT),
        "start",
        "--otlp-http-endpoint",
        f"127.0.0.1:{port}",
        "--otlp-grpc-endpoint",
        f"127.0.0.1:{pick_free_port()}",
        "--exporter",
        "blackhole",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("rotel did not start") from None
                time.sleep(0.02)
        yield port
    finally:
        process.terminate()
        process.wait()


def _round(mode: str, sink_port: int, *, changes: int, pushes: int, interval: float) -> dict[str, float]:
    config = _config(mode, sink_port, export_interval=interval)
    with tempfile.TemporaryDirectory() as raw, telemetry_running(config):
        work = Path(raw)
        change = trio.run(functools.partial(_changes, work / "changes", changes=changes))
        push_wall, push_cpu = trio.run(functools.partial(_pushes, work / "pushes", pushes=pushes))
        return {"change_cpu_seconds": change, "push_ack_seconds": push_wall, "push_ack_cpu_seconds": push_cpu}


def _only_changes(mode: str, sink_port: int, changes: int) -> None:
    """One mode's changes in this process (what `--callgrind` runs under valgrind). Metrics are exported once, at
    the end: valgrind slows the process some fifty times, so a periodic export would be fifty times as frequent
    per change as in a real run (spans are all exported: their cost grows with the changes)."""
    config = _config(mode, sink_port, export_interval=600.0)
    with tempfile.TemporaryDirectory() as raw, telemetry_running(config):
        trio.run(functools.partial(_changes, Path(raw) / "changes", changes=changes))


def _instructions(mode: str, sink_port: int, changes: int, work: Path) -> int:
    """Instructions (callgrind's Ir, all threads) of a whole run of `changes` changes in `mode`."""
    out = work / f"callgrind.{mode}.{changes}"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--only",
            mode,
            "--sink-port",
            str(sink_port),
            "--changes",
            str(changes),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    match = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
    assert match is not None, f"no totals in {out}"
    return int(match.group(1))


def _callgrind(changes: int) -> None:
    results: dict[str, Any] = {"changes": changes, "measure": "callgrind Ir per change, all threads"}
    with _blackhole_collector() as port, tempfile.TemporaryDirectory() as raw:
        per_change = {
            mode: (
                _instructions(mode, port, 2 * changes, Path(raw))
                - _instructions(mode, port, changes, Path(raw))
            )
            / changes
            for mode in MODES
        }
    print(f"telemetry cost, callgrind instructions per change ({changes} vs {2 * changes} changes)")
    for mode in MODES:
        ratio = per_change[mode] / per_change["off"]
        print(f"  {mode:8} {per_change[mode]:12,.0f} Ir x{ratio:.3f}")
        results[mode] = {"instructions_per_change": per_change[mode], "ratio": ratio}
    write_results("bench_telemetry_callgrind", results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changes", type=int, default=500)
    parser.add_argument("--pushes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--export-interval",
        type=float,
        default=10.0,
        help="seconds between metric exports (the roles' default, 10; spans leave at least every second)",
    )
    parser.add_argument("--callgrind", action="store_true", help="count instructions per change instead")
    parser.add_argument("--only", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--sink-port", type=int, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.only is not None:
        _only_changes(arguments.only, arguments.sink_port, arguments.changes)
        return
    if arguments.callgrind:
        _callgrind(arguments.changes)
        return
    best: dict[str, dict[str, float]] = {mode: {} for mode in MODES}
    with _blackhole_collector() as port:
        for _ in range(arguments.rounds):
            for mode in MODES:
                figures = _round(
                    mode,
                    port,
                    changes=arguments.changes,
                    pushes=arguments.pushes,
                    interval=arguments.export_interval,
                )
                for key, value in figures.items():
                    best[mode][key] = min(best[mode].get(key, value), value)
    results: dict[str, Any] = {
        "export_interval": arguments.export_interval,
        "changes": arguments.changes,
        "pushes": arguments.pushes,
        "rounds": arguments.rounds,
    }
    off = best["off"]
    print(
        f"telemetry cost, best of {arguments.rounds} rounds ({arguments.changes} changes, {arguments.pushes} pushes,"
        f" metrics exported every {arguments.export_interval:g} s)"
    )
    for mode in MODES:
        ratios = {f"{key}_ratio": value / off[key] for key, value in best[mode].items()}
        print(
            f"  {mode:8} change CPU {best[mode]['change_cpu_seconds'] * 1e3:7.3f} ms x{ratios['change_cpu_seconds_ratio']:.3f}"
            f"   push->ACK {best[mode]['push_ack_seconds'] * 1e3:7.3f} ms x{ratios['push_ack_seconds_ratio']:.3f}"
            f" (CPU {best[mode]['push_ack_cpu_seconds'] * 1e3:6.3f} ms x{ratios['push_ack_cpu_seconds_ratio']:.3f})"
        )
        results[mode] = {**best[mode], **ratios}
    write_results("bench_telemetry", results)


if __name__ == "__main__":
    main()
