"""The etcd backend against a real etcd: its key layout and values, compaction, a restart of etcd under a running
registrar and agent, and writes while etcd is down. (The contract all backends share is in
test_backend_contract.py.)"""

from __future__ import annotations

import contextlib
import functools
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import trio
import trio_asyncio

from aether.core.events import Event
from aether.core.events.registry import EndpointsSnapshotReceived, Protocol
from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.proto.registry.v1 import registry_pb2
from aether.registrar import (
    EndpointRegistered,
    EndpointsReplaced,
    EndpointsUpdated,
    Registrar,
    serve_registrar_client,
)
from aether.registrar.backends.base import BackendFeed
from aether.registrar.backends.etcd import EtcdBackend, open_etcd_backend, parse_etcd_endpoints
from aether.registrar.backends.etcd_layout import (
    Partition,
    prefix_end,
    revision_of,
    value_of,
    version_of,
)
from aether.registrar.errors import InvalidRequestError, StoreError
from aether.rpc.backoff import Backoff
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.testing import fold_events
from aether.testing.etcd import EtcdServer, running_etcd
from tests.registrar._builders import DB, WEB, endpoint
from tests.registrar._grpc import registration

pytestmark = pytest.mark.usefixtures("free_grpc_aio")

FAST = Backoff(base=0.02, cap=0.2)
"""Real etcd, real clock: short retries keep the restart tests quick."""


def _partition() -> Partition:
    return Partition(root=f"/aether-test/{uuid.uuid4().hex}/regions", region="eu", cluster="c1")


# --- the layout (pure) ---


def test_endpoint_keys_follow_the_inventory_layout_and_parse_back() -> None:
    """`<root>/<region>/clusters/<cluster>/ns/<ns>/services/<sa>/protocols/PROTOCOL_X/endpoints/<ip>`."""
    partition = Partition(root="/aether/v1/regions", region="eu", cluster="c1")
    key = partition.key((WEB, Protocol.TCP, "10.0.0.1"))
    assert (
        key
        == b"/aether/v1/regions/eu/clusters/c1/ns/shop/services/web/protocols/PROTOCOL_TCP/endpoints/10.0.0.1"
    )
    assert partition.endpoint_key(key) == (WEB, Protocol.TCP, "10.0.0.1")
    one = endpoint("10.0.0.1")
    stored = partition.endpoint(partition.key(one.key), value_of(one))
    assert (stored, registry_pb2.ServiceEndpoint.FromString(value_of(one)).port) == (one, 8080)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (b"/other/ns/shop/services/web/protocols/PROTOCOL_HTTP/endpoints/10.0.0.1", "etcd key: must be"),
        (
            b"/r/eu/clusters/c1/ns/shop/services/web/protocols/PROTOCOL_UDP/endpoints/10.0.0.1",
            "etcd key: must be",
        ),
        (
            b"/r/eu/clusters/c1/ns/Shop/services/web/protocols/PROTOCOL_HTTP/endpoints/10.0.0.1",
            "etcd key: must be",
        ),
        (
            b"/r/eu/clusters/c1/ns/shop/services/web/protocols/PROTOCOL_HTTP/endpoints/10.0.0.300",
            "etcd key: must be an ipv4 or ipv6 address",
        ),
    ],
    ids=["outside-the-partition", "unknown-protocol", "bad-service-key", "bad-ip"],
)
def test_keys_and_values_that_hold_no_endpoint_are_refused(key: bytes, message: str) -> None:
    """A foreign key, an unknown protocol segment, a bad service key or ip: InvalidRequestError naming it."""
    partition = Partition(root="/r", region="eu", cluster="c1")
    with pytest.raises(InvalidRequestError) as caught:
        partition.endpoint(key, value_of(endpoint("10.0.0.1")))
    assert str(caught.value).startswith(message)


def test_a_value_for_another_ip_or_not_a_service_endpoint_is_refused() -> None:
    """The value must decode, and name the key's ip."""
    partition = Partition()
    key = partition.key((WEB, Protocol.HTTP, "10.0.0.1"))
    with pytest.raises(
        InvalidRequestError, match=r"^etcd value: must have the key's ip '10.0.0.1' \(got '10.0.0.2'\)$"
    ):
        partition.endpoint(key, value_of(endpoint("10.0.0.2")))
    with pytest.raises(InvalidRequestError, match=r"^etcd value: must be a binary ServiceEndpoint"):
        partition.endpoint(key, b"\xff\xff\xff")


def test_versions_carry_the_epoch_above_the_revision() -> None:
    """Two stores never share a version; the revision comes back out; range ends cover a prefix."""
    assert version_of(5, epoch=1) == (1 << 44) + 5
    assert revision_of(version_of(123, epoch=77)) == 123
    assert version_of(2**44 - 1, epoch=2**19 - 1) < 2**63
    assert (prefix_end(b"/a/"), prefix_end(b"a\xff")) == (b"/a0", b"b")


