"""`serve_mesh_dns` against real clients (dnspython, and dig when installed) on loopback, with fake upstreams."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.resolver
import pytest
import trio

from aether.dns import HostPort, RunningMeshDns, serve_mesh_dns
from tests.needs import needs

from .conftest import MESH_DOMAIN, write_records

CLIENT_TIMEOUT = 5.0


async def udp(server: RunningMeshDns, name: str, rdtype: str = "A", **make: object) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype, **make)  # type: ignore[arg-type]
    return await trio.to_thread.run_sync(
        lambda: dns.query.udp(query, "127.0.0.1", port=server.address.port, timeout=CLIENT_TIMEOUT)
    )


async def tcp(server: RunningMeshDns, name: str, rdtype: str = "A") -> dns.message.Message:
    query = dns.message.make_query(name, rdtype)
    return await trio.to_thread.run_sync(
        lambda: dns.query.tcp(query, "127.0.0.1", port=server.address.port, timeout=CLIENT_TIMEOUT)
    )


def addresses(message: dns.message.Message) -> list[str]:
    return sorted(item.address for rrset in message.answer for item in rrset)


async def test_a_query_for_a_mesh_name_answers_its_ip(server: RunningMeshDns) -> None:
    """An A query for `<svc>.<ns>.aether.internal` gets the record's IP, authoritatively, over UDP and TCP."""
    for message in [
        await udp(server, "reviews.default.aether.internal"),
        await tcp(server, "reviews.default.aether.internal"),
    ]:
        assert message.rcode() == dns.rcode.NOERROR
        assert message.flags & dns.flags.AA
        assert addresses(message) == ["10.96.0.10"]


async def test_repeated_query_is_answered_from_the_cache(server: RunningMeshDns) -> None:
    """The second identical query (new ID) is a cache hit with the right ID and the same answer."""
    first = await udp(server, "ratings.default.aether.internal")
    second = await udp(server, "ratings.default.aether.internal")
    assert addresses(first) == addresses(second) == ["10.96.0.11"]
    assert server.statistics().resolver.cache_hits >= 1


async def test_unknown_mesh_name_is_nxdomain(server: RunningMeshDns) -> None:
    """A mesh name without a record gets authoritative NXDOMAIN with the zone's SOA."""
    message = await udp(server, "nope.default.aether.internal")
    assert message.rcode() == dns.rcode.NXDOMAIN
    assert message.flags & dns.flags.AA
    assert [rrset.rdtype for rrset in message.authority] == [dns.rdatatype.SOA]


async def test_aaaa_of_a_known_name_is_nodata(server: RunningMeshDns) -> None:
    """AAAA for a known name is NOERROR with no answers."""
    message = await udp(server, "reviews.default.aether.internal", "AAAA")
    assert (message.rcode(), message.answer) == (dns.rcode.NOERROR, [])


async def test_edns_is_echoed(server: RunningMeshDns) -> None:
    """A query with EDNS0 gets an OPT record back; one without gets none."""
    with_edns = await udp(server, "reviews.default.aether.internal", use_edns=0, payload=4096)
    without = await udp(server, "reviews.default.aether.internal")
    assert (with_edns.edns, with_edns.payload) == (0, 1232)
    assert without.edns == -1


async def test_servfail_before_records_then_answers_once_loaded(
    nursery: trio.Nursery, records_path: Path, upstream: HostPort
) -> None:
    """With no record file, mesh names get SERVFAIL; once the file appears they resolve."""
    server: RunningMeshDns = await nursery.start(
        lambda task_status: serve_mesh_dns(
            listen=HostPort(host="127.0.0.1", port=0),
            records_path=records_path,
            upstreams=(upstream,),
            mesh_domain=MESH_DOMAIN,
            poll_interval=0.05,
            task_status=task_status,
        )
    )
    assert (await udp(server, "reviews.default.aether.internal")).rcode() == dns.rcode.SERVFAIL
    write_records(records_path, {"default/reviews": "10.96.0.10"}, generation=1)
    with trio.fail_after(5):
        await server.wait_generation(1)
    assert addresses(await udp(server, "reviews.default.aether.internal")) == ["10.96.0.10"]


async def test_reload_on_file_change_and_missing_file_keeps_last_records(
    server: RunningMeshDns, records_path: Path
) -> None:
    """A rewritten file is picked up (the cache is dropped); a deleted or garbled file keeps the last records."""
    assert addresses(await udp(server, "reviews.default.aether.internal")) == ["10.96.0.10"]
    write_records(records_path, {"default/reviews": "10.96.0.99", "default/bad": "not-an-ip"}, generation=2)
    with trio.fail_after(5):
        await server.wait_generation(2)
    assert addresses(await udp(server, "reviews.default.aether.internal")) == ["10.96.0.99"]
    # Garbled, put in place in one step: a poll between an unlink and a write would count the file missing
    # first, and the test would delete the garbled file before any poll saw it.
    side = records_path.with_suffix(".garbled")
    side.write_text("{ half written")
    os.replace(side, records_path)
    with trio.fail_after(5):
        await server.wait_record_file_problems(1)
    await trio.Path(records_path).unlink()
    with trio.fail_after(5):
        await server.wait_record_file_problems(2)
    assert addresses(await udp(server, "reviews.default.aether.internal")) == ["10.96.0.99"]
    assert server.statistics().resolver.generation == 2


async def test_outside_names_are_forwarded(server: RunningMeshDns) -> None:
    """A name outside the mesh domain gets the fake upstream's answer."""
    message = await udp(server, "www.example.")
    assert addresses(message) == ["192.0.2.1"]
    assert server.statistics().forwarded == 1


