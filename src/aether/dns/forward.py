"""Forwarding of names outside the mesh domain to upstream resolvers, one upstream at a time: over one kept
UDP socket per upstream, or over TCP."""

from __future__ import annotations

import logging
import secrets
import socket
import struct

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


class _Pending:
    """One query on a shared UDP socket, waiting for the reply with its ID."""

    __slots__ = ("done", "problem", "question", "reply")

    def __init__(self, question: bytes) -> None:
        self.question = question
        self.done = trio.Event()
        self.reply: Reply | None = None
        self.problem: str | None = None

    def fail(self, problem: str) -> None:
        self.problem = problem
        self.done.set()


class _Channel:
    """The one connected UDP socket we keep to an upstream, and the queries waiting on it by ID."""

    def __init__(self, upstream: HostPort, raw: socket.socket) -> None:
        self.upstream = upstream
        self.raw = raw
        self.pending: dict[bytes, _Pending] = {}

    def fresh_id(self) -> bytes:
        """A random ID no query on this socket is waiting with (RFC 5452 9.2: unpredictable IDs)."""
        while True:
            ident = secrets.token_bytes(2)
            if ident not in self.pending:
                return ident

    def fail_all(self, problem: str) -> None:
        for pending in self.pending.values():
            pending.fail(problem)


class Upstreams:
    """The upstream resolvers, each reached over one long-lived connected UDP socket (and TCP per query).

    A socket per query costs a socket, a bind and a close, and was most of a forward's time; one socket per
    upstream instead carries every query, told apart by random IDs and matched on the question. The socket is
    connected, so the kernel drops datagrams from anyone but the upstream's address and port; with a fixed port,
    spoofing resistance rests on the 16-bit ID and the exact question (RFC 5452 9.1 asks for a random port too):
    the upstream is the node's own resolver, on a network the cluster controls.

    Built by `serve_upstreams`.
    """

    def __init__(self, upstreams: tuple[HostPort, ...], *, reader_nursery: trio.Nursery) -> None:
        self.upstreams = upstreams
        self._reader_nursery = reader_nursery
        self._channels: dict[HostPort, _Channel] = {}
        self.queries_sent = 0

    async def ask(self, query: bytes, *, transport: Transport, timeout_per_upstream: float) -> Reply | None:
        """Ask each upstream in turn, each within `timeout_per_upstream` seconds; return the first good answer.

        Args:
            query: the query to send, any ID (each try gets a fresh random one).

        Returns:
            The upstream's reply (its question matches `query`'s and every record parses), or None when every
            upstream failed, answered junk or timed out (the caller answers SERVFAIL).
        """
        question = question_section(query)
        for upstream in self.upstreams:
            with trio.move_on_after(timeout_per_upstream):
                try:
                    if transport is Transport.TCP:
                        return await _ask_tcp(query, question, upstream=upstream)
                    return await self._ask_udp(query, question, upstream=upstream)
                except (OSError, trio.BrokenResourceError, UpstreamReplyInvalid) as exc:
                    logger.info("upstream %s failed: %s; trying the next one", upstream, exc)
                    continue
            logger.info(
                "upstream %s: no answer within %.1fs; trying the next one", upstream, timeout_per_upstream
            )
        return None

    async def _ask_udp(self, query: bytes, question: bytes, *, upstream: HostPort) -> Reply:
        channel = await self._channel(upstream)
        ident = channel.fresh_id()
        pending = _Pending(question)
        channel.pending[ident] = pending
        try:
            channel.raw.send(ident + query[2:])  # a full send buffer raises BlockingIOError: next upstream
            self.queries_sent += 1
            await pending.done.wait()
        finally:
            del channel.pending[ident]
        if pending.reply is None:
            raise UpstreamReplyInvalid(f"upstream {upstream}: {pending.problem}")
        return pending.reply

    async def _channel(self, upstream: HostPort) -> _Channel:
        """The socket to `upstream`, made and connected on first use (and again after it broke)."""
        channel = self._channels.get(upstream)
        if channel is not None:
            return channel
        family = socket.AF_INET6 if ":" in upstream.host else socket.AF_INET
        # A host name is looked up here, off the event loop; a literal costs nothing.
        address = (await trio.socket.getaddrinfo(upstream.host, upstream.port, family, socket.SOCK_DGRAM))[0][
            4
        ]
        channel = self._channels.get(upstream)  # another task may have made it while we looked the name up
        if channel is not None:
            return channel
        raw = socket.socket(family, socket.SOCK_DGRAM)
        try:
            raw.setblocking(False)
            raw.connect(address)
        except OSError:
            raw.close()
            raise
        channel = _Channel(upstream, raw)
        self._channels[upstream] = channel
        self._reader_nursery.start_soon(self._read, channel)
        return channel

    async def _read(self, channel: _Channel) -> None:
        """Hand each datagram on `channel` to the query waiting with its ID, until the socket breaks."""
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
                        channel.fail_all("refused (ICMP port unreachable)")
                        continue
                    _deliver(channel, data)
        except OSError as exc:
            logger.warning(
                "upstream %s: socket failed (%s); opening a new one on the next query", channel.upstream, exc
            )
            channel.fail_all(f"socket failed ({exc})")
        finally:
            if self._channels.get(channel.upstream) is channel:
                del self._channels[channel.upstream]
            channel.raw.close()


def _deliver(channel: _Channel, data: bytes) -> None:
    pending = channel.pending.get(data[:2])
    if pending is None or pending.done.is_set():
        return  # late (the asker timed out) or stray
    try:
        reply = read_reply(data)
    except WireFormatError as exc:
        pending.fail(f"junk reply ({exc})")
        return
    if reply.question != pending.question:
        # Perhaps a late reply to an earlier query that had the same ID: not ours; keep waiting.
        logger.info("upstream %s: reply for another question ignored", channel.upstream)
        return
    pending.reply = reply
    pending.done.set()


async def serve_upstreams(
    upstreams: tuple[HostPort, ...], *, task_status: trio.TaskStatus[Upstreams] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run the readers of the upstream sockets until cancelled; `task_status.started` gets the `Upstreams`.

    Resource handling:
        Each socket belongs to its reader task, which closes it when it ends (cancelled, or the socket broke).
    """
    async with trio.open_nursery() as reader_nursery:
        task_status.started(Upstreams(upstreams, reader_nursery=reader_nursery))
        await trio.sleep_forever()


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
