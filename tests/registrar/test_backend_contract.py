"""The backend contract: every registry store behind a real registrar (purerpc server, grpcio client) behaves the
same. The stores are in `tests/registrar/_stores.py` (`STORE_FACTORIES`); a test that needs a capability a
store lacks (writable, shared, changed underneath) is skipped for it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import trio

from aether.core.events.registry import Protocol
from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.registrar import Registrar
from tests.registrar._builders import DB, WEB, endpoint
from tests.registrar._grpc import (
    ADDED,
    COMPLETE,
    FULL,
    REMOVED,
    SERVICE_ADDED,
    register,
    rpc,
    serving_registrar,
    watching,
)
from tests.registrar._stores import STORE_FACTORIES, Store


@pytest.fixture(params=sorted(STORE_FACTORIES))
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    async with STORE_FACTORIES[request.param](request) as opened:
        yield opened


@contextlib.asynccontextmanager
async def _registrar(store: Store, socket: Path) -> AsyncIterator[Registrar]:
    """A registrar on a backend freshly opened on `store`, serving on `socket` until the block ends."""
    async with store.open() as backend, serving_registrar(backend, socket) as registrar:
        yield registrar


async def _listed(socket: Path) -> dict[str, list[str]]:
    response = await rpc(socket, "ListAllEndpoints", pb.ListAllEndpointsRequest())
    return {
        service: [one.ip for one in endpoints.endpoints] for service, endpoints in response.services.items()
    }


def _require(condition: bool, reason: str) -> None:
    if not condition:
        pytest.skip(reason)


async def test_a_new_store_loads_empty(store: Store, tmp_path: Path) -> None:
    """Nothing registered yet: no services, and a first watch gets an empty full snapshot."""
    socket = tmp_path / "registrar.sock"
    async with _registrar(store, socket), watching(socket) as watch:
        (opening, complete) = await watch.until_complete()
        assert (opening[:3], complete[:3], opening[3] == complete[3]) == (
            (FULL, "", ""),
            (COMPLETE, "", ""),
            True,
        )
        assert await _listed(socket) == {}


async def test_registrations_are_served_and_survive_a_restart(store: Store, tmp_path: Path) -> None:
    """Register two, unregister one: listed; a restarted registrar serves the same registry, at the same version
    or a later one that changed nothing (etcd: a write of its own sync key), so a watcher resuming from the old
    version gets no full snapshot again, only SNAPSHOT_COMPLETE."""
    _require(store.writable, "read-only store")
    socket = tmp_path / "registrar.sock"
    async with _registrar(store, socket) as registrar:
        await register(socket, "10.0.0.1")
        await register(socket, "10.0.0.2")
        await rpc(
            socket, "UnregisterEndpoint", pb.UnregisterEndpointRequest(service_name=WEB, ips=["10.0.0.1"])
        )
        assert await _listed(socket) == {WEB: ["10.0.0.2"]}
        version = registrar.snapshot.version
    async with _registrar(store, socket) as restarted:
        assert await _listed(socket) == {WEB: ["10.0.0.2"]}
        now = restarted.snapshot.version
        assert now >= version
        async with watching(socket, last_version=str(version)) as watch:
            # Only SNAPSHOT_COMPLETE; at `now`, or later when the store's own sync write came back meanwhile.
            ((kind, service, ip, completed),) = await watch.until_complete()
            assert (kind, service, ip) == (COMPLETE, "", "")
            assert now <= int(completed) <= restarted.snapshot.version


async def test_a_write_is_visible_when_its_call_returns(store: Store, tmp_path: Path) -> None:
    """Read-your-writes: after RegisterEndpoint returns, this registrar's list and watchers have it."""
    _require(store.writable, "read-only store")
    socket = tmp_path / "registrar.sock"
    async with _registrar(store, socket) as registrar, watching(socket) as watch:
        await watch.until_complete()
        await register(socket, "10.0.0.7", service=DB)
        assert [(kind, service, ip) for kind, service, ip, _ in await watch.take(2)] == [
            (SERVICE_ADDED, DB, ""),
            (ADDED, DB, "10.0.0.7"),
        ]
        assert (await _listed(socket), registrar.statistics().endpoints) == ({DB: ["10.0.0.7"]}, 1)


async def test_changes_made_underneath_reach_watchers(store: Store, tmp_path: Path) -> None:
    """Another writer adds then removes an endpoint: the registrar's watchers see both, in order."""
    _require(
        store.upsert_underneath is not None and store.remove_underneath is not None, "nobody else writes"
    )
    assert store.upsert_underneath is not None
    assert store.remove_underneath is not None
    socket = tmp_path / "registrar.sock"
    async with _registrar(store, socket), watching(socket) as watch:
        await watch.until_complete()
        await store.upsert_underneath(endpoint("10.0.0.9"))
        assert [(kind, service, ip) for kind, service, ip, _ in await watch.take(2)] == [
            (SERVICE_ADDED, WEB, ""),
            (ADDED, WEB, "10.0.0.9"),
        ]
        await store.remove_underneath((WEB, Protocol.HTTP, "10.0.0.9"))
        assert [(kind, ip) for kind, _, ip, _ in await watch.take(1)] == [(REMOVED, "10.0.0.9")]


async def test_two_registrars_on_one_store_converge(store: Store, tmp_path: Path) -> None:
    """Active/active: writes through either replica reach both, at the same versions."""
    _require(store.shared, "the store takes one registrar at a time")
    first, second = tmp_path / "first.sock", tmp_path / "second.sock"
    async with _registrar(store, first) as one, _registrar(store, second) as two:
        await register(first, "10.0.0.1")
        await register(second, "10.0.0.2")
        await register(first, "10.0.1.1", service=DB)
        await rpc(
            second, "UnregisterEndpoint", pb.UnregisterEndpointRequest(service_name=WEB, ips=["10.0.0.1"])
        )
        with trio.fail_after(10):
            await one.wait_version(two.snapshot.version)
            await two.wait_version(one.snapshot.version)
        assert one.snapshot.endpoints == two.snapshot.endpoints
        assert (await _listed(first), await _listed(second)) == (
            {WEB: ["10.0.0.2"], DB: ["10.0.1.1"]},
            {WEB: ["10.0.0.2"], DB: ["10.0.1.1"]},
        )
        # A watcher moving from one replica to the other resumes: nothing again, nothing lost.
        async with watching(second, last_version=str(one.snapshot.version)) as watch:
            assert await watch.until_complete() == [(COMPLETE, "", "", str(one.snapshot.version))]


async def test_a_read_only_store_refuses_registrations(store: Store, tmp_path: Path) -> None:
    """FAILED_PRECONDITION, and nothing changes."""
    _require(not store.writable, "writable store")
    socket = tmp_path / "registrar.sock"
    async with _registrar(store, socket):
        with pytest.raises(grpc.RpcError) as caught:
            await register(socket, "10.0.0.1")
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert await _listed(socket) == {}
