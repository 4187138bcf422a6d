"""Registrar fan-out at scale: 10,000 filtered watchers at 100 changes/s, with 1,000 as the same-run reference.

The registrar runs in a process of its own (`bench_registrar.py serve`), as in production. The watchers live in
`--clients` processes of their own (`bench_fanout.py watch ...`), each one TCP connection and one WatchEndpoints
stream per watcher, as each agent has. A watcher process speaks HTTP/2 itself over non-blocking sockets and one
epoll loop (frames parsed by hand, the big flow-control windows set once, each DATA message decoded by protobuf's
C parser): a few microseconds a message, so the watchers do not bound what is measured, which is the registrar.
Each delivery is stamped with the kernel's receive timestamp of its bytes (SO_TIMESTAMPNS, CLOCK_REALTIME, which
the sender reads too): when it reached the watcher's socket, whenever the watcher process reads it. The watcher
processes poll (they are never woken by a send, so they never preempt the registrar) at a lower priority.

Workload, as `bench_registrar.py`'s: 100 services, each watcher filters 5 of them (a node's dependencies), so a
change reaches about 5% of the watchers (500 of 10,000); each change registers one more endpoint of a known
service, paced at 100 changes/s, each from a task of its own (changes come from many agents), over `--senders`
connections in turn (16 by default: each agent registers over its own connection; one connection makes the
registrar read the registrations one after another, one HTTP/2 event a scheduler pass, so they never arrive
together and its group commit never batches them).

Figures: per change, from the registration sent to the last matching watcher receiving it (p50/p99/max; what the
issue's 1,000-watcher figure measured), and per delivery (each watcher's own latency); the registrar's CPU (cores)
over the run and its RSS per watcher (RSS with the watchers synced less RSS before they connected, over their
count). References in the same run: 1,000 watchers, and the encode-only floor (one change encoded once, in
process). `registrar_trio_thread_us_per_change` is the trio thread's share of the CPU: the send thread
(`aether.rpc.compat.send_soon`) writes the sockets beside it. With BENCH_INLINE_SENDS=1 the registrar writes them
on the trio thread instead (the reference for the send thread, run back to back).
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import attrs
import hpack  # type: ignore[import-untyped]
import purerpc
import trio
from _common import write_results
from bench_registrar import FILTER_SIZE, RATE, SERVICES, _endpoint, _Process, _registrar_process, _service

from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.registrar import SERVICE_NAME
from aether.registrar.convert import registration_to_proto
from aether.rpc.compat import apply_purerpc_fixes

P99_AIM_MS = 250.0
"""The issue's aim at 10,000 watchers."""

STARTUP_TIMEOUT = 300.0
# 10,000 connections open and sync within a minute on a loaded 2-core machine; 5 minutes turns a hang into an error.

DELIVERY_TIMEOUT = 120.0


@attrs.frozen(kw_only=True)
class Sizes:
    """One run's workload: full, or `--quick` for a smoke run."""

    watchers: int
    reference_watchers: int
    changes: int
    clients: int
    senders: int = 16
    """Connections the registrations go over, in turn."""


FULL = Sizes(watchers=10_000, reference_watchers=1_000, changes=1_000, clients=4)
QUICK = Sizes(watchers=1_000, reference_watchers=100, changes=200, clients=2)


def _filter(index: int) -> list[str]:
    """Watcher `index`'s services, as `bench_registrar.py` spreads them."""
    return sorted({_service((index * 7 + offset) % SERVICES) for offset in range(FILTER_SIZE)})


# --- a watcher process: raw HTTP/2 (h2c, prior knowledge), one connection and one stream per watcher ---

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
_END_STREAM, _ACK, _END_HEADERS = 0x1, 0x1, 0x4
_MAX_WINDOW = 2**31 - 1


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream_id) + payload


def _opening(index: int, port: int) -> bytes:
    """Everything a watcher sends: preface, settings (largest windows), the WatchEndpoints request, half-closed."""
    headers = hpack.Encoder().encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", f"/{SERVICE_NAME}/WatchEndpoints"),
            (":authority", f"127.0.0.1:{port}"),
            ("content-type", "application/grpc+proto"),
            ("te", "trailers"),
        ]
    )
    request = pb.WatchEndpointsRequest(cluster_name="bench", node_name=f"node-{index}")
    request.filter.services.extend(_filter(index))
    message = request.SerializeToString()
    settings = struct.pack(">HI", 0x2, 0) + struct.pack(">HI", 0x4, _MAX_WINDOW)  # no push; largest window
    return b"".join(
        (
            _PREFACE,
            _frame(_SETTINGS, 0, 0, settings),
            _frame(0x8, 0, 0, struct.pack(">I", _MAX_WINDOW - 65_535)),  # WINDOW_UPDATE of the connection
            _frame(_HEADERS, _END_HEADERS, 1, headers),
            _frame(_DATA, _END_STREAM, 1, b"\x00" + struct.pack(">I", len(message)) + message),
        )
    )


