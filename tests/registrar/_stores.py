"""Registry stores for the backend contract tests: one factory per backend, all yielding a `Store`.

To add a backend: write an async context manager `(tmp_path) -> Store` and add it to `STORE_FACTORIES`;
`tests/registrar/test_backend_contract.py` then runs every contract test on it (those that need a capability
the store lacks are skipped).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import attrs
import pytest
import trio
import trio_asyncio

from aether.core.events.registry import Endpoint, EndpointKey
from aether.registrar import (
    Backend,
    EndpointRegistered,
    EndpointsUnregistered,
    EndpointsUpdated,
    open_embedded_backend,
)
from aether.registrar.backends.etcd import open_etcd_backend, parse_etcd_endpoints
from aether.registrar.backends.etcd_layout import Partition
from aether.registrar.backends.kubernetes import KubernetesBackend
from aether.testing.etcd import EtcdServer
from aether.testing.kubeapi import open_kube_api
from aether.testing.memory_backend import MemoryBackend
from tests.registrar._kube import client_of, delete_pod_of, put_pod_of

__all__ = [
    "STORE_FACTORIES",
    "Store",
    "StoreFactory",
    "embedded_store",
    "etcd_store",
    "kubernetes_store",
    "memory_store",
]


@attrs.frozen(kw_only=True)
class Store:
    """A store under test, and what it can do.

    `open()` opens a backend on the store: once for a registrar, again for a restarted registrar or (when
    `shared`) a second replica running at the same time.
    """

    name: str
    open: Callable[[], AbstractAsyncContextManager[Backend]]
    writable: bool = True
    """RegisterEndpoint may change it (False: read-only, such as Kubernetes)."""
    shared: bool = False
    """Two backends may be open on it at once, and see each other's changes (active/active replicas)."""
    upsert_underneath: Callable[[Endpoint], Awaitable[None]] | None = None
    """Change the store as another writer would (another replica, the Kubernetes API); None if nobody else can."""
    remove_underneath: Callable[[EndpointKey], Awaitable[None]] | None = None


StoreFactory = Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[Store]]
"""Opens a store for one test; it may take what it needs from the test's fixtures (`request.getfixturevalue`)."""


@contextlib.asynccontextmanager
async def memory_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """Memory: a reopen starts from the last snapshot stored (as a restart of a durable store would)."""
    del request
    current: list[MemoryBackend] = []

    @contextlib.asynccontextmanager
    async def open_backend() -> AsyncIterator[Backend]:
        backend = MemoryBackend(snapshot=current[-1].snapshot if current else None)
        current.append(backend)
        await trio.lowlevel.checkpoint()
        yield backend

    async def upsert(endpoint: Endpoint) -> None:
        await trio.lowlevel.checkpoint()
        current[-1].push(EndpointsUpdated(upserted=(endpoint,)))

    async def remove(key: EndpointKey) -> None:
        await trio.lowlevel.checkpoint()
        current[-1].push(EndpointsUpdated(removed=(key,)))

    yield Store(name="memory", open=open_backend, upsert_underneath=upsert, remove_underneath=remove)


@contextlib.asynccontextmanager
async def embedded_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """Embedded: one directory, reopened by each `open()`."""
    directory: Path = request.getfixturevalue("tmp_path") / "store"

    def open_backend() -> AbstractAsyncContextManager[Backend]:
        return open_embedded_backend(directory)

    await trio.lowlevel.checkpoint()
    yield Store(name="embedded", open=open_backend)


@contextlib.asynccontextmanager
async def etcd_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """etcd: the session's etcd (fixture `etcd_server`), a partition of its own per test; the other writer is a
    backend of its own on the same partition."""
    server: EtcdServer = request.getfixturevalue("etcd_server")
    request.getfixturevalue("free_grpc_aio")
    partition = Partition(root=f"/aether-test/{uuid.uuid4().hex}/regions")
    targets = parse_etcd_endpoints(server.client_url)
    async with (
        trio_asyncio.open_loop() as loop,
        open_etcd_backend(targets, partition=partition, loop=loop) as writer,
    ):
        loaded = await writer.load()

        def open_backend() -> AbstractAsyncContextManager[Backend]:
            return open_etcd_backend(targets, partition=partition, loop=loop)

        async def upsert(endpoint: Endpoint) -> None:
            await writer.apply(EndpointRegistered(endpoint=endpoint), snapshot=loaded, changes=())

        async def remove(key: EndpointKey) -> None:
            await writer.apply(
                EndpointsUnregistered(service=key[0], ips=(key[2],)), snapshot=loaded, changes=()
            )

        yield Store(
            name="etcd", open=open_backend, shared=True, upsert_underneath=upsert, remove_underneath=remove
        )


@contextlib.asynccontextmanager
async def kubernetes_store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """Kubernetes: the test API server; read-only, and changed underneath by creating and deleting labelled pods."""
    del request
    async with open_kube_api() as api:

        @contextlib.asynccontextmanager
        async def open_backend() -> AsyncIterator[Backend]:
            await trio.lowlevel.checkpoint()
            yield KubernetesBackend(client_of(api))

        async def upsert(endpoint: Endpoint) -> None:
            await trio.lowlevel.checkpoint()
            put_pod_of(api, endpoint)

        async def remove(key: EndpointKey) -> None:
            await trio.lowlevel.checkpoint()
            delete_pod_of(api, key)

        yield Store(
            name="kubernetes",
            open=open_backend,
            writable=False,
            upsert_underneath=upsert,
            remove_underneath=remove,
        )


STORE_FACTORIES: dict[str, StoreFactory] = {
    "embedded": embedded_store,
    "etcd": etcd_store,
    "kubernetes": kubernetes_store,
    "memory": memory_store,
}
"""Every store the contract runs on, by name (the test ids)."""
