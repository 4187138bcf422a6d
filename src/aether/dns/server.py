"""`serve_mesh_dns`: the trio UDP and TCP server around `MeshResolver`, the record-file poller, and the flights of
forwarded questions (one upstream query per distinct question in flight, however many clients ask it)."""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from aether.dns.answer import Answered, Dropped, Forward, MeshResolver, ResolverStatistics, Transport
from aether.dns.datagrams import BATCH_SIZE, QueryBatch
from aether.dns.errors import RecordsFileRejected
from aether.dns.forward import UPSTREAM_TIMEOUT, HostPort, Upstreams, serve_upstreams
from aether.dns.instrumentation import observe_mesh_dns
from aether.dns.records import parse_records
from aether.dns.wire import Question, Reply
from aether.telemetry import DnsMetrics, current_telemetry

logger = logging.getLogger(__name__)

RECORDS_POLL_INTERVAL = 1.0
"""Seconds between checks of the record file: the agent rewrites it on service changes, and a one-second lag
is well under the record TTL; a stat per second is free."""
MAX_FORWARDS_IN_FLIGHT = 512
"""Distinct questions waiting on upstreams at once; beyond that we answer SERVFAIL at once instead of queueing
(bounds memory when an upstream blackholes)."""
MAX_CLIENTS_WAITING = 4096
"""Client queries waiting on those flights (a question asked by many clients at once counts each): eight per
flight on average, and a bound on memory when a popular name's upstream blackholes."""
TCP_IDLE_TIMEOUT = 10.0
"""Seconds a TCP client may stay silent between queries (RFC 7766 6.2.3 suggests seconds, not minutes)."""
_MAX_UDP_QUERY = 65_535
_LENGTH = struct.Struct("!H")
_BIND_ATTEMPTS = 10
"""With port 0, the UDP port the kernel picks may be taken for TCP; try a few ports before giving up."""


@attrs.frozen(kw_only=True)
class MeshDnsStatistics:
    """Counters of one running mesh DNS server."""

    resolver: ResolverStatistics
    udp_queries: int
    udp_batches: int
    """Batches the UDP loop took (a `recvmmsg` each; in the per-datagram loop, a wake-up): `udp_queries / udp_batches`
    is the mean batch."""
    tcp_queries: int
    forwarded: int
    """Questions sent upstream (one per flight, whatever the number of clients that asked it)."""
    coalesced: int
    """Client queries that joined a flight already under way instead of asking upstream again."""
    upstream_failures: int
    malformed: int
    forwards_in_flight: int
    clients_waiting: int
    record_file_problems: int
    """Times the record file was found missing, unreadable or unusable (the last records were kept)."""


class RunningMeshDns:
    """The handle `serve_mesh_dns` passes to `task_status.started`: where it listens, and its counters."""

    def __init__(self, *, address: HostPort, resolver: MeshResolver) -> None:
        self.address = address
        self.resolver = resolver
        self.udp_queries = 0
        self.udp_batches = 0
        self.tcp_queries = 0
        self.forwarded = 0
        self.coalesced = 0
        self.upstream_failures = 0
        self.malformed = 0
        self.forwards_in_flight = 0
        self.clients_waiting = 0
        self.record_file_problems = 0
        self._record_file_checked = trio.Event()

    def statistics(self) -> MeshDnsStatistics:
        """Return the current counters."""
        return MeshDnsStatistics(
            resolver=self.resolver.statistics(),
            udp_queries=self.udp_queries,
            udp_batches=self.udp_batches,
            tcp_queries=self.tcp_queries,
            forwarded=self.forwarded,
            coalesced=self.coalesced,
            upstream_failures=self.upstream_failures,
            malformed=self.malformed,
            forwards_in_flight=self.forwards_in_flight,
            clients_waiting=self.clients_waiting,
            record_file_problems=self.record_file_problems,
        )

    async def wait_generation(self, generation: int) -> None:
        """Block until records of at least `generation` are in use."""
        await trio.lowlevel.checkpoint()
        while True:
            records = self.resolver.records
            if records is not None and records.generation >= generation:
                return
            await self._record_file_checked.wait()

    async def wait_record_file_problems(self, count: int) -> None:
        """Block until the record file was found missing, unreadable or unusable at least `count` times."""
        await trio.lowlevel.checkpoint()
        while self.record_file_problems < count:
            await self._record_file_checked.wait()

    def _note_record_file_problem(self) -> None:
        self.record_file_problems += 1
        self._notify_record_file_checked()

    def _notify_record_file_checked(self) -> None:
        self._record_file_checked.set()
        self._record_file_checked = trio.Event()


