"""The agent's registrar client against a real registrar (memory backend, TCP on loopback): syncs, changes,
filters, restarts and outages become the events that fold into the registrar's registry."""

from __future__ import annotations

import contextlib
import functools
import random
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio.abc
import attrs
import grpc
import purerpc
import pytest
import trio
import trio.testing

from aether.core.events import Event
from aether.core.events.registry import (
    Endpoint,
    EndpointAdded,
    EndpointRemoved,
    EndpointsSnapshotCompleted,
    EndpointsSnapshotReceived,
    Protocol,
    RegistryServiceAdded,
    RegistryServiceRemoved,
)
from aether.core.state import State
from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.registrar import SERVICE_NAME, apply, serve_registrar
from aether.registrar.client import RegistrarClient, serve_registrar_client
from aether.registrar.convert import change_to_proto, registration_to_proto
from aether.registrar.snapshot import Change, ChangeKind, RegistrySnapshot, resync, snapshot_of
from aether.rpc.backoff import Backoff
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.testing.builders import fold_events
from aether.testing.memory_backend import MemoryBackend
from tests.registrar._builders import DB, WEB, endpoint, register

NOW = 1_700_000_000_000_000_000
FAST = Backoff(base=0.01, cap=0.05)
"""Real sockets, so a real clock: short waits keep the reconnect tests quick."""


def _call(address: ListenAddress, name: str, request: Any, response: Any) -> Any:
    with grpc.insecure_channel(f"127.0.0.1:{address.port}") as channel:
        method = channel.unary_unary(
            f"/{SERVICE_NAME}/{name}",
            request_serializer=type(request).SerializeToString,
            response_deserializer=response.FromString,
        )
        return method(request, timeout=5)


async def _register(address: ListenAddress, one: Endpoint) -> None:
    request = registration_to_proto(one)
    await trio.to_thread.run_sync(_call, address, "RegisterEndpoint", request, pb.RegisterEndpointResponse)


async def _unregister(address: ListenAddress, *ips: str, service: str = WEB) -> None:
    request = pb.UnregisterEndpointRequest(service_name=service, ips=ips)
    await trio.to_thread.run_sync(
        _call, address, "UnregisterEndpoint", request, pb.UnregisterEndpointResponse
    )


@attrs.define
class _Registrar:
    backend: MemoryBackend
    address: ListenAddress
    scope: trio.CancelScope
    stopped: trio.Event

    async def stop(self) -> None:
        """Cancel the registrar and wait until its sockets are closed (so its port is free)."""
        self.scope.cancel()
        with trio.fail_after(10):
            await self.stopped.wait()


async def _serve_registrar(
    backend: MemoryBackend, *, listen: ListenAddress, task_status: trio.TaskStatus[_Registrar]
) -> None:
    stopped = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(functools.partial(serve_registrar, backend=backend, listen=listen))
            task_status.started(
                _Registrar(backend=backend, address=address, scope=nursery.cancel_scope, stopped=stopped)
            )
    finally:
        stopped.set()


@contextlib.asynccontextmanager
async def _registrar(
    backend: MemoryBackend, *, port: int = 0, listen: ListenAddress | None = None
) -> AsyncIterator[_Registrar]:
    where = ListenAddress.tcp(host="127.0.0.1", port=port) if listen is None else listen
    async with trio.open_nursery() as nursery:
        yield await nursery.start(functools.partial(_serve_registrar, backend, listen=where))
        nursery.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def _client(
    address: ListenAddress,
    *,
    services: Callable[[], frozenset[str] | None] = lambda: None,
    rng: random.Random | None = None,
) -> AsyncIterator[tuple[RegistrarClient, trio.MemoryReceiveChannel[Event]]]:
    send, receive = trio.open_memory_channel[Event](0)
    async with send, receive, trio.open_nursery() as nursery:
        client = await nursery.start(
            lambda task_status: serve_registrar_client(
                target=address,
                cluster_name="c",
                node_name="node-a",
                services=services,
                send=send,
                clock=lambda: NOW,
                backoff=FAST,
                rng=random.Random(7) if rng is None else rng,
                task_status=task_status,
            )
        )
        yield client, receive
        nursery.cancel_scope.cancel()


