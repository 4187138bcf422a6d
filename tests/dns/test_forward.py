"""`HostPort` parsing, resolv.conf reading, and `Upstreams.ask` against fake upstreams on loopback."""

from __future__ import annotations

import functools

import dnslib
import pytest
import trio

from aether.dns import (
    HostPort,
    ListenAddressInvalid,
    Transport,
    Upstreams,
    serve_upstreams,
    upstreams_from_resolv_conf,
)


def test_host_port_parses_v4_v6_and_default_ports() -> None:
    """`HOST:PORT`, `[V6]:PORT` and a bare host with a default port."""
    assert HostPort.parse("127.0.0.1:53") == HostPort(host="127.0.0.1", port=53)
    assert HostPort.parse("[::1]:5353") == HostPort(host="::1", port=5353)
    assert HostPort.parse("10.0.0.1", default_port=53) == HostPort(host="10.0.0.1", port=53)
    assert str(HostPort(host="::1", port=53)) == "[::1]:53"


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:99999", ":53", "host:port"])
def test_host_port_rejects_bad_text(text: str) -> None:
    """Missing or out-of-range ports are rejected with the text in the message."""
    with pytest.raises(ListenAddressInvalid, match=rf"^address {text!r}: must be HOST:PORT"):
        HostPort.parse(text)


def test_resolv_conf_nameservers_in_order() -> None:
    """Only `nameserver` lines count, on port 53, scope IDs dropped."""
    content = "# c\nsearch x\nnameserver 10.0.0.2\nnameserver fe80::1%eth0\noptions ndots:5\n"
    assert upstreams_from_resolv_conf(content) == (
        HostPort(host="10.0.0.2", port=53),
        HostPort(host="fe80::1", port=53),
    )


async def test_forward_over_udp_and_tcp(nursery: trio.Nursery, upstream: HostPort) -> None:
    """The fake upstream's answer comes back unchanged over both transports."""
    pool: Upstreams = await nursery.start(serve_upstreams, (upstream,))
    query = bytes(dnslib.DNSRecord.question("www.example").pack())
    for transport in Transport:
        reply = await pool.ask(query, transport=transport)
        assert reply is not None
        assert [str(rr.rdata) for rr in dnslib.DNSRecord.parse(reply.message).rr] == ["192.0.2.1"]


async def test_all_upstreams_silent_gives_none(nursery: trio.Nursery, silent_upstream: HostPort) -> None:
    """Every upstream timing out returns None (the server then answers SERVFAIL)."""
    pool: Upstreams = await nursery.start(
        functools.partial(serve_upstreams, (silent_upstream,), timeout_per_upstream=0.1)
    )
    query = bytes(dnslib.DNSRecord.question("www.example").pack())
    with trio.fail_after(5):
        assert await pool.ask(query, transport=Transport.UDP) is None


async def test_udp_queries_share_one_socket_per_upstream(nursery: trio.Nursery) -> None:
    """Concurrent and successive UDP queries to one upstream leave from one source port, each with its own ID."""
    seen: list[tuple[int, int]] = []

    replies: list[object] = []
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)

    async def serve() -> None:
        while True:
            packet, client = await sock.recvfrom(512)
            seen.append((client[1], int.from_bytes(packet[:2], "big")))
            await sock.sendto(bytes(dnslib.DNSRecord.parse(packet).reply().pack()), client)

    # The upstream's task runs in a nursery of the test's own, ended before its socket closes.
    with sock:
        await sock.bind(("127.0.0.1", 0))
        upstream = HostPort(host="127.0.0.1", port=sock.getsockname()[1])
        async with trio.open_nursery() as upstream_side:
            upstream_side.start_soon(serve)
            pool: Upstreams = await nursery.start(serve_upstreams, (upstream,))

            async def ask(name: str) -> None:
                query = bytes(dnslib.DNSRecord.question(name).pack())
                replies.append(await pool.ask(query, transport=Transport.UDP))

            with trio.fail_after(10):
                async with trio.open_nursery() as askers:
                    for index in range(20):
                        askers.start_soon(ask, f"name{index}.example")
                await ask("last.example")
            upstream_side.cancel_scope.cancel()
    assert len(replies) == 21
    assert None not in replies
    assert len({port for port, _ in seen}) == 1
    assert pool.queries_sent == 21


async def test_a_refusing_upstream_is_left_at_once_for_the_next(
    nursery: trio.Nursery, upstream: HostPort
) -> None:
    """ICMP port unreachable from the first upstream moves the query on to the second without waiting out the
    (here one-minute) timeout."""
    closed = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await closed.bind(("127.0.0.1", 0))
    refusing = HostPort(host="127.0.0.1", port=closed.getsockname()[1])
    closed.close()
    pool: Upstreams = await nursery.start(
        functools.partial(serve_upstreams, (refusing, upstream), timeout_per_upstream=60)
    )
    query = bytes(dnslib.DNSRecord.question("www.example").pack())
    with trio.fail_after(10):
        reply = await pool.ask(query, transport=Transport.UDP)
    assert reply is not None
    assert [str(rr.rdata) for rr in dnslib.DNSRecord.parse(reply.message).rr] == ["192.0.2.1"]
