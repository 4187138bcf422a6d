"""Tests for the Envoy test harness: a real Envoy on loopback, the test upstream, and the xDS resource builders."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import aether.envoy.process as envoy_module
from aether.demo.upstream import HttpUpstream, HttpUpstreamStatistics, open_http_upstream
from aether.envoy.bootstrap import XDS_CLUSTER, ads_bootstrap
from aether.envoy.process import EnvoyStartFailed, open_envoy
from aether.http1 import HttpConnection, http_get
from aether.testing.envoy import static_bootstrap, wait_for
from aether.testing.xds_resources import (
    LOOPBACK,
    make_cluster,
    make_invalid_cluster,
    make_listener,
    make_route_configuration,
    pick_free_port,
)


def _proxy_bootstrap(upstream: HttpUpstream, *, port: int) -> dict[str, Any]:
    """A static Envoy whose listener sends `/direct` to a direct response and everything else to `upstream`."""
    routes = make_route_configuration("local", routes=[("/", "backend")], direct=[("/direct", "direct v1")])
    return static_bootstrap(
        listeners=[make_listener("ingress", port=port, route_config=routes)],
        clusters=[make_cluster("backend", eds=False, endpoints=[upstream.address])],
    )


def _listener_names(dump: dict[str, Any]) -> list[str]:
    (listeners,) = [
        config for config in dump["configs"] if config["@type"].endswith("admin.v3.ListenersConfigDump")
    ]
    return [entry["listener"]["name"] for entry in listeners.get("static_listeners", [])]


def _bootstrap_port(bootstrap: dict[str, Any]) -> int:
    """The control-plane port an `ads_bootstrap` over TCP points at."""
    (cluster,) = bootstrap["static_resources"]["clusters"]
    endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    port: int = endpoint["address"]["socket_address"]["port_value"]
    return port


def _is_listening(address: tuple[str, int]) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(address) == 0


async def test_static_envoy_routes_a_request_to_the_upstream(tmp_path: Path) -> None:
    """A request through the static listener reaches the upstream and comes back with its body."""
    async with open_http_upstream(name="backend") as upstream:
        port = pick_free_port()
        async with open_envoy(_proxy_bootstrap(upstream, port=port), work_dir=tmp_path) as envoy:
            status, headers, body = await http_get(LOOPBACK, port, "/hello")
            stats = await envoy.stats()

    assert (status, headers["x-upstream-name"], body) == (200, "backend", b"hello from backend"), (
        envoy.log_text()
    )
    assert upstream.statistics() == HttpUpstreamStatistics(requests=1, connections=1, paths=("/hello",))
    assert stats["cluster.backend.upstream_rq_200"] == 1


async def test_static_envoy_answers_a_direct_response_itself(tmp_path: Path) -> None:
    """An exact-path direct route is answered by Envoy without touching the upstream."""
    async with open_http_upstream(name="backend") as upstream:
        port = pick_free_port()
        async with open_envoy(_proxy_bootstrap(upstream, port=port), work_dir=tmp_path):
            response = await http_get(LOOPBACK, port, "/direct")

    assert (response.status, response.body) == (200, b"direct v1")
    assert upstream.statistics().requests == 0


async def test_config_dump_shows_the_static_listener(tmp_path: Path) -> None:
    """`config_dump()` lists the listener from the static bootstrap."""
    async with (
        open_http_upstream() as upstream,
        open_envoy(_proxy_bootstrap(upstream, port=pick_free_port()), work_dir=tmp_path) as envoy,
    ):
        dump = await envoy.config_dump()
        dump_with_eds = await envoy.config_dump(include_eds=True)

    assert _listener_names(dump) == ["ingress"]
    assert any(config["@type"].endswith("EndpointsConfigDump") for config in dump_with_eds["configs"])


async def test_envoy_is_gone_after_the_block_exits(tmp_path: Path) -> None:
    """Leaving the block terminates Envoy, reaps it, and closes its admin port."""
    async with open_envoy(static_bootstrap(), work_dir=tmp_path) as envoy:
        assert envoy.returncode is None

    assert envoy.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.kill(envoy.pid, 0)
    assert not _is_listening(envoy.admin_address)
    assert "caught ENVOY_SIGTERM" in envoy.log_text()


async def test_log_text_follows_the_running_envoy(tmp_path: Path) -> None:
    """Envoy's log reaches `log_text()` while Envoy runs, not only when it exits."""

    async def dispatch_loop_logged() -> bool:
        await trio.lowlevel.checkpoint()
        return "starting main dispatch loop" in envoy.log_text()

    async with open_envoy(static_bootstrap(), work_dir=tmp_path) as envoy:
        await wait_for(dispatch_loop_logged, timeout=2)
        assert envoy.returncode is None


