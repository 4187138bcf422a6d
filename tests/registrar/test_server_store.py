"""The registrar over stores that change underneath it: a feed of external updates, a read-only store, and a
store that goes away and comes back (the memory backend plays each; a real etcd is in test_etcd.py)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import trio

from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.registrar import EndpointsReplaced, EndpointsUpdated, Registrar
from aether.testing.memory_backend import MemoryBackend
from tests.registrar._builders import DB, WEB, endpoint
from tests.registrar._grpc import (
    ADDED,
    COMPLETE,
    FULL,
    REMOVED,
    SERVICE_ADDED,
    register,
    registration,
    rpc,
    serving_registrar,
    watching,
)


async def test_updates_from_the_store_reach_watchers_at_the_stores_versions(tmp_path: Path) -> None:
    """An upsert batch, then a re-list that drops one service and adds another: watchers get exactly the diff."""
    socket = tmp_path / "registrar.sock"
    backend = MemoryBackend()
    async with serving_registrar(backend, socket) as registrar, watching(socket, node_name="n") as watch:
        assert await watch.until_complete() == [(FULL, "", "", "0"), (COMPLETE, "", "", "0")]
        backend.push(EndpointsUpdated(upserted=(endpoint("10.0.0.1"), endpoint("10.0.0.2")), version=40))
        assert await watch.take(3) == [
            (SERVICE_ADDED, WEB, "", "40"),
            (ADDED, WEB, "10.0.0.1", "40"),
            (ADDED, WEB, "10.0.0.2", "40"),
        ]
        backend.push(
            EndpointsReplaced(endpoints=(endpoint("10.0.0.1"), endpoint("10.0.1.1", service=DB)), version=52)
        )
        assert await watch.take(3) == [
            (REMOVED, WEB, "10.0.0.2", "52"),
            (SERVICE_ADDED, DB, "", "52"),
            (ADDED, DB, "10.0.1.1", "52"),
        ]
        assert (registrar.snapshot.version, registrar.statistics().updates_folded) == (52, 2)
    async with (
        serving_registrar(MemoryBackend(snapshot=registrar.snapshot), socket),
        watching(socket, last_version="40") as watch,
    ):
        # Resume across the store's skipped versions (41..51 changed nothing here): no full snapshot.
        assert await watch.until_complete() == [
            (REMOVED, WEB, "10.0.0.2", "52"),
            (SERVICE_ADDED, DB, "", "52"),
            (ADDED, DB, "10.0.1.1", "52"),
            (COMPLETE, "", "", "52"),
        ]


async def test_a_read_only_store_refuses_writes_with_failed_precondition(tmp_path: Path) -> None:
    """RegisterEndpoint and UnregisterEndpoint are refused, naming the backend; nothing reaches it."""
    socket = tmp_path / "registrar.sock"
    backend = MemoryBackend(writable=False)
    async with serving_registrar(backend, socket):
        for method, request in (
            ("RegisterEndpoint", registration("10.0.0.1")),
            ("UnregisterEndpoint", pb.UnregisterEndpointRequest(service_name=WEB, ips=["10.0.0.1"])),
        ):
            with pytest.raises(grpc.RpcError) as caught:
                await rpc(socket, method, request)
            assert (caught.value.code(), caught.value.details()) == (
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{method}: the registry backend 'memory' is read-only (endpoints come from the store itself);"
                " register through the store, or run the registrar with a writable backend",
            )
    assert backend.applied == []


async def test_an_unavailable_store_keeps_the_snapshot_served_and_refuses_writes_until_it_returns(
    tmp_path: Path,
) -> None:
    """Not ready while down: watchers still sync, a write waits `write_wait` then fails UNAVAILABLE; back up,
    a write waiting meanwhile goes through."""
    socket = tmp_path / "registrar.sock"
    backend = MemoryBackend()
    async with serving_registrar(backend, socket, write_wait=0.2) as registrar:
        await register(socket, "10.0.0.1")
        backend.set_available(available=False, reason="connection refused")
        await registrar.wait_ready(ready=False)
        statistics = registrar.statistics()
        assert (statistics.ready, statistics.unavailable_reason) == (False, "connection refused")
        async with watching(socket) as watch:
            assert await watch.until_complete() == [
                (FULL, "", "", "1"),
                (SERVICE_ADDED, WEB, "", "1"),
                (FULL, WEB, "10.0.0.1", "1"),
                (COMPLETE, "", "", "1"),
            ]
        with pytest.raises(grpc.RpcError) as caught:
            await register(socket, "10.0.0.2")
        assert (caught.value.code(), caught.value.details()) == (
            grpc.StatusCode.UNAVAILABLE,
            "RegisterEndpoint: the registry store 'memory' is unavailable (connection refused); nothing was"
            " stored, retry",
        )
        assert [one.endpoint.ip for one in backend.applied] == ["10.0.0.1"]  # type: ignore[union-attr]
        backend.set_available(available=True)
        await registrar.wait_ready()
        await register(socket, "10.0.0.2")
        assert registrar.statistics().ready
        assert sorted(ip for _, _, ip in registrar.snapshot.endpoints) == ["10.0.0.1", "10.0.0.2"]


async def test_a_write_during_a_short_outage_goes_through_when_the_store_returns(tmp_path: Path) -> None:
    """The store comes back within `write_wait`: the RegisterEndpoint that waited for it succeeds."""
    socket = tmp_path / "registrar.sock"
    backend = MemoryBackend()
    async with serving_registrar(backend, socket) as registrar:
        backend.set_available(available=False, reason="leader election")
        await registrar.wait_ready(ready=False)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(register, socket, "10.0.0.1")
            # The call arrives from grpcio's thread: there is nothing to wait on but the count.
            while registrar.statistics().writes_waiting == 0:  # noqa: ASYNC110
                await trio.sleep(0.01)
            assert backend.applied == []
            backend.set_available(available=True)
    assert [one.endpoint.ip for one in backend.applied] == ["10.0.0.1"]  # type: ignore[union-attr]


async def test_an_out_of_order_store_version_stops_the_registrar() -> None:
    """A feed whose version goes backwards is a backend bug: the registrar stops rather than diverge."""
    backend = MemoryBackend()
    backend.push(EndpointsUpdated(upserted=(endpoint("10.0.0.1"),), version=5))
    backend.push(EndpointsUpdated(upserted=(endpoint("10.0.0.2"),), version=5))
    with pytest.raises(ExceptionGroup) as caught, trio.fail_after(10):
        await Registrar(backend=backend).serve()
    assert [str(one) for one in caught.value.exceptions] == [
        "registry store 'memory': its feed is out of order: store update: version must be greater than 5 (got 5)"
    ]