async def _take(receive: trio.MemoryReceiveChannel[Event], count: int) -> list[Event]:
    with trio.fail_after(10):
        return [await receive.receive() for _ in range(count)]


def _snapshot(version: int, endpoints: list[Endpoint], services: list[str]) -> list[Event]:
    return [
        EndpointsSnapshotReceived(
            observed_at=NOW, source="registrar", version=str(version), endpoints=endpoints, services=services
        ),
        EndpointsSnapshotCompleted(observed_at=NOW, source="registrar", version=str(version)),
    ]


def _assert_folds_to(events: list[Event], snapshot: RegistrySnapshot) -> State:
    state = fold_events(*events)
    registry = state.registry
    assert state.diagnostics == fold_events().diagnostics, "no event was rejected"
    assert (registry.version, registry.synced) == (str(snapshot.version), True)
    assert sorted(registry.services.keys()) == list(snapshot.catalog())
    folded = sorted(
        (one for items in registry.endpoints.values() for one in items.values()), key=lambda one: one.key
    )
    assert folded == list(snapshot.sorted_endpoints())
    return state


async def test_a_first_sync_is_one_snapshot_then_changes_map_one_to_one_and_fold_to_the_registry() -> None:
    """Full sync: one EndpointsSnapshotReceived and its completion; then SERVICE_ADDED before ENDPOINT_ADDED."""
    backend = MemoryBackend()
    async with _registrar(backend) as registrar:
        await _register(registrar.address, endpoint("10.0.0.1"))
        await _register(registrar.address, endpoint("10.0.1.1", service=DB))
        async with _client(registrar.address) as (client, receive):
            first = await _take(receive, 2)
            assert first == _snapshot(2, [endpoint("10.0.1.1", service=DB), endpoint("10.0.0.1")], [DB, WEB])
            await _register(registrar.address, endpoint("10.0.2.1", service="shop/cart"))
            await _unregister(registrar.address, "10.0.1.1", service=DB)
            changes = await _take(receive, 4)
            assert changes == [
                RegistryServiceAdded(observed_at=NOW, source="registrar", version="3", service="shop/cart"),
                EndpointAdded(
                    observed_at=NOW,
                    source="registrar",
                    version="3",
                    endpoint=endpoint("10.0.2.1", service="shop/cart"),
                ),
                EndpointRemoved(observed_at=NOW, source="registrar", version="4", service=DB, ip="10.0.1.1"),
                RegistryServiceRemoved(observed_at=NOW, source="registrar", version="4", service=DB),
            ]
            _assert_folds_to(first + changes, backend.snapshot)
            await trio.testing.wait_all_tasks_blocked()  # the client counts a send after it returns
            statistics = client.statistics()
            assert (statistics.connects, statistics.resyncs, statistics.events_sent) == (1, 1, 6)
            assert (statistics.last_version, statistics.synced) == (3, True)


async def test_a_filtered_client_gets_the_whole_catalog_but_only_its_services_endpoints() -> None:
    """Filter {DB}: the snapshot lists both services, and only DB's endpoints; WEB's later endpoints stay out."""
    async with _registrar(MemoryBackend()) as registrar:
        await _register(registrar.address, endpoint("10.0.0.1"))
        await _register(registrar.address, endpoint("10.0.1.1", service=DB))
        async with _client(registrar.address, services=lambda: frozenset({DB})) as (_, receive):
            assert await _take(receive, 2) == _snapshot(2, [endpoint("10.0.1.1", service=DB)], [DB, WEB])
            await _register(registrar.address, endpoint("10.0.0.2"))
            await _register(registrar.address, endpoint("10.0.1.2", service=DB))
            assert await _take(receive, 1) == [
                EndpointAdded(
                    observed_at=NOW,
                    source="registrar",
                    version="4",
                    endpoint=endpoint("10.0.1.2", service=DB),
                )
            ]


