"""Forwarding of names outside the mesh domain to upstream resolvers, one upstream at a time: over one kept
UDP socket per upstream, or over TCP."""

from __future__ import annotations

import collections
import logging
import secrets
import socket
import struct
from collections.abc import Callable

import attrs
import trio

from aether.dns.answer import Transport
from aether.dns.errors import ListenAddressInvalid, WireFormatError
from aether.dns.wire import Reply, question_section, read_reply

logger = logging.getLogger(__name__)

UPSTREAM_TIMEOUT = 2.0
"""Seconds to wait for one upstream before trying the next: glibc's resolver waits 5 s per try and dig 5 s
in all, so 2 s leaves room for a second upstream inside one client timeout."""
_MAX_UDP_REPLY = 65_535
_LENGTH = struct.Struct("!H")


@attrs.frozen(kw_only=True)
class HostPort:
    """A `HOST:PORT` pair (an IPv4 or IPv6 literal, or a host name)."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str, *, default_port: int | None = None) -> HostPort:
        """Parse `HOST:PORT`, `[V6]:PORT`, or (with `default_port`) a bare host.

        Raises:
            ListenAddressInvalid: the text does not parse, or the port is outside 0..65535.
        """
        host, port_text = text, ""
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port_text = rest.removeprefix(":")
        elif text.count(":") == 1:
            host, _, port_text = text.partition(":")
        if not port_text:
            if default_port is None:
                raise ListenAddressInvalid(text=text, reason="must be HOST:PORT")
            return cls(host=host, port=default_port)
        if not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise ListenAddressInvalid(text=text, reason="must be HOST:PORT with a port in 0..65535")
        return cls(host=host, port=int(port_text))

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def upstreams_from_resolv_conf(content: str) -> tuple[HostPort, ...]:
    """The `nameserver` lines of a resolv.conf, in order, on port 53."""
    upstreams = []
    for line in content.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            upstreams.append(HostPort(host=fields[1].split("%")[0], port=53))
    return tuple(upstreams)


class UpstreamReplyInvalid(Exception):
    """An upstream sent something that is not an answer to our query (we try the next one)."""


OnReply = Callable[["Reply | None"], None]
"""Called once per exchange: with the upstream's reply, or None when every upstream failed or timed out."""


class _Exchange:
    """One query on its way through the upstreams, one upstream at a time."""

    __slots__ = ("attempt", "ident", "on_reply", "query", "question")

    def __init__(self, query: bytes, question: bytes, on_reply: OnReply) -> None:
        self.query = query
        self.question = question
        self.on_reply = on_reply
        self.attempt = -1
        """Index of the upstream being asked; an expired deadline of an earlier attempt is ignored."""
        self.ident = b""


class _Channel:
    """The one connected UDP socket we keep to an upstream, and the exchanges waiting on it by ID."""

    def __init__(self, upstream: HostPort, raw: socket.socket) -> None:
        self.upstream = upstream
        self.raw = raw
        self.pending: dict[bytes, _Exchange] = {}

    def fresh_id(self) -> bytes:
        """A random ID no query on this socket is waiting with (RFC 5452 9.2: unpredictable IDs)."""
        while True:
            ident = secrets.token_bytes(2)
            if ident not in self.pending:
                return ident


