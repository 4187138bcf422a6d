"""The registrar over a real gRPC client (grpcio): register, watch (first sync, resume, filter), slow watchers,
invalid requests, and a restart on the same embedded store."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import trio

from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.proto.registry.v1 import registry_pb2
from aether.registrar import SERVICE_NAME, open_embedded_backend, serve_registrar
from aether.registrar.snapshot import Change, EndpointRegistered, Mutation, RegistrySnapshot
from aether.rpc.listen import ListenAddress
from aether.testing.memory_backend import MemoryBackend
from tests.registrar._grpc import (
    ADDED,
    COMPLETE,
    DB,
    FULL,
    REMOVED,
    SERVICE_ADDED,
    SERVICE_REMOVED,
    WEB,
    register,
    registration,
    rpc,
    serving_registrar,
    watching,
)


@contextlib.asynccontextmanager
async def _registrar(directory: Path, socket: Path, **options: Any) -> AsyncIterator[None]:
    async with open_embedded_backend(directory) as backend, trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_registrar(
                backend=backend, listen=ListenAddress.unix(socket), task_status=task_status, **options
            )
        )
        with trio.fail_after(30):
            yield
        nursery.cancel_scope.cancel()


async def test_a_watcher_gets_a_full_sync_then_each_change_with_the_service_announced_first(
    tmp_path: Path,
) -> None:
    """First sync: marker, catalog, endpoints, completion; a new service's SERVICE_ADDED precedes its endpoint."""
    socket = tmp_path / "registrar.sock"
    async with _registrar(tmp_path / "store", socket):
        await register(socket, "10.0.0.1")
        async with watching(socket, cluster_name="c", node_name="n") as watch:
            assert await watch.until_complete() == [
                (FULL, "", "", "1"),
                (SERVICE_ADDED, WEB, "", "1"),
                (FULL, WEB, "10.0.0.1", "1"),
                (COMPLETE, "", "", "1"),
            ]
            await register(socket, "10.0.1.1", service=DB)
            await rpc(
                socket, "UnregisterEndpoint", pb.UnregisterEndpointRequest(service_name=WEB, ips=["10.0.0.1"])
            )
            assert await watch.take(4) == [
                (SERVICE_ADDED, DB, "", "2"),
                (ADDED, DB, "10.0.1.1", "2"),
                (REMOVED, WEB, "10.0.0.1", "3"),
                (SERVICE_REMOVED, WEB, "", "3"),
            ]
        listed = await rpc(socket, "ListAllEndpoints", pb.ListAllEndpointsRequest())
        assert (listed.version, sorted(listed.services), listed.services[DB].endpoints[0].ip) == (
            "3",
            [DB],
            "10.0.1.1",
        )


async def test_resume_from_current_old_and_too_old_versions(tmp_path: Path) -> None:
    """Current: only SNAPSHOT_COMPLETE. In history: what was missed. Older than history (2 changes): full sync."""
    socket = tmp_path / "registrar.sock"
    async with _registrar(tmp_path / "store", socket, history_limit=2):
        for index in range(1, 5):
            await register(socket, f"10.0.0.{index}")
        async with watching(socket, last_version="4") as watch:
            assert await watch.until_complete() == [(COMPLETE, "", "", "4")]
        async with watching(socket, last_version="3") as watch:
            assert await watch.until_complete() == [(ADDED, WEB, "10.0.0.4", "4"), (COMPLETE, "", "", "4")]
        async with watching(socket, last_version="1") as watch:
            events = await watch.until_complete()
            assert [event[0] for event in events] == [FULL, SERVICE_ADDED, FULL, FULL, FULL, FULL, COMPLETE]


