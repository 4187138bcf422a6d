"""A grpcio client of the registrar for the tests: unary calls and WatchEndpoints streams read by threads."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import trio

from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.proto.registry.v1 import registry_pb2
from aether.registrar import SERVICE_NAME, Registrar
from aether.registrar.backends.base import Backend
from aether.rpc.listen import ListenAddress, serve_grpc

WEB = "shop/web"
DB = "shop/db"
FULL = pb.EVENT_TYPE_FULL_SNAPSHOT
ADDED = pb.EVENT_TYPE_ENDPOINT_ADDED
REMOVED = pb.EVENT_TYPE_ENDPOINT_REMOVED
COMPLETE = pb.EVENT_TYPE_SNAPSHOT_COMPLETE
SERVICE_ADDED = pb.EVENT_TYPE_SERVICE_ADDED
SERVICE_REMOVED = pb.EVENT_TYPE_SERVICE_REMOVED
ENDED = object()


def method(channel: grpc.Channel, name: str, request: Any, response: Any, *, stream: bool = False) -> Any:
    factory = channel.unary_stream if stream else channel.unary_unary
    return factory(
        f"/{SERVICE_NAME}/{name}",
        request_serializer=request.SerializeToString,
        response_deserializer=response.FromString,
    )


def call(path: Path, name: str, request: Any) -> Any:
    responses = {
        "RegisterEndpoint": pb.RegisterEndpointResponse,
        "UnregisterEndpoint": pb.UnregisterEndpointResponse,
        "ListAllEndpoints": pb.ListAllEndpointsResponse,
    }
    with grpc.insecure_channel(f"unix:{path}") as channel:
        return method(channel, name, type(request), responses[name])(request, timeout=5)


async def rpc(path: Path, name: str, request: Any) -> Any:
    return await trio.to_thread.run_sync(call, path, name, request)


def registration(
    ip: str, *, service: str = WEB, metadata: dict[str, str] | None = None
) -> pb.RegisterEndpointRequest:
    return pb.RegisterEndpointRequest(
        service_name=service,
        protocol=registry_pb2.Service.PROTOCOL_HTTP,
        endpoint=registry_pb2.ServiceEndpoint(
            ip=ip,
            port=8080,
            metadata=metadata or {},
            kubernetes_metadata=registry_pb2.KubernetesMetadata(namespace="shop", node_name="node-a"),
        ),
    )


async def register(path: Path, ip: str, **fields: Any) -> None:
    await rpc(path, "RegisterEndpoint", registration(ip, **fields))


WATCH_DEADLINE = 120
"""Seconds a test's watch stream may live: a bound for a hung test, far above what a loaded machine needs."""
NEXT_TIMEOUT = 60
"""Seconds `Watch.next` waits for the next item before failing the test (a fresh CI run with the other core busy
once took over 10 s to deliver a stalled stream's first buffered 1.5 MB message)."""


class Watch:
    """A WatchEndpoints stream read by a thread: every response (then the error, or `ENDED`) lands in `inbox`."""

    def __init__(self, path: Path, request: pb.WatchEndpointsRequest, *, read: bool = True) -> None:
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.reading = threading.Event()
        if read:
            self.reading.set()
        # Its own connection: a stalled stream must not share HTTP/2 flow control with the others.
        options: list[tuple[str, int]] = [("grpc.use_local_subchannel_pool", 1)]
        if not read:
            # A stream that is not read must stall: without these, gRPC's BDP probing grows the receive window
            # until it has taken in every change (16 MB in the slow-watcher test) and the server never sees it lag.
            options += [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65_535)]
        self._channel = grpc.insecure_channel(f"unix:{path}", options=options)
        self.call = method(
            self._channel, "WatchEndpoints", pb.WatchEndpointsRequest, pb.WatchEndpointsResponse, stream=True
        )(request, timeout=WATCH_DEADLINE)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.reading.wait()
        try:
            for response in self.call:
                self.inbox.put(response)
        except grpc.RpcError as exc:
            self.inbox.put(exc)
        else:
            self.inbox.put(ENDED)

    async def next(self) -> Any:
        return await trio.to_thread.run_sync(self.inbox.get, True, NEXT_TIMEOUT)

    async def until_complete(self) -> list[tuple[int, str, str, str]]:
        """Return (type, service, ip, version) of every event up to and including SNAPSHOT_COMPLETE."""
        seen = []
        while True:
            item = await self.next()
            assert isinstance(item, pb.WatchEndpointsResponse), item
            seen.append((int(item.type), item.service_name, item.endpoint.ip, item.version))
            if item.type == COMPLETE:
                return seen

    async def take(self, count: int) -> list[tuple[int, str, str, str]]:
        seen = []
        for _ in range(count):
            item = await self.next()
            assert isinstance(item, pb.WatchEndpointsResponse), item
            seen.append((int(item.type), item.service_name, item.endpoint.ip, item.version))
        return seen

    def close(self) -> None:
        self.call.cancel()
        self.reading.set()
        self._channel.close()


@contextlib.asynccontextmanager
async def watching(path: Path, *, read: bool = True, **fields: Any) -> AsyncIterator[Watch]:
    watch = await trio.to_thread.run_sync(lambda: Watch(path, pb.WatchEndpointsRequest(**fields), read=read))
    try:
        yield watch
    finally:
        watch.close()


@contextlib.asynccontextmanager
async def serving_registrar(
    backend: Backend, socket: Path, *, write_wait: float = 5.0
) -> AsyncIterator[Registrar]:
    """Serve a `Registrar` of `backend` on the Unix `socket` for the block (30 s at most); yield it."""
    registrar = Registrar(backend=backend, write_wait=write_wait)
    async with trio.open_nursery() as nursery:
        await nursery.start(registrar.serve)
        await nursery.start(
            lambda task_status: serve_grpc(
                [registrar.service()], listen=ListenAddress.unix(socket), task_status=task_status
            )
        )
        with trio.fail_after(30):
            yield registrar
        nursery.cancel_scope.cancel()