async def test_refilter_restarts_the_watch_with_a_full_resync_under_the_new_filter() -> None:
    """After `refilter()`, a new snapshot holds the endpoints of the new filter's services."""
    wanted: list[frozenset[str] | None] = [frozenset({DB})]
    async with _registrar(MemoryBackend()) as registrar:
        await _register(registrar.address, endpoint("10.0.0.1"))
        await _register(registrar.address, endpoint("10.0.1.1", service=DB))
        async with _client(registrar.address, services=lambda: wanted[-1]) as (client, receive):
            assert await _take(receive, 2) == _snapshot(2, [endpoint("10.0.1.1", service=DB)], [DB, WEB])
            wanted.append(frozenset({WEB}))
            client.refilter()
            assert await _take(receive, 2) == _snapshot(2, [endpoint("10.0.0.1")], [DB, WEB])
            await trio.testing.wait_all_tasks_blocked()
            assert client.statistics().resyncs == 2


async def test_reconnect_dials_again_and_resumes_without_a_resync() -> None:
    """`reconnect()` (the TLS trust narrowed): a new connection at once, resuming at the version held: only the
    completion arrives, no second snapshot."""
    async with _registrar(MemoryBackend()) as registrar:
        await _register(registrar.address, endpoint("10.0.0.1"))
        async with _client(registrar.address) as (client, receive):
            await _take(receive, 2)
            client.reconnect()
            assert await _take(receive, 1) == [
                EndpointsSnapshotCompleted(observed_at=NOW, source="registrar", version="1")
            ]
            await trio.testing.wait_all_tasks_blocked()
            statistics = client.statistics()
            assert (statistics.connects, statistics.resyncs, statistics.resumes, statistics.failures) == (
                2,
                1,
                1,
                0,
            )


async def test_after_a_registrar_restart_the_client_resumes_with_only_the_missed_changes() -> None:
    """Same backend, same port: no second snapshot, only what changed while it was down, then the completion."""
    backend = MemoryBackend()
    async with _registrar(backend) as registrar:
        await _register(registrar.address, endpoint("10.0.0.1"))
        async with _client(registrar.address) as (client, receive):
            events = await _take(receive, 2)
            await registrar.stop()
            # A change made while the client is away: applied to the store the next registrar loads.
            backend.snapshot, _ = apply(backend.snapshot, register("10.0.0.2"))
            async with _registrar(backend, port=registrar.address.port or 0) as restarted:
                resumed = await _take(receive, 2)
                assert resumed == [
                    EndpointAdded(
                        observed_at=NOW, source="registrar", version="2", endpoint=endpoint("10.0.0.2")
                    ),
                    EndpointsSnapshotCompleted(observed_at=NOW, source="registrar", version="2"),
                ]
                await _register(restarted.address, endpoint("10.0.0.3"))
                live = await _take(receive, 1)
                _assert_folds_to(events + resumed + live, backend.snapshot)
                await trio.testing.wait_all_tasks_blocked()
                statistics = client.statistics()
                assert (statistics.connects, statistics.resyncs, statistics.resumes) == (2, 1, 1)


async def test_a_restart_with_nothing_missed_sends_only_the_completion() -> None:
    """Resume at the current version: just EndpointsSnapshotCompleted."""
    backend = MemoryBackend()
    async with _registrar(backend) as registrar:
        await _register(registrar.address, endpoint("10.0.0.1"))
        async with _client(registrar.address) as (_, receive):
            await _take(receive, 2)
            await registrar.stop()
            async with _registrar(backend, port=registrar.address.port or 0):
                assert await _take(receive, 1) == [
                    EndpointsSnapshotCompleted(observed_at=NOW, source="registrar", version="1")
                ]