async def test_a_filtered_watcher_gets_the_whole_catalog_but_only_its_services_endpoints(
    tmp_path: Path,
) -> None:
    """Filter {DB}: WEB's SERVICE_ADDED arrives, WEB's endpoints do not."""
    socket = tmp_path / "registrar.sock"
    async with (
        _registrar(tmp_path / "store", socket),
        watching(socket, filter=pb.ServiceFilter(services=[DB])) as watch,
    ):
        assert await watch.until_complete() == [(FULL, "", "", "0"), (COMPLETE, "", "", "0")]
        await register(socket, "10.0.0.1")
        await register(socket, "10.0.1.1", service=DB)
        assert await watch.take(3) == [
            (SERVICE_ADDED, WEB, "", "1"),
            (SERVICE_ADDED, DB, "", "2"),
            (ADDED, DB, "10.0.1.1", "2"),
        ]


async def test_a_slow_watcher_is_disconnected_while_the_others_keep_getting_events(tmp_path: Path) -> None:
    """A watcher that stops reading falls behind (buffer 4) and ends RESOURCE_EXHAUSTED; a reading one gets all."""
    socket = tmp_path / "registrar.sock"
    big = {
        "blob": "x" * 1_500_000
    }  # fills HTTP/2 flow-control windows fast, so the stalled stream really stalls
    async with (
        _registrar(tmp_path / "store", socket, watcher_buffer=4),
        watching(socket, node_name="slow", read=False) as slow,
        watching(socket, node_name="fast") as fast,
    ):
        await fast.until_complete()
        for index in range(1, 11):
            await register(socket, f"10.0.0.{index}", metadata=big)
        events = await fast.take(11)
        assert [event[2] for event in events if event[0] == ADDED] == [
            f"10.0.0.{index}" for index in range(1, 11)
        ]
        slow.reading.set()
        error: Any = None
        while error is None:
            item = await slow.next()
            if isinstance(item, grpc.RpcError):
                error = item
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.details().startswith("watcher fell behind by ")
        assert error.details().endswith(" changes; reconnect to resync")
        await register(socket, "10.0.0.99")
        assert await fast.take(1) == [(ADDED, WEB, "10.0.0.99", "11")]


