"""The ADS server over a real gRPC client (grpcio): malformed requests, junk bytes and clients that go away end only
their own stream, with a clear status and one log line; feedback events reach the node's journal."""

from __future__ import annotations

import functools
import logging
import queue
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trio
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from aether.core.events import Event
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE
from aether.plane.journal import open_journal
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.testing.envoy import wait_for
from aether.xds.cache import SnapshotCache
from aether.xds.server import SERVICE_NAME, XdsServer
from tests.xds._snapshots import NODE, assignment, cluster, route, snapshot

_END = None
JUNK = b"\xff" * 20
"""Bytes that are no protobuf message: field 31, wire type 7, which does not exist."""
CANCELLED_STREAMS = 40
"""How many streams the cancel test opens and cancels: the server died within a few before the fix."""


def _sotw(node: str = NODE, **fields: object) -> discovery_pb2.DiscoveryRequest:
    request = discovery_pb2.DiscoveryRequest(**fields)
    if node:
        request.node.id = node
    return request


def _delta(**fields: object) -> discovery_pb2.DeltaDiscoveryRequest:
    request = discovery_pb2.DeltaDiscoveryRequest(**fields)
    request.node.id = NODE
    return request


def _failure(path: Path, *requests: object, delta: bool = False) -> tuple[grpc.StatusCode, str]:
    """Run one stream with `requests` (then half-close); return the status it failed with."""
    with grpc.insecure_channel(f"unix:{path}") as channel:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        method = stub.DeltaAggregatedResources if delta else stub.StreamAggregatedResources
        try:
            for _ in method(iter(requests), timeout=5):
                pass
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
    raise AssertionError("the stream ended without an error status")


def _junk_failure(path: Path, *, delta: bool) -> tuple[grpc.StatusCode, str]:
    """Send `JUNK` framed as one gRPC message on an ADS stream (then half-close); return the status it failed with."""
    method = "DeltaAggregatedResources" if delta else "StreamAggregatedResources"
    with grpc.insecure_channel(f"unix:{path}") as channel:
        call = channel.stream_stream(
            f"/{SERVICE_NAME}/{method}", request_serializer=bytes, response_deserializer=bytes
        )
        try:
            for _ in call(iter([JUNK]), timeout=5):
                pass
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
    raise AssertionError("the stream ended without an error status")


def _cancel_while_answered(path: Path, count: int, *, delta: bool) -> None:
    """Open a stream for `NODE`, send `count` subscriptions at once, cancel it as the first response arrives."""
    types = (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE)
    names: dict[str, list[str]] = {ENDPOINT_TYPE: ["a", "b"], ROUTE_TYPE: ["routes"]}
    requests: list[object] = []
    for index in range(count):
        type_url = types[index % len(types)]
        if delta:
            requests.append(_delta(type_url=type_url, resource_names_subscribe=names.get(type_url, [])))
        else:
            requests.append(_sotw(type_url=type_url, resource_names=names.get(type_url, [])))
    with grpc.insecure_channel(f"unix:{path}") as channel:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        method = stub.DeltaAggregatedResources if delta else stub.StreamAggregatedResources
        call = method(iter(requests), timeout=5)
        next(call)
        call.cancel()


def _open_stream(
    path: Path, outbox: queue.Queue[object], inbox: queue.Queue[object], *, window: int | None = None
) -> None:
    """A long-lived SotW stream: sends what appears in `outbox`, puts each response (or the error) in `inbox`.

    With `window`, the client's flow-control window per stream stays that many bytes (no growth by BDP probes).
    """

    def requests() -> Iterator[object]:
        while (item := outbox.get()) is not _END:
            yield item

    options = [] if window is None else [("grpc.http2.lookahead_bytes", window), ("grpc.http2.bdp_probe", 0)]
    with grpc.insecure_channel(f"unix:{path}", options=options) as channel:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        try:
            for response in stub.StreamAggregatedResources(requests(), timeout=10):
                inbox.put(response)
        except grpc.RpcError as exc:
            inbox.put(exc)


async def _first_response(inbox: queue.Queue[object]) -> discovery_pb2.DiscoveryResponse:
    """The next response a stream opened by `_open_stream` received."""
    response = await trio.to_thread.run_sync(inbox.get, True, 5)
    assert isinstance(response, discovery_pb2.DiscoveryResponse), response
    return response


async def _streams_open(server: XdsServer, count: int) -> None:
    """Wait until exactly `count` streams are open (the clients are other threads: poll)."""

    async def reached() -> bool:
        return server.statistics().streams_open == count

    await wait_for(reached, timeout=5)


async def _serving(nursery: trio.Nursery, server: XdsServer, path: Path) -> None:
    await nursery.start(server.serve)
    await nursery.start(
        lambda task_status: serve_grpc(
            [server.service()], listen=ListenAddress.unix(path), task_status=task_status
        )
    )