async def test_big_forwarded_answer_truncates_over_udp_and_resolver_falls_back_to_tcp(
    server: RunningMeshDns,
) -> None:
    """A 60-record answer sets TC over UDP; dnspython's resolver retries over TCP and gets all 60."""
    truncated = await udp(server, "big.example.")
    assert truncated.flags & dns.flags.TC
    assert len(addresses(await tcp(server, "big.example."))) == 60
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = ["127.0.0.1"]
    resolver.port = server.address.port
    resolver.lifetime = CLIENT_TIMEOUT
    answer = await trio.to_thread.run_sync(lambda: resolver.resolve("big.example.", "A"))
    assert len(list(answer)) == 60


async def test_upstream_timeout_gives_servfail(
    nursery: trio.Nursery, records_path: Path, silent_upstream: HostPort
) -> None:
    """When every upstream stays silent, the client gets SERVFAIL after the per-upstream timeouts."""
    server: RunningMeshDns = await nursery.start(
        lambda task_status: serve_mesh_dns(
            listen=HostPort(host="127.0.0.1", port=0),
            records_path=records_path,
            upstreams=(silent_upstream, silent_upstream),
            mesh_domain=MESH_DOMAIN,
            upstream_timeout=0.2,
            task_status=task_status,
        )
    )
    assert (await udp(server, "www.example.")).rcode() == dns.rcode.SERVFAIL
    assert server.statistics().upstream_failures == 1


async def test_a_silent_upstream_is_skipped_for_the_next(
    nursery: trio.Nursery, records_path: Path, silent_upstream: HostPort, upstream: HostPort
) -> None:
    """The first upstream times out; the second one's answer reaches the client."""
    server: RunningMeshDns = await nursery.start(
        lambda task_status: serve_mesh_dns(
            listen=HostPort(host="127.0.0.1", port=0),
            records_path=records_path,
            upstreams=(silent_upstream, upstream),
            mesh_domain=MESH_DOMAIN,
            upstream_timeout=0.2,
            task_status=task_status,
        )
    )
    assert addresses(await udp(server, "www.example.")) == ["192.0.2.1"]
    assert addresses(await tcp(server, "www.example.")) == ["192.0.2.1"]


async def test_malformed_packets_are_dropped_or_formerr_and_the_server_keeps_serving(
    server: RunningMeshDns, caplog: pytest.LogCaptureFixture
) -> None:
    """A runt packet is dropped, a header with a garbage body gets FORMERR, TCP garbage closes that connection."""
    with trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        await sock.connect(("127.0.0.1", server.address.port))
        await sock.send(b"\x01\x02\x03")
        await sock.send(b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xff\xff\xff")
        with trio.fail_after(5):
            response = await sock.recv(512)
    assert response == b"\xab\xcd\x81\x01\x00\x00\x00\x00\x00\x00\x00\x00"
    stream = await trio.open_tcp_stream("127.0.0.1", server.address.port)
    async with stream:
        await stream.send_all(b"\x00\x03abc")
        with trio.fail_after(5):
            assert await stream.receive_some() == b""
    assert addresses(await udp(server, "reviews.default.aether.internal")) == ["10.96.0.10"]
    assert server.statistics().malformed == 3
    assert any("shorter than a DNS header" in record.getMessage() for record in caplog.records)
    assert any("answered FORMERR" in record.getMessage() for record in caplog.records)


@needs("dig")
async def test_dig_resolves_mesh_names_and_falls_back_to_tcp(server: RunningMeshDns) -> None:
    """dig gets the A record, NXDOMAIN for an unknown name, and retries a truncated answer over TCP."""

    async def dig(*arguments: str) -> str:
        result = await trio.run_process(
            ["dig", "@127.0.0.1", "-p", str(server.address.port), "+time=3", "+tries=1", *arguments],
            capture_stdout=True,
        )
        return result.stdout.decode()

    assert (await dig("reviews.default.aether.internal", "A", "+short")).split() == ["10.96.0.10"]
    assert "status: NXDOMAIN" in await dig("nope.default.aether.internal", "A")
    assert "status: NOERROR" in await dig("reviews.default.aether.internal", "AAAA")
    big = await dig("big.example.", "A", "+bufsize=512")
    assert "Truncated, retrying in TCP mode" in big
    assert big.count("192.0.2.") == 60


async def test_pipelined_tcp_queries_on_one_connection_are_all_answered(server: RunningMeshDns) -> None:
    """Three length-framed queries sent in one write get three answers, in order (RFC 7766 6.2.1.1)."""
    names = [
        "reviews.default.aether.internal",
        "nope.default.aether.internal",
        "ratings.default.aether.internal",
    ]
    payload = b""
    for index, name in enumerate(names):
        query = dns.message.make_query(name, "A", id=index + 1).to_wire()
        payload += len(query).to_bytes(2, "big") + query
    stream = await trio.open_tcp_stream("127.0.0.1", server.address.port)
    async with stream:
        await stream.send_all(payload)
        buffer = b""
        replies: list[dns.message.Message] = []
        with trio.fail_after(5):
            while len(replies) < 3:
                buffer += await stream.receive_some()
                while len(buffer) >= 2 and len(buffer) >= 2 + int.from_bytes(buffer[:2], "big"):
                    length = int.from_bytes(buffer[:2], "big")
                    replies.append(dns.message.from_wire(buffer[2 : 2 + length]))
                    buffer = buffer[2 + length :]
    assert [(reply.id, reply.rcode(), addresses(reply)) for reply in replies] == [
        (1, dns.rcode.NOERROR, ["10.96.0.10"]),
        (2, dns.rcode.NXDOMAIN, []),
        (3, dns.rcode.NOERROR, ["10.96.0.11"]),
    ]