BAD_REQUESTS = [
    pytest.param(
        "RegisterEndpoint",
        registration("10.0.0.1", service="web"),
        "service_name: must be '<namespace>/<serviceAccount>' in DNS-1123 lowercase form (got 'web')",
        id="service-key-without-namespace",
    ),
    pytest.param(
        "RegisterEndpoint",
        registration("10.0.0.300"),
        "endpoint.ip: must be an ipv4 or ipv6 address (got '10.0.0.300')",
        id="bad-ip",
    ),
    pytest.param(
        "RegisterEndpoint",
        pb.RegisterEndpointRequest(
            service_name=WEB, endpoint=registry_pb2.ServiceEndpoint(ip="10.0.0.1", port=70000)
        ),
        "endpoint.port: must be 1..65535 (got 70000)",
        id="port-out-of-range",
    ),
    pytest.param(
        "RegisterEndpoint",
        pb.RegisterEndpointRequest(service_name=WEB),
        "endpoint: must be set (got None)",
        id="no-endpoint",
    ),
    pytest.param(
        "RegisterEndpoint",
        pb.RegisterEndpointRequest(
            service_name=WEB, endpoint=registry_pb2.ServiceEndpoint(ip="10.0.0.1", port=0)
        ),
        "endpoint.port: must be 1..65535 (got 0)",
        id="port-zero",
    ),
    pytest.param(
        "RegisterEndpoint",
        pb.RegisterEndpointRequest(
            service_name=WEB,
            endpoint=registry_pb2.ServiceEndpoint(ip="10.0.0.1", port=8080, ports=[8080, 65536]),
        ),
        "endpoint.ports: must be 1..65535 (got 65536)",
        id="extra-port-out-of-range",
    ),
    pytest.param(
        "RegisterEndpoint",
        pb.RegisterEndpointRequest(
            service_name=WEB, protocol=7, endpoint=registry_pb2.ServiceEndpoint(ip="10.0.0.1", port=8080)
        ),
        "protocol: must be PROTOCOL_HTTP or PROTOCOL_TCP (got 7)",
        id="unknown-protocol",
    ),
    pytest.param(
        "RegisterEndpoint",
        pb.RegisterEndpointRequest(
            service_name=WEB, endpoint=registry_pb2.ServiceEndpoint(ip="not-an-ip", port=8080)
        ),
        "endpoint.ip: must be an ipv4 or ipv6 address (got 'not-an-ip')",
        id="unparsable-ip",
    ),
    pytest.param(
        "RegisterEndpoint",
        pb.RegisterEndpointRequest(
            service_name=WEB, endpoint=registry_pb2.ServiceEndpoint(ip="10.0.0.1", port=8080, health=9)
        ),
        "endpoint.health: must be a known Health (got 9)",
        id="unknown-health",
    ),
    pytest.param(
        "RegisterEndpoint",
        registration("10.0.0.1", service="shop/" + "w" * 254),
        f"service_name: must be '<namespace>/<serviceAccount>' in DNS-1123 lowercase form (got 'shop/{'w' * 254}')",
        id="service-account-too-long",
    ),
    pytest.param(
        "UnregisterEndpoint",
        pb.UnregisterEndpointRequest(service_name="shop", ips=["10.0.0.1"]),
        "service_name: must be '<namespace>/<serviceAccount>' in DNS-1123 lowercase form (got 'shop')",
        id="unregister-bad-service-key",
    ),
    pytest.param(
        "UnregisterEndpoint",
        pb.UnregisterEndpointRequest(service_name=WEB, ips=["10.0.0.1", "10.0.0"]),
        "ips: must be an ipv4 or ipv6 address (got '10.0.0')",
        id="unregister-unparsable-ip",
    ),
    pytest.param(
        "UnregisterEndpoint",
        pb.UnregisterEndpointRequest(service_name=WEB, ips=["fe80::0001"]),
        "ips: must be in canonical form 'fe80::1' (got 'fe80::0001')",
        id="non-canonical-ip",
    ),
    pytest.param(
        "UnregisterEndpoint",
        pb.UnregisterEndpointRequest(service_name=WEB),
        "ips: must name at least one ip (got [])",
        id="no-ips",
    ),
    pytest.param(
        "RegisterEndpoint",
        registration("fe80::1%eth0"),
        "endpoint.ip: must be an ipv6 address without a zone ('%...') (got 'fe80::1%eth0')",
        id="ipv6-with-zone",
    ),
    pytest.param(
        "UnregisterEndpoint",
        pb.UnregisterEndpointRequest(service_name=WEB, ips=["fe80::1%1"]),
        "ips: must be an ipv6 address without a zone ('%...') (got 'fe80::1%1')",
        id="unregister-ipv6-with-zone",
    ),
]


@pytest.mark.parametrize(("method", "request_message", "message"), BAD_REQUESTS)
async def test_an_invalid_request_fails_with_invalid_argument_naming_the_field(
    tmp_path: Path, method: str, request_message: Any, message: str
) -> None:
    """INVALID_ARGUMENT, the field, the rule and the value; nothing is registered."""
    socket = tmp_path / "registrar.sock"
    async with _registrar(tmp_path / "store", socket):
        with pytest.raises(grpc.RpcError) as caught:
            await rpc(socket, method, request_message)
        assert (caught.value.code(), caught.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)
        listed = await rpc(socket, "ListAllEndpoints", pb.ListAllEndpointsRequest())
        assert listed.version == "0"


def _call_raw(socket: Path, name: str, payload: bytes) -> grpc.RpcError:
    """Send `payload` as the request bytes of unary method `name`; return the error the registrar answers."""
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        call = channel.unary_unary(f"/{SERVICE_NAME}/{name}")  # no serializer: the bytes go as they are
        with pytest.raises(grpc.RpcError) as caught:
            call(payload, timeout=5)
    return caught.value