class Upstreams:
    """The upstream resolvers, each reached over one long-lived connected UDP socket (and TCP per query).

    A socket per query costs a socket, a connect and a close, and was most of a forward's time; one socket per
    upstream instead carries every query, told apart by random IDs and matched on the question. The socket is
    connected, so the kernel drops datagrams from anyone but the upstream's address and port; with a fixed port,
    spoofing resistance rests on the 16-bit ID and the exact question (RFC 5452 9.1 asks for a random port too):
    the upstream is the node's own resolver, on a network the cluster controls.

    A UDP exchange is a record, not a task: `start_udp` sends and returns, one reader task per socket hands each
    reply to its exchange's callback, and one timer task moves exchanges whose upstream stayed silent on to the
    next upstream. A task, a cancel scope and an event per query were most of what a forward cost.

    Built by `serve_upstreams`.
    """

    def __init__(
        self,
        addresses: tuple[tuple[HostPort, tuple[object, ...] | None], ...],
        *,
        timeout_per_upstream: float,
        reader_nursery: trio.Nursery,
    ) -> None:
        self.upstreams = tuple(upstream for upstream, _ in addresses)
        self._addresses = dict(addresses)
        self._timeout = timeout_per_upstream
        self._reader_nursery = reader_nursery
        self._channels: dict[HostPort, _Channel] = {}
        # Invariant: deadlines are appended in time order (one timeout for all), so the first is the soonest.
        # A try that was answered keeps its entry until its deadline passes: the deque holds about one entry per
        # query sent in the last `timeout_per_upstream` seconds (a few MB at tens of thousands of queries/s).
        self._deadlines: collections.deque[tuple[float, _Exchange, int]] = collections.deque()
        self._deadline_added = trio.Event()
        self.queries_sent = 0

    def start_udp(self, query: bytes, *, on_reply: OnReply) -> None:
        """Send `query` (any ID: each try gets a fresh random one) to the first upstream that takes it, and call
        `on_reply` once: with the first good reply (its question matches and every record parses), or with None
        when every upstream refused, answered junk or stayed silent for `timeout_per_upstream` seconds."""
        self._next_upstream(_Exchange(query, question_section(query), on_reply))

    async def ask(self, query: bytes, *, transport: Transport) -> Reply | None:
        """`start_udp` as an await, or the same over TCP: ask each upstream in turn, return the first good answer.

        Returns:
            The upstream's reply, or None when every upstream failed, answered junk or timed out (the caller
            answers SERVFAIL).
        """
        if transport is Transport.UDP:
            done = trio.Event()
            replies: list[Reply | None] = []

            def on_reply(reply: Reply | None) -> None:
                replies.append(reply)
                done.set()

            self.start_udp(query, on_reply=on_reply)
            await done.wait()
            return replies[0]
        question = question_section(query)
        for upstream in self.upstreams:
            with trio.move_on_after(self._timeout):
                try:
                    return await _ask_tcp(query, question, upstream=upstream)
                except (OSError, trio.BrokenResourceError, UpstreamReplyInvalid) as exc:
                    logger.info("upstream %s failed: %s; trying the next one", upstream, exc)
                    continue
            logger.info("upstream %s: no answer within %.1fs; trying the next one", upstream, self._timeout)
        return None

    def _next_upstream(self, exchange: _Exchange) -> None:
        """Send `exchange` to the upstream after the one it was at, or give up (None) after the last one."""
        while True:
            exchange.attempt += 1
            if exchange.attempt >= len(self.upstreams):
                exchange.on_reply(None)
                return
            upstream = self.upstreams[exchange.attempt]
            try:
                channel = self._channel(upstream)
                exchange.ident = channel.fresh_id()
                channel.raw.send(exchange.ident + exchange.query[2:])
            except OSError as exc:  # BlockingIOError included: a full send buffer is a failed try
                logger.info("upstream %s: cannot send (%s); trying the next one", upstream, exc)
                continue
            channel.pending[exchange.ident] = exchange
            self.queries_sent += 1
            self._deadlines.append((trio.current_time() + self._timeout, exchange, exchange.attempt))
            self._deadline_added.set()
            return

    def _give_up_on(self, channel: _Channel, exchange: _Exchange, problem: str) -> None:
        del channel.pending[exchange.ident]
        logger.info("upstream %s: %s; trying the next one", channel.upstream, problem)
        self._next_upstream(exchange)

    def _channel(self, upstream: HostPort) -> _Channel:
        """The socket to `upstream`, made and connected on first use (and again after it broke).

        Raises:
            OSError: the socket cannot be made, or the upstream's name did not resolve at start.
        """
        channel = self._channels.get(upstream)
        if channel is not None:
            return channel
        address = self._addresses[upstream]
        if address is None:
            raise OSError(f"the name {upstream.host!r} did not resolve when mesh-dns started")
        raw = socket.socket(socket.AF_INET6 if len(address) == 4 else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            raw.setblocking(False)
            raw.connect(address)  # UDP connect to a literal address: no I/O, it only sets the peer
        except OSError:
            raw.close()
            raise
        channel = self._channels[upstream] = _Channel(upstream, raw)
        self._reader_nursery.start_soon(self._read, channel)
        return channel

    async def _read(self, channel: _Channel) -> None:
        """Hand each datagram on `channel` to the exchange waiting with its ID, until the socket breaks."""
        try:
            while True:
                await trio.lowlevel.wait_readable(channel.raw)
                while True:
                    try:
                        data = channel.raw.recv(_MAX_UDP_REPLY)
                    except BlockingIOError:
                        break
                    except ConnectionRefusedError:
                        # ICMP port unreachable: nobody listens there; everyone waiting moves on at once.
                        for exchange in list(channel.pending.values()):
                            self._give_up_on(channel, exchange, "refused (ICMP port unreachable)")
                        continue
                    self._deliver(channel, data)
        except OSError as exc:
            logger.warning(
                "upstream %s: socket failed (%s); opening a new one on the next query", channel.upstream, exc
            )
        finally:
            if self._channels.get(channel.upstream) is channel:
                del self._channels[channel.upstream]
            channel.raw.close()
        for exchange in list(channel.pending.values()):
            self._give_up_on(channel, exchange, "socket failed")

    def _deliver(self, channel: _Channel, data: bytes) -> None:
        exchange = channel.pending.get(data[:2])
        if exchange is None:
            return  # late (that exchange timed out) or stray
        try:
            reply = read_reply(data)
        except WireFormatError as exc:
            self._give_up_on(channel, exchange, f"junk reply ({exc})")
            return
        if reply.question != exchange.question:
            # Perhaps a late reply to an earlier query that had the same ID: not ours; keep waiting.
            logger.info("upstream %s: reply for another question ignored", channel.upstream)
            return
        del channel.pending[exchange.ident]
        exchange.on_reply(reply)

    async def _expire(self) -> None:
        """Move each exchange whose upstream stayed silent past its deadline on to the next upstream."""
        deadlines = self._deadlines
        while True:
            if not deadlines:
                self._deadline_added = trio.Event()
                await self._deadline_added.wait()
                continue
            deadline, exchange, attempt = deadlines[0]
            if trio.current_time() < deadline:
                await trio.sleep_until(deadline)
                continue
            deadlines.popleft()
            if exchange.attempt != attempt:
                continue  # that try was answered, refused or found junk, and the exchange moved on or ended
            channel = self._channels.get(self.upstreams[attempt])
            if channel is None or channel.pending.get(exchange.ident) is not exchange:
                continue  # answered
            self._give_up_on(channel, exchange, f"no answer within {self._timeout:.1f}s")


async def serve_upstreams(
    upstreams: tuple[HostPort, ...],
    *,
    timeout_per_upstream: float = UPSTREAM_TIMEOUT,
    task_status: trio.TaskStatus[Upstreams] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the readers of the upstream sockets and the timer until cancelled; `task_status.started` gets the
    `Upstreams`. A host name among `upstreams` is looked up once, here; one that does not resolve is logged and
    skipped (its tries fail at once, so queries move on to the next upstream).

    Resource handling:
        Each socket belongs to its reader task, which closes it when it ends (cancelled, or the socket broke).
    """
    addresses: list[tuple[HostPort, tuple[object, ...] | None]] = []
    for upstream in upstreams:
        family = socket.AF_INET6 if ":" in upstream.host else socket.AF_INET
        try:
            found = await trio.socket.getaddrinfo(upstream.host, upstream.port, family, socket.SOCK_DGRAM)
            addresses.append((upstream, tuple(found[0][4])))
        except OSError as exc:
            logger.warning(
                "upstream %s: %s; skipping it (give an address, or a name this node resolves)", upstream, exc
            )
            addresses.append((upstream, None))
    async with trio.open_nursery() as reader_nursery:
        pool = Upstreams(
            tuple(addresses), timeout_per_upstream=timeout_per_upstream, reader_nursery=reader_nursery
        )
        reader_nursery.start_soon(pool._expire)
        task_status.started(pool)


async def _ask_tcp(query: bytes, question: bytes, *, upstream: HostPort) -> Reply:
    """One TCP exchange with `upstream` on a fresh connection (RFC 1035 4.2.2 length framing): only answers
    too big for UDP come this way, so a connection per query is cheap enough."""
    ident = secrets.token_bytes(2)
    stream = await trio.open_tcp_stream(upstream.host, upstream.port)
    async with stream:
        await stream.send_all(_LENGTH.pack(len(query)) + ident + query[2:])
        buffer = b""
        while True:
            chunk = await stream.receive_some()
            if not chunk:
                raise UpstreamReplyInvalid(f"upstream {upstream}: closed the connection before answering")
            buffer += chunk
            if len(buffer) >= 2 and len(buffer) >= 2 + _LENGTH.unpack_from(buffer)[0]:
                data = buffer[2 : 2 + _LENGTH.unpack_from(buffer)[0]]
                try:
                    reply = read_reply(data)
                except WireFormatError as exc:
                    raise UpstreamReplyInvalid(f"upstream {upstream}: junk reply ({exc})") from exc
                if data[:2] != ident or reply.question != question:
                    raise UpstreamReplyInvalid(f"upstream {upstream}: reply does not match the query")
                return reply
