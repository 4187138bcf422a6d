"""Shared pieces of the mesh DNS tests: a record file writer, a fake upstream resolver, and a running server."""

from __future__ import annotations

import errno
import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import dnslib
import pytest
import trio

from aether.dns import HostPort, RunningMeshDns, serve_mesh_dns

MESH_DOMAIN = "aether.internal"
UpstreamHandler = Callable[[dnslib.DNSRecord], "dnslib.DNSRecord | None"]


def write_records(path: Path, records: dict[str, object], *, generation: int) -> None:
    """Write a record file the way the agent does: to a side file, then rename into place."""
    side = path.with_suffix(".writing")
    side.write_text(
        json.dumps({"writtenAt": "2026-11-29T00:00:00Z", "generation": generation, "records": records})
    )
    os.replace(side, path)


def default_upstream_answer(request: dnslib.DNSRecord) -> dnslib.DNSRecord | None:
    """The fake upstream: `big.example.` gets 60 A records, `silent.example.` nothing, anything else one A."""
    name = str(request.q.qname).lower()
    if name.startswith("silent."):
        return None
    reply = request.reply()
    count = 60 if name.startswith("big.") else 1
    for index in range(count):
        reply.add_answer(
            dnslib.RR(request.q.qname, dnslib.QTYPE.A, rdata=dnslib.A(f"192.0.2.{index + 1}"), ttl=60)
        )
    return reply


_PORT_ATTEMPTS = 20
"""A UDP port whose TCP twin is taken is rare; twenty tries make a collision on every one practically impossible."""


async def serve_fake_upstream(
    handler: UpstreamHandler, *, task_status: trio.TaskStatus[HostPort] = trio.TASK_STATUS_IGNORED
) -> None:
    """A loopback DNS server (UDP and TCP on one port) answering with `handler`; truncates over UDP at 512."""
    for _attempt in range(_PORT_ATTEMPTS):
        udp = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        await udp.bind(("127.0.0.1", 0))
        port = udp.getsockname()[1]
        try:
            listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
        except OSError as exc:
            udp.close()  # the UDP port's TCP twin is taken (often by a client's ephemeral port): pick another
            if exc.errno != errno.EADDRINUSE:
                raise
            continue
        break
    else:
        raise OSError(errno.EADDRINUSE, "no loopback port free for both UDP and TCP")

    async def serve_udp() -> None:
        while True:
            packet, client = await udp.recvfrom(65535)
            reply = handler(dnslib.DNSRecord.parse(packet))
            if reply is None:
                continue
            data = bytes(reply.pack())
            if len(data) > 512:
                reply = dnslib.DNSRecord.parse(packet).reply()
                reply.header.tc = 1
                data = bytes(reply.pack())
            await udp.sendto(data, client)

    async def serve_tcp(stream: trio.SocketStream) -> None:
        buffer = b""
        while True:
            chunk = await stream.receive_some()
            if not chunk:
                return
            buffer += chunk
            while len(buffer) >= 2 and len(buffer) >= 2 + struct.unpack("!H", buffer[:2])[0]:
                length = struct.unpack("!H", buffer[:2])[0]
                packet, buffer = buffer[2 : 2 + length], buffer[2 + length :]
                reply = handler(dnslib.DNSRecord.parse(packet))
                if reply is not None:
                    data = bytes(reply.pack())
                    await stream.send_all(struct.pack("!H", len(data)) + data)

    with udp:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_udp)
            nursery.start_soon(trio.serve_listeners, serve_tcp, listeners)
            task_status.started(HostPort(host="127.0.0.1", port=port))


@pytest.fixture
def records_path(tmp_path: Path) -> Path:
    return tmp_path / "mesh-dns.json"


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> HostPort:
    address: HostPort = await nursery.start(serve_fake_upstream, default_upstream_answer)
    return address


@pytest.fixture
async def silent_upstream(nursery: trio.Nursery) -> HostPort:
    address: HostPort = await nursery.start(serve_fake_upstream, lambda request: None)
    return address


@pytest.fixture
async def server(nursery: trio.Nursery, records_path: Path, upstream: HostPort) -> RunningMeshDns:
    """A server on loopback with `reviews.default` = 10.96.0.10 loaded (generation 1)."""
    write_records(
        records_path, {"default/reviews": "10.96.0.10", "default/ratings": "10.96.0.11"}, generation=1
    )
    running: RunningMeshDns = await nursery.start(
        lambda task_status: serve_mesh_dns(
            listen=HostPort(host="127.0.0.1", port=0),
            records_path=records_path,
            upstreams=(upstream,),
            mesh_domain=MESH_DOMAIN,
            upstream_timeout=0.5,
            poll_interval=0.05,
            task_status=task_status,
        )
    )
    return running