@pytest.mark.parametrize("name", ["RegisterEndpoint", "UnregisterEndpoint", "ListAllEndpoints"])
async def test_request_bytes_that_are_no_message_fail_with_invalid_argument(
    tmp_path: Path, name: str
) -> None:
    """Junk bytes as a request: INVALID_ARGUMENT naming the method and the message type (not CANCELLED with a
    traceback's repr), and the registrar goes on serving."""
    socket = tmp_path / "registrar.sock"
    async with _registrar(tmp_path / "store", socket):
        error = await trio.to_thread.run_sync(_call_raw, socket, name, b"\xff\xff\xff\xff junk")
        assert (error.code(), error.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{name}: the request (9 bytes) is not a valid aether.registrar.v1.{name}Request message",
        )
        await register(socket, "10.0.0.1")
        listed = await rpc(socket, "ListAllEndpoints", pb.ListAllEndpointsRequest())
        assert listed.version == "1"


async def test_an_invalid_watch_fails_with_invalid_argument(tmp_path: Path) -> None:
    """A last_version this registrar never sent, a bad service key in the filter, or a filter of 100,000 services
    end the stream at once."""
    socket = tmp_path / "registrar.sock"
    async with _registrar(tmp_path / "store", socket):
        async with watching(socket, last_version="v7") as watch:
            error = await watch.next()
            assert (error.code(), error.details()) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "last_version: must be empty or a version this registrar sent (got 'v7')",
            )
        async with watching(socket, filter=pb.ServiceFilter(services=["Shop/Web"])) as watch:
            error = await watch.next()
            assert error.details() == (
                "filter.services: must be '<namespace>/<serviceAccount>' in DNS-1123 lowercase form (got 'Shop/Web')"
            )
        huge = pb.ServiceFilter(services=[f"shop/service-{number}" for number in range(100_000)])
        async with watching(socket, filter=huge) as watch:
            error = await watch.next()
            assert (error.code(), error.details()) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "filter.services: must name at most 10000 services (unset the filter to watch every service)"
                " (got '100000 services')",
            )


async def test_the_embedded_store_survives_a_restart_and_a_watcher_resumes(tmp_path: Path) -> None:
    """Stop the registrar, start a new one on the same directory: same endpoints and version; resumes are deltas."""
    socket = tmp_path / "registrar.sock"
    async with _registrar(tmp_path / "store", socket):
        await register(socket, "10.0.0.1")
        await register(socket, "10.0.0.2")
        async with watching(socket) as watch:
            last = (await watch.until_complete())[-1][3]
    assert last == "2"
    async with _registrar(tmp_path / "store", socket):
        listed = await rpc(socket, "ListAllEndpoints", pb.ListAllEndpointsRequest())
        assert (listed.version, [one.ip for one in listed.services[WEB].endpoints]) == (
            "2",
            ["10.0.0.1", "10.0.0.2"],
        )
        async with watching(socket, last_version=last) as watch:
            assert await watch.until_complete() == [(COMPLETE, "", "", "2")]
            await register(socket, "10.0.0.3")
            assert await watch.take(1) == [(ADDED, WEB, "10.0.0.3", "3")]
        async with watching(socket, last_version="1") as watch:
            assert await watch.until_complete() == [
                (ADDED, WEB, "10.0.0.2", "2"),
                (ADDED, WEB, "10.0.0.3", "3"),
                (COMPLETE, "", "", "3"),
            ]


async def test_statistics_count_versions_mutations_and_watchers(tmp_path: Path) -> None:
    """A registrar on the memory backend: one change, one no-op, one watcher connected; the backend saw one mutation."""
    socket = tmp_path / "registrar.sock"
    backend = MemoryBackend()
    async with serving_registrar(backend, socket) as registrar:
        await register(socket, "10.0.0.1")
        await register(socket, "10.0.0.1")
        async with watching(socket, node_name="n") as watch:
            await watch.until_complete()
            statistics = registrar.statistics()
    assert (statistics.version, statistics.endpoints, statistics.services) == (1, 1, 1)
    assert (statistics.mutations_applied, statistics.mutations_unchanged) == (1, 1)
    assert (statistics.broadcaster.watchers, backend.snapshot.version, len(backend.applied)) == (1, 1, 1)


