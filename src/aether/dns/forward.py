"""Forwarding of names outside the mesh domain to upstream resolvers, over UDP or TCP, one upstream at a time."""

from __future__ import annotations

import logging
import socket
import struct

import attrs
import dnslib
import trio

from aether.dns.answer import Transport
from aether.dns.errors import ListenAddressInvalid

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
    """An upstream sent something that is not an answer to our query (ignored; we try the next one)."""


async def forward_query(
    query: bytes, *, upstreams: tuple[HostPort, ...], transport: Transport, timeout_per_upstream: float
) -> bytes | None:
    """Ask each upstream in turn, each within `timeout_per_upstream` seconds; return the first answer.

    Returns:
        The upstream's reply, or None when every upstream failed or timed out (the caller answers SERVFAIL).
    """
    for upstream in upstreams:
        with trio.move_on_after(timeout_per_upstream):
            try:
                if transport is Transport.TCP:
                    return await _ask_tcp(query, upstream=upstream)
                return await _ask_udp(query, upstream=upstream)
            except (OSError, trio.BrokenResourceError, UpstreamReplyInvalid) as exc:
                logger.info("upstream %s failed: %s; trying the next one", upstream, exc)
                continue
        logger.info(
            "upstream %s: no answer within %.1fs; trying the next one", upstream, timeout_per_upstream
        )
    return None


async def _ask_udp(query: bytes, *, upstream: HostPort) -> bytes:
    """One UDP exchange with `upstream` on a fresh socket (a fresh random source port per query)."""
    family = socket.AF_INET6 if ":" in upstream.host else socket.AF_INET
    with trio.socket.socket(family, socket.SOCK_DGRAM) as sock:
        await sock.connect((upstream.host, upstream.port))
        await sock.send(query)
        while True:
            reply = await sock.recv(_MAX_UDP_REPLY)
            # A connected socket only hears from the upstream; still, a stray or late reply is skipped.
            if _answers(query, reply):
                return reply


async def _ask_tcp(query: bytes, *, upstream: HostPort) -> bytes:
    """One TCP exchange with `upstream` (RFC 1035 4.2.2 length framing)."""
    stream = await trio.open_tcp_stream(upstream.host, upstream.port)
    async with stream:
        await stream.send_all(_LENGTH.pack(len(query)) + query)
        buffer = b""
        while True:
            chunk = await stream.receive_some()
            if not chunk:
                raise UpstreamReplyInvalid(f"upstream {upstream}: closed the connection before answering")
            buffer += chunk
            if len(buffer) >= 2 and len(buffer) >= 2 + _LENGTH.unpack_from(buffer)[0]:
                reply = buffer[2 : 2 + _LENGTH.unpack_from(buffer)[0]]
                if not _answers(query, reply):
                    raise UpstreamReplyInvalid(f"upstream {upstream}: reply does not match the query")
                return reply


def _answers(query: bytes, reply: bytes) -> bool:
    """Whether `reply` is a response to `query`: same ID, QR set, same question (case included)."""
    if len(reply) < 12 or reply[:2] != query[:2] or not reply[2] & 0x80:
        return False
    try:
        asked = dnslib.DNSRecord.parse(query).questions
        answered = dnslib.DNSRecord.parse(reply).questions
    except Exception:  # dnslib raises several types on garbage; garbage is simply not an answer
        return False
    # An upstream may echo no question on some errors (FORMERR); accept that, else require a match.
    return not answered or [(str(q.qname), q.qtype) for q in asked] == [
        (str(q.qname), q.qtype) for q in answered
    ]