BAD_REQUESTS = [
    pytest.param(
        [_sotw(node="", type_url=CLUSTER_TYPE)],
        False,
        "the first request on a stream must carry a node id (node.id); set it in Envoy's bootstrap",
        id="no-node-id",
    ),
    pytest.param(
        [_sotw(type_url="type.googleapis.com/envoy.Nope")],
        False,
        "node 'node-a': type url 'type.googleapis.com/envoy.Nope' is not served; this server serves [",
        id="unknown-type",
    ),
    pytest.param(
        [_sotw(type_url=ENDPOINT_TYPE, resource_names=["a", ""])],
        False,
        "node 'node-a': EDS request names an empty resource name",
        id="empty-name",
    ),
    pytest.param(
        [_sotw(type_url=CLUSTER_TYPE, response_nonce="42")],
        False,
        "node 'node-a': CDS request acknowledges nonce '42', which this stream never sent",
        id="nonce-never-sent",
    ),
    pytest.param(
        [_delta(type_url=ENDPOINT_TYPE, resource_names_unsubscribe=["ghost"])],
        True,
        "node 'node-a': EDS request unsubscribes 'ghost', which it never subscribed",
        id="delta-unsubscribe-unknown",
    ),
]


@pytest.mark.parametrize(("requests", "delta", "message"), BAD_REQUESTS)
async def test_a_malformed_request_ends_its_stream_with_a_clear_status_and_others_keep_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, requests: list[object], delta: bool, message: str
) -> None:
    """INVALID_ARGUMENT with the reason, logged once; a healthy stream opened before keeps getting pushes."""
    path = tmp_path / "xds.sock"
    cache = SnapshotCache()
    cache.set_snapshot(snapshot(cluster("a"), assignment("a", 1)))
    server = XdsServer(cache)
    outbox: queue.Queue[object] = queue.Queue()
    inbox: queue.Queue[object] = queue.Queue()
    async with trio.open_nursery() as nursery:
        await _serving(nursery, server, path)
        nursery.start_soon(
            lambda: trio.to_thread.run_sync(_open_stream, path, outbox, inbox, abandon_on_cancel=True)
        )
        outbox.put(_sotw(type_url=CLUSTER_TYPE))
        first = await _first_response(inbox)
        assert first.type_url == CLUSTER_TYPE

        with caplog.at_level(logging.WARNING, logger="aether.xds"):
            code, details = await trio.to_thread.run_sync(lambda: _failure(path, *requests, delta=delta))
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert details.startswith(message), details
        assert [record.getMessage() for record in caplog.records if record.name == "aether.xds"] == [
            f"xds stream 2 closed: {details}"
        ]

        cache.set_snapshot(
            snapshot(cluster("a"), cluster("b"), assignment("a", 1), assignment("b", 2), seq=2)
        )
        pushed = await _first_response(inbox)
        assert len(pushed.resources) == 2
        outbox.put(_END)
        nursery.cancel_scope.cancel()


async def test_acks_and_nacks_are_appended_to_the_nodes_log(tmp_path: Path) -> None:
    """The server's feedback channel is the journal's: an ACK from a client is folded into the node's state."""
    path = tmp_path / "xds.sock"
    cache = SnapshotCache()
    cache.set_snapshot(snapshot(cluster("a"), assignment("a", 1)))
    outbox: queue.Queue[object] = queue.Queue()
    inbox: queue.Queue[object] = queue.Queue()
    async with open_journal(tmp_path / "log") as journal, trio.open_nursery() as nursery:
        acked = trio.Event()
        journal.subscribe(lambda state, now: acked.set() if state.feedback.streams else None)
        feedback: trio.MemorySendChannel[Event] = journal.sender()
        await _serving(nursery, XdsServer(cache, feedback=feedback), path)
        nursery.start_soon(
            lambda: trio.to_thread.run_sync(_open_stream, path, outbox, inbox, abandon_on_cancel=True)
        )
        outbox.put(_sotw(type_url=CLUSTER_TYPE))
        response = await _first_response(inbox)
        outbox.put(
            _sotw(type_url=CLUSTER_TYPE, version_info=response.version_info, response_nonce=response.nonce)
        )
        with trio.fail_after(5):
            await acked.wait()
        (item,) = journal.state.feedback.streams.values()
        assert (item.node_id, item.type_url, item.acked_version) == (
            NODE,
            CLUSTER_TYPE,
            response.version_info,
        )
        outbox.put(_END)
        nursery.cancel_scope.cancel()