async def test_live_changes_go_from_publish_to_the_streams_in_order(tmp_path: Path) -> None:
    """Two synced watchers (one filtered to WEB): each of 20 registrations is handed to both streams by the publish
    itself (no watch task woken), and each watcher reads them all, in order."""
    socket = tmp_path / "registrar.sock"
    async with serving_registrar(MemoryBackend(), socket) as registrar:
        await register(socket, "10.0.0.1")
        async with (
            watching(socket, node_name="all") as everything,
            watching(socket, node_name="web", filter=pb.ServiceFilter(services=[WEB])) as web,
        ):
            await everything.until_complete()
            await web.until_complete()
            for index in range(2, 22):
                await register(socket, f"10.0.0.{index}")
            expected = [(ADDED, WEB, f"10.0.0.{index}", str(index)) for index in range(2, 22)]
            assert await everything.take(20) == expected
            assert await web.take(20) == expected
        assert registrar.statistics().broadcaster.delivered_directly_total == 40


async def test_a_tcp_listener_binds_only_the_address_it_is_given() -> None:
    """Served on 127.0.0.1: reachable there, refused on 127.0.0.2 (same loopback interface, another address)."""
    async with trio.open_nursery() as nursery:
        address = await nursery.start(
            functools.partial(
                serve_registrar, backend=MemoryBackend(), listen=ListenAddress.tcp(host="127.0.0.1", port=0)
            )
        )
        assert address.port is not None
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", address.port)
            await stream.aclose()
            with trio.socket.socket() as probe, pytest.raises(ConnectionRefusedError):
                await probe.connect(("127.0.0.2", address.port))
        nursery.cancel_scope.cancel()


class _HeldBackend(MemoryBackend):
    """A memory backend whose next write once `hold` is set waits for `release`: the writes after it queue up."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.holding = trio.Event()
        self.release = trio.Event()

    async def apply(
        self, mutation: Mutation, *, snapshot: RegistrySnapshot, changes: tuple[Change, ...]
    ) -> None:
        if self.hold:
            self.hold = False
            self.holding.set()
            await self.release.wait()
        await super().apply(mutation, snapshot=snapshot, changes=changes)


async def test_writes_that_wait_while_one_is_stored_are_published_together_in_order(tmp_path: Path) -> None:
    """Group commit: while the first registration is being stored, three more wait for the owner; they join its
    publication: one fan-out of the four, each caller answered after it, the watchers getting them in order."""
    socket = tmp_path / "registrar.sock"
    backend = _HeldBackend()
    async with serving_registrar(backend, socket) as registrar:
        await register(socket, "10.0.0.1")  # WEB enters the catalog: the changes below are its endpoints only
        async with (
            watching(socket, node_name="all") as everything,
            watching(socket, node_name="web", filter=pb.ServiceFilter(services=[WEB])) as web,
        ):
            await everything.until_complete()
            await web.until_complete()
            before = registrar.statistics().broadcaster
            backend.hold = True
            async with trio.open_nursery() as callers:
                callers.start_soon(register, socket, "10.0.0.2")
                await backend.holding.wait()
                for index in range(3, 6):
                    callers.start_soon(register, socket, f"10.0.0.{index}")
                assert registrar._send is not None
                while registrar._send.statistics().tasks_waiting_send < 3:  # noqa: ASYNC110 - a condition, no event
                    await trio.sleep(0.01)
                backend.release.set()
            after = registrar.statistics().broadcaster
            seen = await everything.take(4)
            assert await web.take(4) == seen
    assert (after.publishes - before.publishes, after.published_changes - before.published_changes) == (1, 4)
    # The three waiting callers' order is theirs; the versions follow the order the owner took them, as stored.
    stored = [
        mutation.endpoint.ip for mutation in backend.applied if isinstance(mutation, EndpointRegistered)
    ]
    assert stored[:2] == ["10.0.0.1", "10.0.0.2"]
    assert sorted(stored[2:]) == ["10.0.0.3", "10.0.0.4", "10.0.0.5"]
    assert seen == [(ADDED, WEB, ip, str(version)) for version, ip in enumerate(stored[1:], start=2)]
