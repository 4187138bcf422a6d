"""The ADS server over a real gRPC client (grpcio): malformed requests end only their own stream, with a clear status
and one log line; feedback events reach the node's journal."""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trio
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from aether.core.events import Event
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE
from aether.plane.journal import open_journal
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.xds.cache import SnapshotCache
from aether.xds.server import XdsServer
from tests.xds._snapshots import NODE, assignment, cluster, snapshot

_END = None


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


def _open_stream(path: Path, outbox: queue.Queue[object], inbox: queue.Queue[object]) -> None:
    """A long-lived SotW stream: sends what appears in `outbox`, puts each response (or the error) in `inbox`."""

    def requests() -> Iterator[object]:
        while (item := outbox.get()) is not _END:
            yield item

    with grpc.insecure_channel(f"unix:{path}") as channel:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        try:
            for response in stub.StreamAggregatedResources(requests(), timeout=10):
                inbox.put(response)
        except grpc.RpcError as exc:
            inbox.put(exc)


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
        first = await trio.to_thread.run_sync(inbox.get, True, 5)
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
        pushed = await trio.to_thread.run_sync(inbox.get, True, 5)
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
        response = await trio.to_thread.run_sync(inbox.get, True, 5)
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