ROUTES_V1 = snapshot(cluster("a"), assignment("a", 1), route("routes", cluster_name="a"))
ROUTES_V2 = snapshot(cluster("a"), cluster("b"), assignment("a", 1), route("routes", cluster_name="b"), seq=2)


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
async def test_junk_bytes_end_their_stream_with_invalid_argument_and_others_keep_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, delta: bool
) -> None:
    """A message that is no protobuf ends its stream with INVALID_ARGUMENT; a healthy stream still gets a route change."""
    path = tmp_path / "xds.sock"
    cache = SnapshotCache()
    cache.set_snapshot(ROUTES_V1)
    server = XdsServer(cache)
    outbox: queue.Queue[object] = queue.Queue()
    inbox: queue.Queue[object] = queue.Queue()
    async with trio.open_nursery() as nursery:
        await _serving(nursery, server, path)
        nursery.start_soon(
            lambda: trio.to_thread.run_sync(_open_stream, path, outbox, inbox, abandon_on_cancel=True)
        )
        outbox.put(_sotw(type_url=ROUTE_TYPE, resource_names=["routes"]))
        first = await _first_response(inbox)

        with caplog.at_level(logging.WARNING, logger="aether.xds"):
            code, details = await trio.to_thread.run_sync(lambda: _junk_failure(path, delta=delta))
        kind = "DeltaDiscoveryRequest" if delta else "DiscoveryRequest"
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert details == (
            f"request of 20 bytes does not decode as envoy.service.discovery.v3.{kind}: Error parsing message"
            f" with type 'envoy.service.discovery.v3.{kind}': Wire format was corrupt"
        )
        assert [record.getMessage() for record in caplog.records if record.name == "aether.xds"] == [
            f"xds stream 2 closed: {details}"
        ]

        outbox.put(_sotw(type_url=ROUTE_TYPE, resource_names=["routes"], response_nonce=first.nonce))
        cache.set_snapshot(ROUTES_V2)
        pushed = await _first_response(inbox)
        assert (pushed.type_url, pushed.version_info) == (ROUTE_TYPE, ROUTES_V2.version(ROUTE_TYPE))
        assert pushed.version_info != first.version_info
        outbox.put(_END)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
async def test_clients_that_cancel_while_being_answered_end_only_their_own_streams(
    tmp_path: Path, delta: bool
) -> None:
    """Envoys that go away mid-answer (3 to 6 requests, then a reset) leave the server serving, with no stream left."""
    path = tmp_path / "xds.sock"
    cache = SnapshotCache()
    cache.set_snapshot(ROUTES_V1)
    server = XdsServer(cache)
    async with trio.open_nursery() as nursery:
        await _serving(nursery, server, path)
        for index in range(CANCELLED_STREAMS):
            await trio.to_thread.run_sync(
                functools.partial(_cancel_while_answered, path, 3 + index % 4, delta=delta)
            )
        await _streams_open(server, 0)
        assert server.statistics().streams_total == CANCELLED_STREAMS

        outbox: queue.Queue[object] = queue.Queue()
        inbox: queue.Queue[object] = queue.Queue()
        nursery.start_soon(
            lambda: trio.to_thread.run_sync(_open_stream, path, outbox, inbox, abandon_on_cancel=True)
        )
        outbox.put(_sotw(type_url=ROUTE_TYPE, resource_names=["routes"]))
        first = await _first_response(inbox)
        assert first.version_info == ROUTES_V1.version(ROUTE_TYPE)
        outbox.put(_END)
        nursery.cancel_scope.cancel()


def test_the_server_serves_ads_and_the_standalone_sds_service() -> None:
    """Both services, each with its SotW and Delta method (an SDS config source that is not ADS uses the second)."""
    services = XdsServer(SnapshotCache()).services()
    assert [(service.name, sorted(service.methods)) for service in services] == [
        (
            "envoy.service.discovery.v3.AggregatedDiscoveryService",
            ["DeltaAggregatedResources", "StreamAggregatedResources"],
        ),
        ("envoy.service.secret.v3.SecretDiscoveryService", ["DeltaSecrets", "StreamSecrets"]),
    ]


async def test_a_response_the_window_refuses_goes_through_the_handler_and_later_ones_follow_in_order(
    tmp_path: Path,
) -> None:
    """A CDS response larger than the client's flow-control window is sent as the window opens; the responses
    made meanwhile and after (EDS, a push) arrive after it, in nonce order."""
    path = tmp_path / "xds.sock"
    cache = SnapshotCache()
    names = [f"cluster-{index:04d}" for index in range(3_000)]  # ~100 KiB of clusters: over 64 KiB
    cache.set_snapshot(snapshot(*(cluster(name) for name in names), assignment(names[0], 1)))
    server = XdsServer(cache)
    outbox: queue.Queue[object] = queue.Queue()
    inbox: queue.Queue[object] = queue.Queue()
    async with trio.open_nursery() as nursery:
        await _serving(nursery, server, path)
        nursery.start_soon(
            lambda: trio.to_thread.run_sync(
                functools.partial(_open_stream, path, outbox, inbox, window=16_384), abandon_on_cancel=True
            )
        )
        outbox.put(_sotw(type_url=CLUSTER_TYPE))
        outbox.put(_sotw(type_url=ENDPOINT_TYPE, resource_names=[names[0]]))
        clusters = await _first_response(inbox)
        endpoints = await _first_response(inbox)
        cache.set_snapshot(snapshot(*(cluster(name) for name in names), assignment(names[0], 2), seq=2))
        pushed = await _first_response(inbox)
        assert [(response.type_url, response.nonce) for response in (clusters, endpoints, pushed)] == [
            (CLUSTER_TYPE, "1"),
            (ENDPOINT_TYPE, "2"),
            (ENDPOINT_TYPE, "3"),
        ]
        assert len(clusters.resources) == len(names)
        assert clusters.ByteSize() > 16_384
        outbox.put(_END)
        nursery.cancel_scope.cancel()