class _CountingRandom(random.Random):
    """A seeded random source that tells when the client has backed off `until` times."""

    def __init__(self, *, until: int) -> None:
        super().__init__(7)
        self.calls = 0
        self.until = until
        self.reached = trio.Event()

    def uniform(self, a: float, b: float) -> float:
        self.calls += 1
        if self.calls >= self.until:
            self.reached.set()
        return super().uniform(a, b)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_an_unreachable_registrar_is_retried_with_backoff_until_it_answers() -> None:
    """Nobody listens: the client backs off (three failures), then syncs once the registrar starts."""
    port = _free_port()
    rng = _CountingRandom(until=3)
    address = ListenAddress.tcp(host="127.0.0.1", port=port)
    async with _client(address, rng=rng) as (client, receive):
        with trio.fail_after(10):
            await rng.reached.wait()
        assert client.statistics().connects == 0
        backend = MemoryBackend()
        async with _registrar(backend, port=port) as registrar:
            await _register(registrar.address, endpoint("10.0.0.1"))
            events = await _take(receive, 2)
            # It may have connected before or after the registration: either snapshot is right.
            assert events in (_snapshot(0, [], []), _snapshot(1, [endpoint("10.0.0.1")], [WEB]))
            with trio.fail_after(10):
                await client.wait_synced()
            assert client.statistics().failures >= 3


def test_backoff_doubles_from_base_to_cap_with_half_of_it_jittered() -> None:
    """Delays lie in [d/2, d] for d = 0.1, 0.2, 0.4, ... capped at 10; a seeded source repeats them."""
    backoff = Backoff()
    delays = [backoff.delay(failures, rng=random.Random(7)) for failures in range(1, 10)]
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0]
    assert all(ceiling / 2 <= delay <= ceiling for delay, ceiling in zip(delays, ceilings, strict=True))
    assert delays == [backoff.delay(failures, rng=random.Random(7)) for failures in range(1, 10)]
    assert backoff.delay(10_000, rng=random.Random(7)) <= 10.0


class _ScriptedRegistrar:
    """A fake WatchEndpoints: connection n answers with `scripts[n]`, then fails UNAVAILABLE; records requests."""

    def __init__(self, scripts: list[list[Change]]) -> None:
        self.scripts = scripts
        self.requests: list[pb.WatchEndpointsRequest] = []
        self.exhausted = trio.Event()

    def service(self) -> purerpc.Service:
        service = purerpc.Service(SERVICE_NAME)
        service.add_method(
            "WatchEndpoints",
            self._watch,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_STREAM, pb.WatchEndpointsRequest, pb.WatchEndpointsResponse
            ),
        )
        return service

    async def _watch(self, request: pb.WatchEndpointsRequest) -> AsyncIterator[pb.WatchEndpointsResponse]:
        self.requests.append(request)
        if len(self.requests) > len(self.scripts):
            self.exhausted.set()
            await trio.sleep_forever()
        for change in self.scripts[len(self.requests) - 1]:
            yield change_to_proto(change)
        raise purerpc.UnavailableError("scripted break")


async def test_a_stream_broken_inside_a_version_resumes_without_repeating_what_was_sent() -> None:
    """Version 2 is SERVICE_ADDED + ENDPOINT_ADDED; the break falls between them: resume from 1, skip the first."""
    web = endpoint("10.0.0.1")
    service_added = Change(kind=ChangeKind.SERVICE_ADDED, version=2, service=DB)
    endpoint_added = Change(
        kind=ChangeKind.ENDPOINT_ADDED,
        version=2,
        service=DB,
        protocol=Protocol.HTTP,
        ip="10.0.1.1",
        endpoint=endpoint("10.0.1.1", service=DB),
    )
    scripted = _ScriptedRegistrar(
        [
            [*resync(snapshot_of([web], version=1), last_version=None), service_added],
            [service_added, endpoint_added, Change(kind=ChangeKind.SNAPSHOT_COMPLETE, version=2)],
        ]
    )
    async with trio.open_nursery() as nursery:
        address = await nursery.start(
            functools.partial(
                serve_grpc, [scripted.service()], listen=ListenAddress.tcp(host="127.0.0.1", port=0)
            )
        )
        async with _client(address, services=lambda: frozenset({WEB, DB})) as (client, receive):
            events = await _take(receive, 5)
            assert events == [
                *_snapshot(1, [web], [WEB]),
                RegistryServiceAdded(observed_at=NOW, source="registrar", version="2", service=DB),
                EndpointAdded(
                    observed_at=NOW,
                    source="registrar",
                    version="2",
                    endpoint=endpoint("10.0.1.1", service=DB),
                ),
                EndpointsSnapshotCompleted(observed_at=NOW, source="registrar", version="2"),
            ]
            with trio.fail_after(10):
                await scripted.exhausted.wait()
            assert [(one.last_version, list(one.filter.services)) for one in scripted.requests] == [
                ("", [DB, WEB]),
                ("1", [DB, WEB]),
                ("2", [DB, WEB]),
            ]
            assert [one.node_name for one in scripted.requests] == ["node-a"] * 3
            assert client.statistics().last_version == 2
        nursery.cancel_scope.cancel()