async def serve_mesh_dns(
    *,
    listen: HostPort,
    records_path: Path,
    upstreams: tuple[HostPort, ...],
    mesh_domain: str,
    upstream_timeout: float = UPSTREAM_TIMEOUT,
    poll_interval: float = RECORDS_POLL_INTERVAL,
    clock: Callable[[], float] = trio.current_time,
    batch_syscalls: bool = True,
    task_status: trio.TaskStatus[RunningMeshDns] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve mesh DNS on `listen` (UDP and TCP, same port) until cancelled.

    Args:
        listen: where to bind; port 0 picks a free port (the same one for UDP and TCP).
        records_path: the agent's record file, polled every `poll_interval` seconds.
        upstreams: resolvers for names outside `mesh_domain`, tried in order.
        mesh_domain: the zone answered from the records, e.g. `aether.internal`.
        upstream_timeout: seconds to wait for each upstream.
        poll_interval: seconds between record-file checks.
        clock: the time forwarded answers age by (seconds); tests pass a clock they move by hand.
        batch_syscalls: take and answer UDP queries a batch per `recvmmsg`/`sendmmsg` where the platform has
            them (Linux); False, or elsewhere, one `recvfrom`/`sendto` per datagram. Both answer the same bytes.
        task_status: receives a `RunningMeshDns` once both sockets listen.

    Error handling:
        Malformed packets are logged and dropped (or answered FORMERR when the header parses); a missing or
        unreadable record file keeps the last good records; failing upstreams give SERVFAIL.
    """
    resolver = MeshResolver(mesh_domain=mesh_domain)
    udp_socket, raw_udp, tcp_listeners = await _bind(listen)
    with udp_socket:
        port = udp_socket.getsockname()[1]
        server = RunningMeshDns(address=HostPort(host=listen.host, port=port), resolver=resolver)
        observe_mesh_dns(current_telemetry(), server.statistics)
        async with trio.open_nursery() as nursery:
            await nursery.start(_serve_records, records_path, server, poll_interval)
            pool: Upstreams = await nursery.start(
                functools.partial(serve_upstreams, upstreams, timeout_per_upstream=upstream_timeout)
            )
            flights = _Flights(
                server=server,
                upstreams=pool,
                clock=clock,
                udp=raw_udp,
                flight_nursery=nursery,
            )
            batch = QueryBatch.open(raw_udp) if batch_syscalls else None
            if batch is None:
                nursery.start_soon(_serve_udp, raw_udp, server, flights, clock)
            else:
                nursery.start_soon(_serve_udp_batches, raw_udp, batch, server, flights, clock)
            nursery.start_soon(
                trio.serve_listeners,
                lambda stream: _serve_tcp_connection(stream, server, flights, clock),
                tcp_listeners,
            )
            logger.info(
                "mesh dns for %s on %s (udp+tcp), records %s, upstreams %s",
                mesh_domain,
                server.address,
                records_path,
                ", ".join(map(str, upstreams)) or "none",
            )
            task_status.started(server)


async def _bind(
    listen: HostPort,
) -> tuple[trio.socket.SocketType, socket.socket, list[trio.SocketListener]]:
    """Bind a UDP socket and a TCP listener to the same address and port; the UDP socket comes both as trio's
    and as the stdlib socket it wraps (the UDP loop reads that one directly: see `_serve_udp`)."""
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    for _ in range(_BIND_ATTEMPTS):
        raw = socket.socket(family, socket.SOCK_DGRAM)
        udp_socket = trio.socket.from_stdlib_socket(raw)
        try:
            await udp_socket.bind((listen.host, listen.port))
            port = udp_socket.getsockname()[1]
            tcp_listeners = await trio.open_tcp_listeners(port, host=listen.host)
        except OSError as exc:
            udp_socket.close()
            if listen.port == 0 and exc.errno == errno.EADDRINUSE:
                continue
            raise
        return udp_socket, raw, tcp_listeners
    raise OSError(errno.EADDRINUSE, f"no free port for both UDP and TCP on {listen.host!r}")


async def _serve_records(
    path: Path,
    server: RunningMeshDns,
    poll_interval: float,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Load the record file now and whenever its stat or content changes; keep the last good records."""
    last_stat: tuple[int, int, int] | None = None
    last_digest = b""
    missing_logged = False
    started = False
    while True:
        try:
            stat = await trio.to_thread.run_sync(os.stat, path)
            identity = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if identity != last_stat:
                content = await trio.to_thread.run_sync(path.read_bytes)
                last_stat = identity
                digest = hashlib.sha256(content).digest()
                if digest != last_digest:
                    last_digest = digest
                    _load(content, path=path, server=server)
            missing_logged = False
        except FileNotFoundError:
            if not missing_logged:
                server._note_record_file_problem()
                kept = server.resolver.records
                logger.warning(
                    "record file %s is missing; %s",
                    str(path),
                    "answering SERVFAIL for mesh names until it appears"
                    if kept is None
                    else f"keeping the last records (generation {kept.generation})",
                )
                missing_logged = True
            last_stat = None
        except OSError as exc:
            server._note_record_file_problem()
            logger.warning("record file %s cannot be read: %s; keeping the last records", str(path), exc)
            last_stat = None
        if not started:
            task_status.started()
            started = True
        await trio.sleep(poll_interval)


def _load(content: bytes, *, path: Path, server: RunningMeshDns) -> None:
    try:
        parsed = parse_records(content)
    except RecordsFileRejected as exc:
        server._note_record_file_problem()
        # Also what a half-written file looks like if the agent did not rename it into place.
        logger.warning("%s: %s; keeping the last records", str(path), exc)
        return
    for message in parsed.skipped:
        logger.warning("%s: %s; skipped", str(path), message)
    server.resolver.replace_records(parsed.records)
    server._notify_record_file_checked()
    logger.info(
        "%s: loaded generation %d, %d names",
        str(path),
        parsed.records.generation,
        len(parsed.records.addresses),
    )


UDP_BATCH = BATCH_SIZE
"""Datagrams the UDP loop handles before it lets other tasks run (TCP clients, forwards, record reloads)."""
UDP_BATCHES_PER_WAKEUP = 4
"""Full batches the batched UDP loop takes in a row before it lets the other tasks run (at a few microseconds a
query, well under a millisecond)."""


async def _serve_udp_batches(
    raw: socket.socket,
    batch: QueryBatch,
    server: RunningMeshDns,
    flights: _Flights,
    clock: Callable[[], float],
) -> None:
    """Answer UDP queries until cancelled, a `QueryBatch` at a time: one `recvmmsg` takes up to `UDP_BATCH`
    datagrams, the cached answers are put in place in one pass, the other queries go through `_answer_uncached`
    as `_serve_udp`'s do (answered in the batch, or joining a flight), and one `sendmmsg` sends the batch's answers.
    """
    resolver = server.resolver
    lookup = resolver.udp_lookup()
    while True:
        # `wait_readable` always parks the task, so the other tasks run between wake-ups; a wake-up costs far
        # more than a `recvmmsg` that finds nothing, so a full batch is followed by another at once (up to
        # `UDP_BATCHES_PER_WAKEUP` of them).
        await trio.lowlevel.wait_readable(raw)
        for _ in range(UDP_BATCHES_PER_WAKEUP):
            count = batch.receive()
            if not count:
                break
            now = clock()
            server.udp_queries += count
            server.udp_batches += 1
            misses = batch.answer_cached(lookup, now=now)
            resolver.count_hits(count - len(misses))
            for index in misses:
                response = _answer_uncached(
                    batch.query(index), batch.sender(index), server=server, flights=flights, now=now
                )
                if response is not None:
                    batch.reply(index, response)
            batch.send()
            if count < UDP_BATCH:
                break  # the socket had no more


async def _serve_udp(
    raw: socket.socket, server: RunningMeshDns, flights: _Flights, clock: Callable[[], float]
) -> None:
    """Answer UDP queries until cancelled.

    The loop reads and answers without an `await` per datagram: it waits until the socket is readable, then
    drains up to `UDP_BATCH` datagrams with non-blocking calls on the underlying socket, answering each at once,
    and yields to the other tasks once per batch. A trio `recvfrom`/`sendto` pair costs two trips through the
    scheduler per query, which was most of the time a cached answer took. An answer that does not fit in the
    socket's send buffer is dropped, as every UDP server does under overload: the client retries.
    Forwarded questions join a flight (see `_Flights`), which answers its clients when the upstream replies.
    """
    cached = server.resolver.cached
    udp = Transport.UDP
    while True:
        await trio.lowlevel.wait_readable(raw)
        now = clock()  # once per batch: a batch takes well under a millisecond
        taken = server.udp_queries
        for _ in range(UDP_BATCH):
            try:
                query, client = raw.recvfrom(_MAX_UDP_QUERY)
            except BlockingIOError:
                break
            except ConnectionResetError:
                # Linux reports an earlier ICMP port-unreachable on the next recvfrom; the client has gone.
                continue
            server.udp_queries += 1
            response = cached(query, transport=udp, now=now)
            if response is not None:
                try:  # _send_now, inlined: this is the path of nearly every query
                    raw.sendto(response, client)
                except OSError as exc:
                    logger.info("udp answer to %s not sent: %s", client, exc)
                continue
            response = _answer_uncached(query, client, server=server, flights=flights, now=now)
            if response is not None:
                _send_now(raw, response, client)
        if server.udp_queries != taken:
            server.udp_batches += 1
        await trio.lowlevel.checkpoint()


def _answer_uncached(
    query: bytes, client: tuple[object, ...], *, server: RunningMeshDns, flights: _Flights, now: float
) -> bytes | None:
    """Resolve a UDP query the answer cache did not answer, for both UDP loops: return the answer to send now, or
    None when there is none yet (forwarded: its flight answers `client` when the upstream replies) or none at all
    (dropped, logged)."""
    resolution = _resolve(server, query, transport=Transport.UDP, now=now)
    if isinstance(resolution, Answered):
        if resolution.problem is not None:
            _log_problem(resolution.problem, server=server, peer=client)
        return resolution.response
    if isinstance(resolution, Forward):
        flights.forward_udp(resolution, query, client)
    else:
        _log_dropped(resolution, server=server, peer=client)
    return None


def _send_now(raw: socket.socket, response: bytes, client: tuple[object, ...]) -> None:
    try:
        raw.sendto(response, client)
    except OSError as exc:  # BlockingIOError included: a full send buffer drops the answer
        logger.info("udp answer to %s not sent: %s", client, exc)


class _Flight:
    """One question on its way upstream, and the clients waiting for its answer."""

    __slots__ = ("done", "message", "started", "udp_waiters")

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.done = trio.Event()
        self.message: bytes | None = None
        """The upstream's reply, or None when every upstream failed (the waiters get SERVFAIL)."""
        self.udp_waiters: list[tuple[bytes, Question, tuple[object, ...]]] = []


class _Flights:
    """Forwarded questions in flight, by transport and cache key: a question already on its way upstream is not
    sent again; its asker waits for the same answer (coalescing). Only the UDP loop, the upstream readers and
    the TCP connection tasks touch it, each between awaits.

    A UDP flight is no task: `Upstreams.start_udp` calls `_land` when the upstream answers (or all failed), and
    `_land` answers every waiting client there and then. A TCP flight is a task awaiting `Upstreams.ask`.
    """

    def __init__(
        self,
        *,
        server: RunningMeshDns,
        upstreams: Upstreams,
        clock: Callable[[], float],
        udp: socket.socket,
        flight_nursery: trio.Nursery,
    ) -> None:
        self._server = server
        self._upstreams = upstreams
        self._clock = clock
        self._udp = udp
        self._nursery = flight_nursery
        self._flights: dict[bytes, _Flight] = {}
        self._forward_duration = DnsMetrics.of(current_telemetry()).forward_duration

    def forward_udp(self, forward: Forward, query: bytes, client: tuple[object, ...]) -> None:
        """Answer the UDP client's `query` once the upstream has answered `forward` (now, if at capacity)."""
        joined = self._join(forward, transport=Transport.UDP)
        if joined is None:
            _send_now(self._udp, self._server.resolver.servfail(query, forward.question), client)
            return
        key, flight, new = joined
        # Invariant: the waiter is in before the flight starts, for `start_udp` may land it at once.
        flight.udp_waiters.append((query, forward.question, client))
        if new:
            self._upstreams.start_udp(
                forward.query, on_reply=functools.partial(self._land, key, flight, forward)
            )

    async def forward_tcp(self, forward: Forward, query: bytes) -> bytes:
        """The answer to the TCP client's `query`, once the upstream has answered `forward`."""
        joined = self._join(forward, transport=Transport.TCP)
        if joined is None:
            await trio.lowlevel.checkpoint()
            return self._server.resolver.servfail(query, forward.question)
        key, flight, new = joined
        if new:
            self._nursery.start_soon(self._fly_tcp, key, flight, forward)
        try:
            await flight.done.wait()
        finally:
            self._server.clients_waiting -= 1
        return self._answer(query, forward.question, flight.message, transport=Transport.TCP)

    def _join(self, forward: Forward, *, transport: Transport) -> tuple[bytes, _Flight, bool] | None:
        """The key and flight for `forward`, and whether it is new (the caller starts it), or None when at
        capacity."""
        server = self._server
        if server.clients_waiting >= MAX_CLIENTS_WAITING:
            return None
        key = (b"u" if transport is Transport.UDP else b"t") + forward.key
        flight = self._flights.get(key)
        new = flight is None
        if flight is not None:
            server.coalesced += 1
        elif server.forwards_in_flight >= MAX_FORWARDS_IN_FLIGHT:
            return None
        else:
            flight = self._flights[key] = _Flight()
            server.forwards_in_flight += 1
            server.forwarded += 1
        server.clients_waiting += 1
        return key, flight, new

    async def _fly_tcp(self, key: bytes, flight: _Flight, forward: Forward) -> None:
        reply = None
        try:
            reply = await self._upstreams.ask(forward.query, transport=Transport.TCP)
        finally:
            self._land(key, flight, forward, reply)

    def _land(self, key: bytes, flight: _Flight, forward: Forward, reply: Reply | None) -> None:
        """The upstream answered `forward` (or every upstream failed): learn the reply, answer every waiter."""
        server = self._server
        del self._flights[key]
        server.forwards_in_flight -= 1
        server.clients_waiting -= len(flight.udp_waiters)
        self._forward_duration.record(
            time.perf_counter() - flight.started, {"dns.outcome": "failed" if reply is None else "answered"}
        )
        if reply is None:
            server.upstream_failures += 1
        else:
            server.resolver.learn(forward, reply, now=self._clock())
            flight.message = reply.message
        flight.done.set()
        for query, question, client in flight.udp_waiters:
            _send_now(
                self._udp, self._answer(query, question, flight.message, transport=Transport.UDP), client
            )

    def _answer(
        self, query: bytes, question: Question, message: bytes | None, *, transport: Transport
    ) -> bytes:
        resolver = self._server.resolver
        if message is None:
            return resolver.servfail(query, question)
        return resolver.answer_from(query, question, message, transport=transport)


async def _serve_tcp_connection(
    stream: trio.SocketStream, server: RunningMeshDns, flights: _Flights, clock: Callable[[], float]
) -> None:
    peer: object = "?"
    try:
        peer = stream.socket.getpeername()
        buffer = bytearray()
        while True:
            message = None
            with trio.move_on_after(TCP_IDLE_TIMEOUT):
                message = await _receive_message(stream, buffer)
            if message is None:
                return
            server.tcp_queries += 1
            resolution = _resolve(server, message, transport=Transport.TCP, now=clock())
            if isinstance(resolution, Dropped):
                _log_dropped(resolution, server=server, peer=peer)
                return  # framing can no longer be trusted
            if isinstance(resolution, Forward):
                response = await flights.forward_tcp(resolution, message)
            else:
                if resolution.problem is not None:
                    _log_problem(resolution.problem, server=server, peer=peer)
                response = resolution.response
            await stream.send_all(_LENGTH.pack(len(response)) + response)
    except (trio.BrokenResourceError, OSError) as exc:
        logger.info("tcp client %s: %s", peer, exc)
    finally:
        await trio.aclose_forcefully(stream)


async def _receive_message(stream: trio.SocketStream, buffer: bytearray) -> bytes | None:
    """The next length-framed message, or None on a clean close between messages."""
    while len(buffer) < 2 or len(buffer) < 2 + _LENGTH.unpack_from(buffer)[0]:
        chunk = await stream.receive_some()
        if not chunk:
            if buffer:
                logger.warning("tcp client closed mid-message (%d bytes unread)", len(buffer))
            return None
        buffer += chunk
    length = _LENGTH.unpack_from(buffer)[0]
    message = bytes(buffer[2 : 2 + length])
    del buffer[: 2 + length]
    return message


def _resolve(
    server: RunningMeshDns, query: bytes, *, transport: Transport, now: float
) -> Answered | Forward | Dropped:
    """`server.resolver.resolve`, but a bug on one odd packet must not take DNS down for the whole node."""
    try:
        return server.resolver.resolve(query, transport=transport, now=now)
    except Exception:
        logger.exception("resolving a %d-byte query failed: this is a bug; dropping it", len(query))
        return Dropped(reason="internal error (logged above)")


def _log_dropped(resolution: Dropped, *, server: RunningMeshDns, peer: object) -> None:
    server.malformed += 1
    logger.warning("dropped a packet from %s: %s", peer, resolution.reason)


def _log_problem(problem: str, *, server: RunningMeshDns, peer: object) -> None:
    server.malformed += 1
    logger.warning("query from %s: %s", peer, problem)