async def test_envoy_is_stopped_when_the_block_raises(tmp_path: Path) -> None:
    """A failing test body still leaves no Envoy behind."""
    with pytest.raises(RuntimeError, match=r"^test failed$"):
        async with open_envoy(static_bootstrap(), work_dir=tmp_path) as envoy:
            raise RuntimeError("test failed")

    assert envoy.returncode == 0


async def test_killed_envoy_vanishes_and_the_block_still_exits(tmp_path: Path) -> None:
    """`kill()` makes Envoy vanish at once; the block's cleanup copes with an Envoy that is already gone."""
    async with open_envoy(static_bootstrap(), work_dir=tmp_path) as envoy:
        envoy.kill()
        assert await envoy.wait() == -9

    assert not _is_listening(envoy.admin_address)


async def test_two_envoys_run_at_once(tmp_path: Path) -> None:
    """Two Envoys with their own work directories and ports serve side by side."""
    async with open_http_upstream(name="backend") as upstream:
        port_a, port_b = pick_free_port(), pick_free_port()
        async with (
            open_envoy(_proxy_bootstrap(upstream, port=port_a), work_dir=tmp_path / "a") as envoy_a,
            open_envoy(_proxy_bootstrap(upstream, port=port_b), work_dir=tmp_path / "b") as envoy_b,
        ):
            bodies = [(await http_get(LOOPBACK, port, "/")).body for port in (port_a, port_b)]
            ready = [await envoy.admin_get("/ready") for envoy in (envoy_a, envoy_b)]

    assert envoy_a.admin_address != envoy_b.admin_address
    assert bodies == [b"hello from backend"] * 2
    assert ready == [(200, b"LIVE\n")] * 2


async def test_envoy_that_rejects_its_bootstrap_raises_start_failed(tmp_path: Path) -> None:
    """An invalid bootstrap makes `open_envoy` raise at once, carrying Envoy's exit status and complaint."""
    bootstrap = static_bootstrap(clusters=[make_invalid_cluster("broken")])

    with pytest.raises(EnvoyStartFailed) as caught:
        async with open_envoy(bootstrap, work_dir=tmp_path):
            pytest.fail("envoy started with an invalid cluster")

    assert (caught.value.reason, caught.value.returncode) == ("envoy exited", 1)
    assert "Invalid duration: Expected positive duration" in caught.value.log