async def test_the_client_dials_a_unix_socket(tmp_path: Path) -> None:
    """The registrar on a Unix socket: the same first sync."""
    listen = ListenAddress.unix(tmp_path / "registrar.sock")
    async with _registrar(MemoryBackend(), listen=listen), _client(listen) as (_, receive):
        assert await _take(receive, 2) == _snapshot(0, [], [])


async def test_an_event_out_of_protocol_drops_the_partial_resync_and_reconnects_for_a_new_one() -> None:
    """An ENDPOINT_ADDED inside a full resync: nothing of it is sent; the next stream resyncs from scratch."""
    web = endpoint("10.0.0.1")
    stray = Change(
        kind=ChangeKind.ENDPOINT_ADDED,
        version=1,
        service=WEB,
        protocol=Protocol.HTTP,
        ip="10.0.0.1",
        endpoint=web,
    )
    scripted = _ScriptedRegistrar(
        [
            [Change(kind=ChangeKind.FULL_SNAPSHOT, version=1), stray],
            list(resync(snapshot_of([web], version=1), last_version=None)),
        ]
    )
    async with trio.open_nursery() as nursery:
        address = await nursery.start(
            functools.partial(
                serve_grpc, [scripted.service()], listen=ListenAddress.tcp(host="127.0.0.1", port=0)
            )
        )
        async with _client(address) as (client, receive):
            assert await _take(receive, 2) == _snapshot(1, [web], [WEB])
            with trio.fail_after(10):
                await scripted.exhausted.wait()
            assert [one.last_version for one in scripted.requests] == ["", "", "1"]
            assert [one.HasField("filter") for one in scripted.requests] == [False] * 3
            assert client.statistics().failures == 2
        nursery.cancel_scope.cancel()


async def test_a_closed_journal_channel_ends_the_client_instead_of_reconnecting() -> None:
    """Nobody receives any more: the send fails with BrokenResourceError, which is no registrar outage."""
    async with _registrar(MemoryBackend()) as registrar:
        send, receive = trio.open_memory_channel[Event](0)
        await receive.aclose()
        with trio.fail_after(10), pytest.RaisesGroup(trio.BrokenResourceError, flatten_subgroups=True):
            await serve_registrar_client(
                target=registrar.address,
                cluster_name="c",
                node_name="node-a",
                services=lambda: None,
                send=send,
                rng=random.Random(7),
            )


async def test_the_registrar_connection_probes_a_silent_peer() -> None:
    """On a real connection (after purerpc set its own options): TCP keepalive after 10 s idle, every 5 s,
    3 probes; unacknowledged sends time out after 25 s."""
    import socket

    from aether.rpc.calls import open_grpc_socket

    async with (
        _registrar(MemoryBackend()) as registrar,
        open_grpc_socket(registrar.address) as opened,
    ):
        sock = opened._socket._stream.extra(anyio.abc.SocketAttribute.raw_socket)
        assert (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0,
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        ) == (True, 10, 5, 3, 25_000)
