"""xDS: one endpoint change at 10,000 EDS clusters against real Envoy, push → ACK percentiles over 200 pushes.

`bench_xds.py` measures every row with few repeats; this one measures the row a user feels most (one endpoint moves in
a large mesh) often enough for a p99. Delta and SotW run on the same machine in the same run: SotW, which must send
every load assignment by protocol, is the reference. Server CPU is this process's CPU from `set_snapshot` to the ACK.

A third row, the transport, is the floor under the server CPU: the same pushes and ACKs through `aether.rpc` alone
(purerpc, h2, trio), with no xDS work in between, against a peer process that ACKs each push at once. It is what any
server on this stack spends per push and ACK, so the "server CPU <= 5% of the push->ACK" aim can be met only if the
transport's CPU is below 5% of Delta's push->ACK.
"""

from __future__ import annotations

import argparse
import gc
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import purerpc
import trio
from _common import write_results
from bench_xds import (
    GC_CLOCK,
    Push,
    Workload,
    moved_assignment,
    open_loaded_envoy,
    push,
    with_endpoint_moved,
)
from envoy.service.discovery.v3 import discovery_pb2

from aether.core.snapshot import ENDPOINT_TYPE
from aether.rpc import ListenAddress, StreamSender, current_server_stream, serve_grpc
from aether.xds.server import SERVICE_NAME

CLUSTERS = 10_000
PUSHES = 200
P99_AIM_MS = 10.0
SHARE_AIM = 0.05

PEER = Path(__file__).with_name("_xds_ack_peer.py")
"""The transport floor's peer: ACKs each push at once, in a process of its own."""

TRANSPORT_WARMUP = 10
"""Exchanges the transport floor makes before it times any (Delta's pushes follow Envoy's initial load)."""


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(mode: str, workload: Workload, *, clusters: int, pushes: int, work_dir: Path) -> list[Push]:
    """Load `clusters` into a fresh Envoy over `mode`, then time `pushes` one-endpoint changes."""
    snapshot = workload.snapshot(clusters, seq=1)
    measured: list[Push] = []
    async with open_loaded_envoy(snapshot, mode=mode, work_dir=work_dir / mode, loads=[]) as plane:
        current = snapshot
        for step in range(pushes):
            current = with_endpoint_moved(current, index=step * 7919 % clusters, seq=step + 2)
            what = f"{mode}: endpoint change at {clusters:,}"
            measured.append(await push(plane, current, types=(ENDPOINT_TYPE,), what=what))
    return measured


class _Undecoded:
    """The request type of the transport floor's handler: its bytes are kept, not decoded (no xDS work)."""

    def __init__(self) -> None:
        self.data = b""

    def ParseFromString(self, data: bytes) -> None:  # the name purerpc calls
        self.data = data


def _push_bytes(*, clusters: int, step: int) -> bytes:
    """The response a Delta push of measured step `step` carries: one moved CLA, built as the Delta machine does."""
    seq = step + 2
    assignment = moved_assignment(index=step * 7919 % clusters, seq=seq)
    response = discovery_pb2.DeltaDiscoveryResponse(
        type_url=ENDPOINT_TYPE, nonce=f"{seq:x}", system_version_info=f"seq-{seq}"
    )
    assignment.pack_into(response.resources.add(name=assignment.name, version=assignment.digest).resource)
    data: bytes = response.SerializeToString()
    return data