async def test_envoy_that_never_gets_ready_raises_start_failed_and_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Envoy whose control plane never answers is not ready in time; `open_envoy` raises and stops it."""
    monkeypatch.setattr(envoy_module, "_STARTUP_TIMEOUT", 0.3)
    bootstrap = ads_bootstrap(node_id="node-1", xds_tcp=(LOOPBACK, pick_free_port()))

    with pytest.raises(EnvoyStartFailed) as caught:
        async with open_envoy(bootstrap, work_dir=tmp_path):
            pytest.fail("envoy was ready without a control plane")

    assert caught.value.reason.startswith("/ready not answering 200 after 0.3 s")
    assert caught.value.returncode is None
    host, _, port = (tmp_path / "admin-address").read_text().rpartition(":")
    assert not _is_listening((host, int(port)))


@pytest.mark.parametrize("transport", ["tcp", "unix"])
@pytest.mark.parametrize("delta", [False, True], ids=["sotw", "delta"])
async def test_envoy_accepts_the_ads_bootstrap(tmp_path: Path, transport: str, *, delta: bool) -> None:
    """Envoy loads the ADS bootstrap and waits for its control plane; `wait_live=False` returns before that."""
    if transport == "tcp":
        bootstrap = ads_bootstrap(node_id="node-1", xds_tcp=(LOOPBACK, pick_free_port()), delta=delta)
        expected_address = {"socket_address": {"address": LOOPBACK, "port_value": _bootstrap_port(bootstrap)}}
    else:
        bootstrap = ads_bootstrap(node_id="node-1", xds_unix_socket=tmp_path / "xds.sock", delta=delta)
        expected_address = {"pipe": {"path": str(tmp_path / "xds.sock")}}

    async with open_envoy(bootstrap, work_dir=tmp_path / "envoy", wait_live=False) as envoy:
        ready = await envoy.admin_get("/ready")
        dump = await envoy.config_dump()
        stats = await envoy.stats()

    (bootstrap_dump,) = [
        config for config in dump["configs"] if config["@type"].endswith("BootstrapConfigDump")
    ]
    loaded = bootstrap_dump["bootstrap"]
    assert ready == (503, b"PRE_INITIALIZING\n")
    # Nothing came from a control plane. (Not `control_plane.connected_state`: Envoy sets it to 1 as soon as it
    # starts a stream, before the connect fails, so with the bootstrap's quick redials it reads 1 at times.)
    assert (
        stats["cluster_manager.cds.update_success"],
        stats["cluster.xds_cluster.upstream_cx_rx_bytes_total"],
    ) == (0, 0)
    assert loaded["node"]["id"] == "node-1"
    assert loaded["dynamic_resources"]["ads_config"]["api_type"] == ("DELTA_GRPC" if delta else "GRPC")
    (xds_cluster,) = loaded["static_resources"]["clusters"]
    assert xds_cluster["name"] == XDS_CLUSTER
    assert xds_cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"] == (
        expected_address
    )


@pytest.mark.parametrize(
    "addresses",
    [{}, {"xds_unix_socket": Path("/run/xds.sock"), "xds_tcp": (LOOPBACK, 18000)}],
    ids=["neither", "both"],
)
def test_ads_bootstrap_needs_exactly_one_control_plane_address(addresses: dict[str, Any]) -> None:
    """Giving no control-plane address, or two, is refused."""
    with pytest.raises(ValueError, match=r"^ads bootstrap: give exactly one of xds_unix_socket and xds_tcp"):
        ads_bootstrap(node_id="node-1", **addresses)


def test_make_listener_needs_exactly_one_route_source() -> None:
    """A listener takes its routes from RDS or inline, not both and not neither."""
    routes = make_route_configuration("local")
    for options in ({}, {"route_config_name": "local", "route_config": routes}):
        with pytest.raises(ValueError, match=r"^listener 'ingress': give exactly one of"):
            make_listener("ingress", port=8080, **options)


def test_make_cluster_refuses_inline_endpoints_for_eds() -> None:
    """An EDS cluster gets its endpoints over EDS only."""
    with pytest.raises(ValueError, match=r"^cluster 'backend': an EDS cluster takes no inline endpoints"):
        make_cluster("backend", endpoints=[(LOOPBACK, 8080)])


def test_make_cluster_over_ads_asks_for_eds_v3() -> None:
    """The default cluster is EDS over ADS with the v3 resource API."""
    cluster = make_cluster("backend", connect_timeout_ms=250)

    assert cluster.eds_cluster_config.eds_config.HasField("ads")
    assert cluster.eds_cluster_config.eds_config.resource_api_version == 2  # V3
    assert (cluster.connect_timeout.seconds, cluster.connect_timeout.nanos) == (0, 250_000_000)


def test_pick_free_port_returns_a_bindable_loopback_port() -> None:
    """The picked port can be bound on 127.0.0.1 right away."""
    port = pick_free_port()

    with socket.socket() as listener:
        listener.bind((LOOPBACK, port))


async def test_upstream_answers_keep_alive_requests_on_one_connection() -> None:
    """Two requests on one connection get two answers, as Envoy's pooled upstream connections expect."""
    async with open_http_upstream(name="solo") as upstream:
        stream = await trio.open_tcp_stream(*upstream.address)
        async with stream:
            connection = HttpConnection(stream, client=True, peer="upstream")
            bodies = []
            for path in ("/a", "/b"):
                await connection.send_request("GET", path, headers={"host": "x"})
                bodies.append((await connection.receive_response()).body)
                assert connection.next_cycle()

    assert bodies == [b"hello from solo"] * 2
    assert upstream.statistics() == HttpUpstreamStatistics(requests=2, connections=1, paths=("/a", "/b"))


async def test_stopped_upstream_refuses_connections() -> None:
    """After `stop()` the upstream no longer listens, so Envoy would see a connect failure."""
    async with open_http_upstream(body=b"custom") as upstream:
        assert (await http_get(*upstream.address, "/")).body == b"custom"
        upstream.stop()
        await trio.testing.wait_all_tasks_blocked()

        with pytest.raises(OSError, match=r"all attempts to connect"):
            await http_get(*upstream.address, "/")


async def test_wait_for_returns_once_the_predicate_holds(autojump_clock: trio.abc.Clock) -> None:
    """`wait_for` polls until the predicate is true."""
    calls = []

    async def third_time_lucky() -> bool:
        calls.append(trio.current_time())
        return len(calls) == 3

    await wait_for(third_time_lucky, timeout=1, interval=0.1)

    assert len(calls) == 3


async def test_wait_for_raises_too_slow_when_the_predicate_never_holds(
    autojump_clock: trio.abc.Clock,
) -> None:
    """`wait_for` gives up after `timeout` seconds."""
    with pytest.raises(trio.TooSlowError):
        await wait_for(_never, timeout=1)


async def _never() -> bool:
    await trio.lowlevel.checkpoint()
    return False