_SO_TIMESTAMPNS = 35
"""Linux: each received segment carries the kernel's arrival time (CLOCK_REALTIME) as ancillary data."""

POLL_INTERVAL = 0.002
"""Seconds a watcher process sleeps when nothing arrived, between polls."""


def _arrival(ancillary: list[tuple[int, int, bytes]]) -> int:
    """The arrival time (ns, CLOCK_REALTIME) of the first segment of what `recvmsg` read, else now."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
            seconds, nanoseconds = struct.unpack("qq", data[:16])
            return int(seconds * 1_000_000_000 + nanoseconds)
    # The kernel leaves it out of segments it merged to save memory: when read, then (later, never earlier).
    return time.time_ns()


class _Connection:
    """One watcher's connection: frame and message reassembly, and what it received."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.frames = bytearray()
        self.messages = bytearray()
        self.synced = False
        self.ended: str | None = None


def watch(port: int, first: int, count: int, output: Path) -> None:
    """`bench_fanout.py watch PORT FIRST COUNT OUTPUT`: watchers `first`..`first+count-1` until stdin says stop.

    Prints "ready" once every watcher has its SNAPSHOT_COMPLETE; on "expect N" it prints "done" once N endpoint
    additions arrived, after writing each as "ip arrival_ns" to OUTPUT.
    """
    os.nice(10)  # the watchers stand for other machines: they yield the CPU to the registrar
    selector = selectors.EpollSelector()
    connections: list[_Connection] = []
    for index in range(first, first + count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        sock.sendall(_opening(index, port))
        sock.setblocking(False)
        connection = _Connection(sock)
        connections.append(connection)
        selector.register(sock, selectors.EVENT_READ, connection)
    os.set_blocking(0, False)
    selector.register(0, selectors.EVENT_READ, None)
    received: list[tuple[str, int]] = []
    unsynced = count
    expected: int | None = None
    commands = b""
    added = pb.EVENT_TYPE_ENDPOINT_ADDED
    complete = pb.EVENT_TYPE_SNAPSHOT_COMPLETE
    parse = pb.WatchEndpointsResponse.FromString
    events: list[tuple[selectors.SelectorKey, int]] = []
    while True:
        if not events:
            # Polled, not woken: a registrar's send never wakes (and so is never preempted by) this process; the
            # kernel's receive timestamps say when each message arrived all the same.
            time.sleep(POLL_INTERVAL)
        events = selector.select(timeout=0)
        for key, _ in events:
            connection = key.data
            if connection is None:
                commands += os.read(0, 4096)
                if b"stop" in commands:
                    return
                if commands.endswith(b"\n") and commands.startswith(b"expect "):
                    expected = int(commands.split()[1])
                    commands = b""
                continue
            try:
                data, ancillary, _, _ = connection.sock.recvmsg(1 << 20, 64)
            except BlockingIOError:
                continue
            if not data:
                connection.ended = connection.ended or "the registrar closed the connection"
                selector.unregister(connection.sock)
                print(f"watcher ended: {connection.ended}", file=sys.stderr, flush=True)
                continue
            now = _arrival(ancillary)
            for message in _messages(connection, data):
                response = parse(message)
                if response.type == added:
                    received.append((response.endpoint.ip, now))
                elif response.type == complete and not connection.synced:
                    connection.synced = True
                    unsynced -= 1
                    if unsynced == 0:
                        print("ready", flush=True)
        if expected is not None and len(received) >= expected:
            output.write_text("".join(f"{ip} {at}\n" for ip, at in received))
            print("done", flush=True)
            expected = None


def _messages(connection: _Connection, data: bytes) -> Iterator[bytes]:
    """The gRPC messages completed by `data`; answers SETTINGS and PING; notes the stream's end."""
    frames = connection.frames
    frames += data
    offset = 0
    while len(frames) - offset >= 9:
        length = int.from_bytes(frames[offset : offset + 3])
        if len(frames) - offset < 9 + length:
            break
        kind, flags = frames[offset + 3], frames[offset + 4]
        payload = bytes(frames[offset + 9 : offset + 9 + length])
        offset += 9 + length
        if kind == _DATA:
            connection.messages += payload
        elif kind == _SETTINGS and not flags & _ACK:
            connection.sock.send(_frame(_SETTINGS, _ACK, 0, b""))
        elif kind == _PING and not flags & _ACK:
            connection.sock.send(_frame(_PING, _ACK, 0, payload))
        elif kind == _HEADERS and flags & _END_STREAM:
            connection.ended = "the stream ended (trailers)"
        elif kind in (_RST_STREAM, _GOAWAY):
            connection.ended = f"frame type {kind}"
    del frames[:offset]
    messages = connection.messages
    start = 0
    while len(messages) - start >= 5:
        length = int.from_bytes(messages[start + 1 : start + 5])
        if len(messages) - start < 5 + length:
            break
        yield bytes(messages[start + 5 : start + 5 + length])
        start += 5 + length
    del messages[:start]


# --- the run ---


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process `pid` used so far."""
    return sum(_cpu_split(pid))


def _cpu_split(pid: int, *, thread: int | None = None) -> tuple[float, float]:
    """CPU time process `pid` (or only its `thread`) used so far in user space (Python) and in the kernel (the
    sockets), in seconds."""
    path = Path(f"/proc/{pid}/stat") if thread is None else Path(f"/proc/{pid}/task/{thread}/stat")
    fields = path.read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


@attrs.define
class _Client:
    process: trio.Process
    first: int
    count: int
    output: Path
    lines: bytes = b""

    async def wait_line(self, expected: bytes) -> None:
        assert self.process.stdout is not None
        while b"\n" not in self.lines:
            chunk = await self.process.stdout.receive_some()
            assert chunk, f"watcher process {self.first}.. exited before saying {expected!r}"
            self.lines += chunk
        line, _, self.lines = self.lines.partition(b"\n")
        assert line == expected, f"watcher process {self.first}..: {line!r}, expected {expected!r}"

    def cpu_seconds(self) -> float:
        return _cpu_seconds(self.process.pid)


@asynccontextmanager
async def _watcher_processes(
    process: _Process, *, watchers: int, clients: int, directory: Path
) -> AsyncIterator[list[_Client]]:
    assert process.address.port is not None
    started: list[_Client] = []
    try:
        per = -(-watchers // clients)
        for first in range(0, watchers, per):
            count = min(per, watchers - first)
            output = directory / f"watchers-{first}.txt"
            command = [sys.executable, __file__, "watch", str(process.address.port), str(first), str(count)]
            child = await trio.lowlevel.open_process(
                [*command, str(output)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            started.append(_Client(child, first, count, output))
        with trio.fail_after(STARTUP_TIMEOUT):
            for client in started:
                await client.wait_line(b"ready")
        yield started
    finally:
        for client in started:
            if client.process.returncode is None:
                client.process.kill()
            await client.process.wait()


def _start_profiler(pid: int, *, seconds: float, watchers: int) -> subprocess.Popen[bytes] | None:
    """With BENCH_PROFILE=DIR: sample the registrar with py-spy over the run (collapsed stacks in DIR)."""
    directory = os.environ.get("BENCH_PROFILE")
    if not directory:
        return None
    output = Path(directory) / f"registrar-{watchers}.txt"
    command = [
        "py-spy",
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(int(seconds)),
        "--format",
        "raw",
        "--rate",
        "250",
    ]
    return subprocess.Popen([*command, "--output", str(output), "--nonblocking"], stdout=subprocess.DEVNULL)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _fan_out(
    *, watchers: int, changes: int, clients: int, senders: int, directory: Path
) -> dict[str, float]:
    """One run: `watchers` in `clients` processes, `changes` registrations at RATE over `senders` connections; its
    figures."""
    apply_purerpc_fixes()
    filters = [frozenset(_filter(index)) for index in range(watchers)]
    async with _registrar_process(preload=SERVICES) as process:
        rss_before = _rss_bytes(process.pid)
        connect_start = time.monotonic()
        async with _watcher_processes(
            process, watchers=watchers, clients=clients, directory=directory
        ) as started:
            connected_s = time.monotonic() - connect_start
            rss_synced = _rss_bytes(process.pid)
            sent: dict[str, tuple[int, int]] = {}
            # Per service, how many watchers of each process filter it (counted before, off the paced loop).
            hits_by_service = {
                _service(index): [
                    sum(
                        1
                        for one in filters[client.first : client.first + client.count]
                        if _service(index) in one
                    )
                    for client in started
                ]
                for index in range(SERVICES)
            }
            expected = [0] * len(started)
            assert process.address.port is not None
            async with AsyncExitStack() as channels:
                stubs = [
                    purerpc.Client(
                        SERVICE_NAME,
                        await channels.enter_async_context(
                            purerpc.insecure_channel("127.0.0.1", process.address.port)
                        ),
                    ).get_method_stub(
                        "RegisterEndpoint",
                        purerpc.RPCSignature(
                            purerpc.Cardinality.UNARY_UNARY,
                            pb.RegisterEndpointRequest,
                            pb.RegisterEndpointResponse,
                        ),
                    )
                    for _ in range(senders)
                ]
                cpu_before = process.cpu_seconds(), sum(client.cpu_seconds() for client in started)
                split_before = _cpu_split(process.pid)
                main_before = sum(_cpu_split(process.pid, thread=process.pid))
                profiler = _start_profiler(process.pid, seconds=changes / RATE, watchers=watchers)
                start = trio.current_time()
                async with trio.open_nursery() as calls:
                    for step in range(changes):
                        await trio.sleep_until(start + step / RATE)
                        service = _service(step % SERVICES)
                        endpoint = _endpoint(SERVICES + step, service=service)
                        for number, hits in enumerate(hits_by_service[service]):
                            expected[number] += hits
                        matching = sum(hits_by_service[service])
                        sent[endpoint.ip] = (time.time_ns(), matching)  # the clock of receive timestamps
                        calls.start_soon(stubs[step % senders], registration_to_proto(endpoint))
                elapsed = trio.current_time() - start
            with trio.fail_after(DELIVERY_TIMEOUT):
                for client, count in zip(started, expected, strict=True):
                    assert client.process.stdin is not None
                    await client.process.stdin.send_all(f"expect {count}\n".encode())
                for client in started:
                    await client.wait_line(b"done")
            busy = time.monotonic() - connect_start - connected_s
            registrar_cpu_s = process.cpu_seconds() - cpu_before[0]
            user_after, system_after = _cpu_split(process.pid)
            main_thread_s = sum(_cpu_split(process.pid, thread=process.pid)) - main_before
            registrar_user_s, registrar_system_s = (
                user_after - split_before[0],
                system_after - split_before[1],
            )
            registrar_cpu = registrar_cpu_s / busy
            watchers_cpu = (sum(client.cpu_seconds() for client in started) - cpu_before[1]) / busy
            rss_end = _rss_bytes(process.pid)
            if profiler is not None:
                await trio.to_thread.run_sync(profiler.wait)
            for client in started:
                assert client.process.stdin is not None
                await client.process.stdin.send_all(b"stop\n")
    deliveries: list[float] = []
    last: dict[str, int] = {}
    received: dict[str, int] = {}
    for client in started:
        for line in client.output.read_text().splitlines():
            ip, at = line.split()
            deliveries.append((int(at) - sent[ip][0]) / 1e9)
            last[ip] = max(last.get(ip, 0), int(at))
            received[ip] = received.get(ip, 0) + 1
    missing = [ip for ip, (_, matching) in sent.items() if received.get(ip, 0) != matching]
    assert not missing, (
        f"{len(missing)} changes not delivered to every matching watcher once, e.g. {missing[0]}"
    )
    per_change = [(last[ip] - at) / 1e9 for ip, (at, _) in sent.items()]
    return {
        "watchers": watchers,
        "changes": changes,
        "deliveries": len(deliveries),
        "achieved_changes_per_s": changes / elapsed,
        "change_p50_ms": _percentile(per_change, 0.5) * 1e3,
        "change_p99_ms": _percentile(per_change, 0.99) * 1e3,
        "change_max_ms": max(per_change) * 1e3,
        "delivery_p50_ms": _percentile(deliveries, 0.5) * 1e3,
        "delivery_p99_ms": _percentile(deliveries, 0.99) * 1e3,
        "delivery_max_ms": max(deliveries) * 1e3,
        "registrar_cpu_cores": registrar_cpu,
        "registrar_cpu_us_per_change": registrar_cpu_s / changes * 1e6,
        "registrar_cpu_us_per_delivery": registrar_cpu_s / len(deliveries) * 1e6,
        # The trio thread's share: what bounds the changes/s one registrar serves when a second core is free.
        "registrar_trio_thread_us_per_change": main_thread_s / changes * 1e6,
        "registrar_user_us_per_delivery": registrar_user_s / len(deliveries) * 1e6,
        "registrar_kernel_us_per_delivery": registrar_system_s / len(deliveries) * 1e6,
        "watchers_cpu_cores": watchers_cpu,
        "connect_and_sync_s": connected_s,
        "registrar_rss_before_mib": rss_before / 2**20,
        "registrar_rss_per_watcher_kib": (rss_synced - rss_before) / watchers / 1024,
        "registrar_rss_end_mib": rss_end / 2**20,
    }


def _encode_floor(changes: int) -> float:
    """Seconds to encode one change's response, in process: the floor the registrar's work per change has."""
    from aether.registrar.convert import change_to_proto
    from aether.registrar.snapshot import Change, ChangeKind

    endpoints = [_endpoint(SERVICES + step, service=_service(step % SERVICES)) for step in range(changes)]
    start = time.perf_counter()
    for number, endpoint in enumerate(endpoints):
        change = Change(
            kind=ChangeKind.ENDPOINT_ADDED,
            version=number,
            service=endpoint.service,
            endpoint=endpoint,
            protocol=endpoint.protocol,
            ip=endpoint.ip,
        )
        change_to_proto(change).SerializeToString()
    return (time.perf_counter() - start) / changes


async def _main(sizes: Sizes, directory: Path) -> dict[str, object]:
    reference = await _fan_out(
        watchers=sizes.reference_watchers,
        changes=sizes.changes,
        clients=sizes.clients,
        senders=sizes.senders,
        directory=directory,
    )
    measured = await _fan_out(
        watchers=sizes.watchers,
        changes=sizes.changes,
        clients=sizes.clients,
        senders=sizes.senders,
        directory=directory,
    )
    return {"reference": reference, "measured": measured}


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "watch":
        watch(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a tenth of the watchers (a smoke run)")
    parser.add_argument("--watchers", type=int, help="watchers of the measured run (default 10,000)")
    parser.add_argument("--changes", type=int, help="changes per run (default 1,000)")
    parser.add_argument("--senders", type=int, help="connections the registrations go over (default 16)")
    arguments = parser.parse_args()
    sizes = QUICK if arguments.quick else FULL
    if arguments.watchers is not None:
        sizes = attrs.evolve(sizes, watchers=arguments.watchers)
    if arguments.changes is not None:
        sizes = attrs.evolve(sizes, changes=arguments.changes)
    if arguments.senders is not None:
        sizes = attrs.evolve(sizes, senders=arguments.senders)
    with tempfile.TemporaryDirectory() as directory:
        figures = trio.run(_main, sizes, Path(directory))
    encode_us = _encode_floor(sizes.changes) * 1e6
    reference, measured = figures["reference"], figures["measured"]
    assert isinstance(reference, dict)
    assert isinstance(measured, dict)
    print(
        f"registrar fan-out: filters of {FILTER_SIZE}/{SERVICES} services, {RATE:.0f} changes/s,"
        f" {sizes.changes} changes over {sizes.senders} connections, watchers in {sizes.clients} processes"
    )
    print(f"  {'':34} {reference['watchers']:>12,} {measured['watchers']:>12,} {'ratio':>8}")
    for name in reference:
        if name in ("watchers", "changes"):
            continue
        ratio = measured[name] / reference[name] if reference[name] else float("nan")
        print(f"  {name:34} {reference[name]:12.3f} {measured[name]:12.3f} {ratio:8.2f}")
    print(f"  encode-only floor, one change: {encode_us:.1f} us")
    print(
        f"  aim: {measured['watchers']:,} watchers change p99 <= {P99_AIM_MS:.0f} ms:"
        f" {measured['change_p99_ms'] <= P99_AIM_MS}"
    )
    write_results(
        "fanout_quick" if arguments.quick else "fanout",
        {
            "sizes": attrs.asdict(sizes),
            "rate_per_s": RATE,
            "filter_size": FILTER_SIZE,
            "services": SERVICES,
            "encode_floor_us": encode_us,
            **figures,
        },
    )


if __name__ == "__main__":
    main()