async def measure_transport(*, clusters: int, pushes: int, work_dir: Path) -> list[Push]:
    """Time `pushes` pushes and ACKs through `aether.rpc` alone: the server CPU under any xDS work.

    The handler sends each push's bytes (built beforehand) with the stream's `StreamSender`, as the xDS server
    sends a push, and takes the ACK from its request iterator, undecoded; the peer answers each push at once.
    """
    measured: list[Push] = []

    async def exchange(
        requests: AsyncIterator[_Undecoded],
    ) -> AsyncIterator[discovery_pb2.DeltaDiscoveryResponse]:
        stream = current_server_stream()
        assert stream is not None, "served by aether.rpc.serve_grpc"
        sender = StreamSender(stream)
        incoming = aiter(requests)
        await anext(incoming)  # the subscription
        for step in range(-TRANSPORT_WARMUP, pushes):
            data = _push_bytes(clusters=clusters, step=step % pushes)
            gc_before = GC_CLOCK.seconds
            cpu_before = time.process_time()
            start = time.perf_counter()
            if not sender.send_nowait((data,)):
                raise RuntimeError("transport: a push did not fit the peer's flow-control window")
            await anext(incoming)
            if step >= 0:
                measured.append(
                    _exchange(start=start, cpu_before=cpu_before, gc_seconds=GC_CLOCK.seconds - gc_before)
                )
        # purerpc's handler is an async generator; this one sends with `sender` only.
        nothing: tuple[discovery_pb2.DeltaDiscoveryResponse, ...] = ()
        for response in nothing:
            yield response

    service = purerpc.Service(SERVICE_NAME)
    service.add_method(
        "DeltaAggregatedResources",
        exchange,
        purerpc.RPCSignature(
            purerpc.Cardinality.STREAM_STREAM, _Undecoded, discovery_pb2.DeltaDiscoveryResponse
        ),
    )
    path = work_dir / "transport.sock"
    async with trio.open_nursery() as nursery:
        await nursery.start(_serve, service, path)
        # The peer exits once the handler returns and the stream ends.
        await trio.run_process([sys.executable, str(PEER), str(path)])
        nursery.cancel_scope.cancel()
    if len(measured) != pushes:
        raise RuntimeError(f"transport: the peer left after {len(measured)} of {pushes} pushes")
    return measured


async def measure_socket(*, clusters: int, pushes: int, work_dir: Path) -> list[Push]:
    """Time `pushes` pushes and ACKs as bare bytes over a trio socket: the floor under the transport.

    Each push's bytes go out in one `send`, and an ACK's worth of bytes comes back in one `recv`, from a peer that
    answers each read at once: what any trio server spends per push and ACK, before HTTP/2 or gRPC.
    """
    measured: list[Push] = []
    path = work_dir / "bare.sock"
    listener = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with listener:
        await listener.bind(str(path))
        listener.listen()
        async with trio.open_nursery() as nursery:
            # The peer exits once the connection closes.
            nursery.start_soon(trio.run_process, [sys.executable, str(PEER), str(path), "--raw"])
            accepted, _ = await listener.accept()
            with accepted:
                for step in range(-TRANSPORT_WARMUP, pushes):
                    data = _push_bytes(clusters=clusters, step=step % pushes)
                    gc_before = GC_CLOCK.seconds
                    cpu_before = time.process_time()
                    start = time.perf_counter()
                    if await accepted.send(data) != len(data):
                        raise RuntimeError("socket: a push did not go out in one send")
                    if not await accepted.recv(65_536):
                        raise RuntimeError("socket: the peer closed the connection")
                    if step >= 0:
                        measured.append(
                            _exchange(
                                start=start, cpu_before=cpu_before, gc_seconds=GC_CLOCK.seconds - gc_before
                            )
                        )
    return measured


def _exchange(*, start: float, cpu_before: float, gc_seconds: float) -> Push:
    """One exchange of a floor, from its `perf_counter` and `process_time` at the start (no publish, no ACK read)."""
    return Push(
        seconds=time.perf_counter() - start,
        cpu_seconds=time.process_time() - cpu_before,
        publish_seconds=0.0,
        receive_seconds=0.0,
        gc_seconds=gc_seconds,
    )


async def _serve(service: purerpc.Service, path: Path, *, task_status: trio.TaskStatus[Any]) -> None:
    await serve_grpc([service], listen=ListenAddress.unix(path), task_status=task_status)


def _figures(pushes: list[Push]) -> dict[str, float]:
    seconds = [one.seconds * 1000 for one in pushes]
    cpu = [one.cpu_seconds * 1000 for one in pushes]
    publish = [one.publish_seconds * 1000 for one in pushes]
    receive = [one.receive_seconds * 1000 for one in pushes]
    other = [
        one.cpu_seconds * 1000 - one.publish_seconds * 1000 - one.receive_seconds * 1000 for one in pushes
    ]
    return {
        "pushes": len(pushes),
        "p50_ms": round(statistics.median(seconds), 3),
        "p99_ms": round(_percentile(seconds, 0.99), 3),
        "max_ms": round(max(seconds), 3),
        "server_cpu_p50_ms": round(statistics.median(cpu), 3),
        "server_cpu_p99_ms": round(_percentile(cpu, 0.99), 3),
        "publish_p50_ms": round(statistics.median(publish), 3),
        "publish_p99_ms": round(_percentile(publish, 0.99), 3),
        "receive_p50_ms": round(statistics.median(receive), 3),
        "grpc_and_loop_p50_ms": round(statistics.median(other), 3),
        "server_cpu_p99_over_p99": round(_percentile(cpu, 0.99) / _percentile(seconds, 0.99), 4),
        "server_share_p50": round(statistics.median(cpu) / statistics.median(seconds), 4),
        "server_cpu_p50_over_p99_aim": round(statistics.median(cpu) / P99_AIM_MS, 4),
    }