def test_etcd_endpoints_parse_to_grpc_targets() -> None:
    """Comma-separated http URLs; anything else names the bad entry."""
    assert parse_etcd_endpoints("http://127.0.0.1:2379, http://10.0.0.2:2379") == (
        "127.0.0.1:2379",
        "10.0.0.2:2379",
    )
    with pytest.raises(
        ValueError, match=r"^--etcd-endpoints: each entry must be http://HOST:PORT \(got 'etcd:2379'\)$"
    ):
        parse_etcd_endpoints("etcd:2379")


# --- against a real etcd ---


def _backend(
    server: EtcdServer, partition: Partition, loop: object
) -> contextlib.AbstractAsyncContextManager[EtcdBackend]:
    """A backend on `partition`; every backend of a test shares the test's one trio-asyncio `loop`."""
    return open_etcd_backend(
        parse_etcd_endpoints(server.client_url), partition=partition, backoff=FAST, loop=loop
    )


async def test_a_compacted_resume_relists_the_partition(etcd_server: EtcdServer) -> None:
    """The registry was loaded, then changed and compacted before the watch began: one EndpointsReplaced with
    exactly the store's endpoints, at the store's revision; later changes follow as updates."""
    partition = _partition()
    async with trio_asyncio.open_loop() as loop, _backend(etcd_server, partition, loop) as backend:
        loaded = await backend.load()
        first = await backend.apply(
            EndpointRegistered(endpoint=endpoint("10.0.0.1")), snapshot=loaded, changes=()
        )
        await backend.apply(
            EndpointRegistered(endpoint=endpoint("10.0.1.1", service=DB)), snapshot=loaded, changes=()
        )
        await trio.to_thread.run_sync(etcd_server.etcdctl, "compaction", str(revision_of(first) + 1))
        send, receive = trio.open_memory_channel[BackendFeed](10)
        async with trio.open_nursery() as nursery:
            await nursery.start(backend.serve_updates, send)
            with trio.fail_after(10):
                relisted = await receive.receive()
                assert isinstance(relisted, EndpointsReplaced)
                assert sorted(one.ip for one in relisted.endpoints) == ["10.0.0.1", "10.0.1.1"]
                later = await backend.apply(
                    EndpointRegistered(endpoint=endpoint("10.0.0.2")), snapshot=loaded, changes=()
                )
                update = await receive.receive()
            assert update == EndpointsUpdated(upserted=(endpoint("10.0.0.2"),), version=later)
            assert (relisted.version or 0) < later
            assert backend.statistics().relists == 1
            nursery.cancel_scope.cancel()


async def test_a_key_without_a_valid_endpoint_is_ignored_and_counted(etcd_server: EtcdServer) -> None:
    """Someone writes garbage under the partition: the registry leaves it out and goes on."""
    partition = _partition()
    garbage = partition.key((WEB, Protocol.HTTP, "10.0.0.5")).decode()
    await trio.to_thread.run_sync(etcd_server.etcdctl, "put", garbage, "not a protobuf \xff")
    async with trio_asyncio.open_loop() as loop, _backend(etcd_server, partition, loop) as backend:
        loaded = await backend.load()
        assert (dict(loaded.endpoints), backend.statistics().ignored_keys) == ({}, 1)


@contextlib.asynccontextmanager
async def _registrar_on_etcd(
    server: EtcdServer, partition: Partition, loop: object, *, write_wait: float = 5.0
) -> AsyncIterator[tuple[Registrar, ListenAddress]]:
    async with _backend(server, partition, loop) as backend, trio.open_nursery() as nursery:
        registrar = Registrar(backend=backend, write_wait=write_wait)
        await nursery.start(registrar.serve)
        address = await nursery.start(
            functools.partial(
                serve_grpc, [registrar.service()], listen=ListenAddress.tcp(host="127.0.0.1", port=0)
            )
        )
        yield registrar, address
        nursery.cancel_scope.cancel()


def _call(address: ListenAddress, name: str, request: object, response: type) -> object:
    with grpc.insecure_channel(f"127.0.0.1:{address.port}") as channel:
        method = channel.unary_unary(
            f"/aether.registrar.v1.RegistrarService/{name}",
            request_serializer=type(request).SerializeToString,  # type: ignore[attr-defined]
            response_deserializer=response.FromString,  # type: ignore[attr-defined]
        )
        return method(request, timeout=10)


async def _register(address: ListenAddress, ip: str, *, service: str = WEB) -> None:
    request = registration(ip, service=service)
    await trio.to_thread.run_sync(_call, address, "RegisterEndpoint", request, pb.RegisterEndpointResponse)


async def _unregister(address: ListenAddress, ip: str, *, service: str = WEB) -> None:
    request = pb.UnregisterEndpointRequest(service_name=service, ips=[ip])
    await trio.to_thread.run_sync(
        _call, address, "UnregisterEndpoint", request, pb.UnregisterEndpointResponse
    )


class _Agent:
    """An agent's registrar client, its events kept in order."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._arrived = trio.Event()

    async def collect(self, receive: trio.MemoryReceiveChannel[Event]) -> None:
        async for event in receive:
            self.events.append(event)
            self._arrived.set()
            self._arrived = trio.Event()

    async def wait_equal_to(self, registrar: Registrar) -> None:
        """Wait until the agent has synced and holds exactly the registrar's endpoints.

        (Not its version: a store version that changed nothing, such as a sync-key write, reaches no watcher.)
        """
        while True:
            state = fold_events(*self.events)
            held = sorted(
                (one for items in state.registry.endpoints.values() for one in items.values()),
                key=lambda one: one.key,
            )
            if state.registry.synced and held == list(registrar.snapshot.sorted_endpoints()):
                return
            await self._arrived.wait()

    def endpoints(self) -> list[tuple[str, str]]:
        """(service, ip) of every endpoint in the agent's state; a rejected event (a duplicate) fails the test."""
        state = fold_events(*self.events)
        assert state.diagnostics == fold_events().diagnostics, "an event was rejected"
        return sorted(
            (one.service, one.ip) for items in state.registry.endpoints.values() for one in items.values()
        )


@contextlib.asynccontextmanager
async def _agent(address: ListenAddress) -> AsyncIterator[_Agent]:
    agent = _Agent()
    send, receive = trio.open_memory_channel[Event](0)
    async with send, receive, trio.open_nursery() as nursery:
        nursery.start_soon(agent.collect, receive)
        await nursery.start(
            lambda task_status: serve_registrar_client(
                target=address,
                cluster_name="c1",
                node_name="node-a",
                services=lambda: None,
                send=send,
                backoff=FAST,
                rng=random.Random(3),
                task_status=task_status,
            )
        )
        yield agent
        nursery.cancel_scope.cancel()


async def test_an_etcd_restart_loses_and_duplicates_nothing_in_an_agents_state(tmp_path: Path) -> None:
    """etcd is killed under a running registrar and agent: the registrar serves its snapshot and reports
    not-ready, a write fails UNAVAILABLE; etcd returns: ready again, writes through either replica reach the
    agent, whose state equals the registry exactly."""
    partition = _partition()
    with running_etcd(tmp_path / "etcd") as server:
        async with (
            trio_asyncio.open_loop() as loop,
            _registrar_on_etcd(server, partition, loop, write_wait=0.3) as (registrar, address),
            _registrar_on_etcd(server, partition, loop) as (other, other_address),
            _agent(address) as agent,
        ):
            with trio.fail_after(60):
                await _register(address, "10.0.0.1")
                await _register(other_address, "10.0.0.2")
                await _register(address, "10.0.1.1", service=DB)
                await registrar.wait_version(other.snapshot.version)
                await agent.wait_equal_to(registrar)

                await trio.to_thread.run_sync(server.kill)
                await registrar.wait_ready(ready=False)
                assert not registrar.statistics().ready
                with pytest.raises(grpc.RpcError) as caught:
                    await _register(address, "10.0.0.3")
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
                listed = await trio.to_thread.run_sync(
                    _call,
                    address,
                    "ListAllEndpoints",
                    pb.ListAllEndpointsRequest(),
                    pb.ListAllEndpointsResponse,
                )
                assert sorted(listed.services) == [DB, WEB]  # type: ignore[attr-defined]

                await trio.to_thread.run_sync(server.start)
                await registrar.wait_ready()
                await other.wait_ready()
                await _register(address, "10.0.0.3")
                await _unregister(other_address, "10.0.0.1")
                await _register(other_address, "10.0.1.2", service=DB)
                await registrar.wait_version(other.snapshot.version)
                await agent.wait_equal_to(registrar)

            expected = sorted((one.service, one.ip) for one in registrar.snapshot.endpoints.values())
            assert expected == [(DB, "10.0.1.1"), (DB, "10.0.1.2"), (WEB, "10.0.0.2"), (WEB, "10.0.0.3")]
            assert agent.endpoints() == expected
            assert other.snapshot.endpoints == registrar.snapshot.endpoints