async def run(clusters: int, pushes: int) -> dict[str, list[Push]]:
    workload = Workload.build(clusters)
    with tempfile.TemporaryDirectory(prefix="bench-xds-change-") as name:
        rows = {
            mode: await measure(mode, workload, clusters=clusters, pushes=pushes, work_dir=Path(name))
            for mode in ("delta", "sotw")
        }
        rows["transport"] = await measure_transport(clusters=clusters, pushes=pushes, work_dir=Path(name))
        rows["socket"] = await measure_socket(clusters=clusters, pushes=pushes, work_dir=Path(name))
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=CLUSTERS)
    parser.add_argument("--pushes", type=int, default=PUSHES)
    arguments = parser.parse_args()
    gc.callbacks.append(GC_CLOCK)
    try:
        modes = trio.run(run, arguments.clusters, arguments.pushes)
    finally:
        gc.callbacks.remove(GC_CLOCK)
    figures: dict[str, Any] = {"clusters": arguments.clusters}
    print(
        f"xds: 1 endpoint change at {arguments.clusters:,} EDS clusters, {arguments.pushes} pushes per mode"
    )
    print(
        f"  {'':8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'CPU p50':>9}{'CPU p99':>9}{'publish':>9}{'ACK read':>9}"
        f"{'gRPC+loop':>10}{'CPU/p50':>9}"
    )
    for mode, pushes in modes.items():
        row = figures[mode] = _figures(pushes)
        print(
            f"  {mode:<8}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}{row['max_ms']:>9.2f}"
            f"{row['server_cpu_p50_ms']:>9.2f}{row['server_cpu_p99_ms']:>9.2f}{row['publish_p50_ms']:>9.3f}"
            f"{row['receive_p50_ms']:>9.3f}{row['grpc_and_loop_p50_ms']:>10.3f}{row['server_share_p50']:>9.1%}"
        )
    print("  (CPU columns are medians unless marked p99; gRPC+loop = server CPU less publish and ACK read)")
    print(
        "  (transport: the same pushes and ACKs through aether.rpc alone, no xDS work, against a purerpc peer;"
    )
    print(
        "   socket: the same bytes over a bare trio socket, one send and one recv, against a peer process too)"
    )
    delta, sotw = figures["delta"], figures["sotw"]
    for floor in ("transport", "socket"):
        cpu = figures[floor]["server_cpu_p50_ms"]
        figures[f"{floor}_cpu_p50_over_delta_p50"] = round(cpu / delta["p50_ms"], 4)
        figures[f"{floor}_cpu_p50_over_delta_cpu_p50"] = round(cpu / delta["server_cpu_p50_ms"], 4)
    figures["delta_p99_over_sotw_p99"] = round(delta["p99_ms"] / sotw["p99_ms"], 3)
    print(f"  delta p99 / sotw p99 (the reference, same run): {figures['delta_p99_over_sotw_p99']:.3f}")
    print(
        "  the <= 5% figure: server CPU per push / push->ACK latency, medians over the pushes (CPU/p50 above):"
        f" delta {delta['server_share_p50']:.1%}; at p99 (CPU p99 / p99) {delta['server_cpu_p99_over_p99']:.1%};"
        f" CPU p50 / the {P99_AIM_MS:.0f} ms p99 aim {delta['server_cpu_p50_over_p99_aim']:.1%}"
    )
    print(
        f"  aim: delta p99 <= {P99_AIM_MS:.0f} ms: {'met' if delta['p99_ms'] <= P99_AIM_MS else 'NOT met'};"
        f" server CPU <= {SHARE_AIM:.0%} of the push->ACK (medians):"
        f" {'met' if delta['server_share_p50'] <= SHARE_AIM else 'NOT met'}"
    )
    print(
        "  the floors under it, server CPU per push and ACK (p50) against delta's push->ACK p50:"
        f" the transport {figures['transport']['server_cpu_p50_ms']:.3f} ms"
        f" ({figures['transport_cpu_p50_over_delta_p50']:.1%}), a bare trio socket"
        f" {figures['socket']['server_cpu_p50_ms']:.3f} ms ({figures['socket_cpu_p50_over_delta_p50']:.1%})"
    )
    write_results("xds_change", figures)


if __name__ == "__main__":
    sys.exit(main())