async def test_a_registrar_restart_on_etcd_resumes_the_agent_without_a_full_resync(tmp_path: Path) -> None:
    """The registrar restarts on the same port; meanwhile another replica writes: the agent resumes from its
    version (the restarted registrar replayed etcd's recent revisions into its history) and ends equal to the
    registry."""
    partition = _partition()
    with running_etcd(tmp_path / "etcd") as server:
        async with (
            trio_asyncio.open_loop() as loop,
            _registrar_on_etcd(server, partition, loop) as (
                other,
                other_address,
            ),
            trio.open_nursery() as nursery,
        ):
            first = await nursery.start(_registrar_task, server, partition, loop, 0)
            async with _agent(first.address) as agent:
                with trio.fail_after(60):
                    await _register(first.address, "10.0.0.1")
                    await agent.wait_equal_to(first.registrar)
                    first.scope.cancel()
                    await first.stopped.wait()
                    await _register(other_address, "10.0.0.2")
                    await _unregister(other_address, "10.0.0.1")
                    second = await nursery.start(_registrar_task, server, partition, loop, first.address.port)
                    await second.registrar.wait_version(other.snapshot.version)
                    await agent.wait_equal_to(second.registrar)
                assert agent.endpoints() == [(WEB, "10.0.0.2")]
                snapshots = sum(1 for event in agent.events if isinstance(event, EndpointsSnapshotReceived))
                assert snapshots == 1, "the resume after the restart needed no second full snapshot"
            nursery.cancel_scope.cancel()


class _Running:
    def __init__(self, registrar: Registrar, address: ListenAddress, scope: trio.CancelScope) -> None:
        self.registrar = registrar
        self.address = address
        self.scope = scope
        self.stopped = trio.Event()


async def _registrar_task(
    server: EtcdServer,
    partition: Partition,
    loop: object,
    port: int,
    *,
    task_status: trio.TaskStatus[_Running],
) -> None:
    scope = trio.CancelScope()
    running: _Running | None = None
    try:
        with scope:
            async with _backend(server, partition, loop) as backend, trio.open_nursery() as nursery:
                registrar = Registrar(backend=backend)
                await nursery.start(registrar.serve)
                address = await nursery.start(
                    functools.partial(
                        serve_grpc,
                        [registrar.service()],
                        listen=ListenAddress.tcp(host="127.0.0.1", port=port),
                    )
                )
                running = _Running(registrar, address, scope)
                task_status.started(running)
    finally:
        if running is not None:
            running.stopped.set()


async def test_a_load_after_a_compaction_starts_its_history_at_the_store_revision(
    etcd_server: EtcdServer,
) -> None:
    """The replay window was compacted away: the load lists the partition as of now, with no history before."""
    partition = _partition()
    async with trio_asyncio.open_loop() as loop, _backend(etcd_server, partition, loop) as writer:
        loaded = await writer.load()
        for ip in ("10.0.0.1", "10.0.0.2"):
            written = await writer.apply(
                EndpointRegistered(endpoint=endpoint(ip)), snapshot=loaded, changes=()
            )
        await trio.to_thread.run_sync(etcd_server.etcdctl, "compaction", str(revision_of(written)))
        async with _backend(etcd_server, partition, loop) as backend:
            snapshot = await backend.load()
    assert sorted(ip for _, _, ip in snapshot.endpoints) == ["10.0.0.1", "10.0.0.2"]
    assert (snapshot.history_size, snapshot.history_floor >= written) == (0, True)


async def test_a_replaced_store_stops_the_backend(etcd_server: EtcdServer) -> None:
    """The partition's epoch changed underneath (the store was wiped and recreated): watching again refuses to
    continue, so the registrar stops instead of serving versions of two different stores."""
    partition = _partition()
    async with trio_asyncio.open_loop() as loop, _backend(etcd_server, partition, loop) as backend:
        await backend.load()
        await trio.to_thread.run_sync(etcd_server.etcdctl, "put", partition.epoch_key.decode(), "12345")
        send, _receive = trio.open_memory_channel[BackendFeed](10)
        with pytest.raises(StoreError, match=r"the store was replaced \(its epoch changed\); restart$"):
            await backend.serve_updates(send)


async def test_several_endpoints_fail_over_to_a_live_member(etcd_server: EtcdServer) -> None:
    """`--etcd-endpoints` naming a dead address first: the channel reaches the live member."""
    dead = trio.socket.socket()
    await dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # a port nobody listens on
    targets = parse_etcd_endpoints(f"http://127.0.0.1:{dead_port},{etcd_server.client_url}")
    async with (
        trio_asyncio.open_loop() as loop,
        open_etcd_backend(targets, partition=_partition(), backoff=FAST, loop=loop) as backend,
    ):
        with trio.fail_after(20):
            snapshot = await backend.load()
    assert dict(snapshot.endpoints) == {}
    assert backend.description.startswith(f"etcd 127.0.0.1:{dead_port},127.0.0.1:")
