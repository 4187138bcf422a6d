"""One agent owns a node (issue 20, item 4), with real processes: a second agent on the same log refuses to start
and names the owner's pid; a `--standby` agent takes over when the owner is killed with SIGKILL, and the node's real
Envoy reconnects, gets SYNCED again, and never fails a request of a loop running across the hand-overs.

One node on loopback addresses: the caller `client-1` (127.0.41.1) and the callee `cart-1` (127.0.41.11, its
application on :8080) are both on node-a; requests go to the caller's 18081 with `Host: cart.shop.aether.internal`,
over mTLS to the callee's inbound 18008 in the same Envoy.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import trio

from aether.demo.upstream import open_http_upstream
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import open_envoy
from aether.http1 import http_request
from aether.identity.mint import TestCA, write_bundle, write_svid
from aether.plane.admin_client import fetch_admin
from aether.plane.journal import open_journal
from aether.testing import endpoint_added, make_endpoint, make_pod, pod_added, registry_service_added
from aether.testing.envoy import wait_for
from aether.testing.request_loop import RequestLoop
from tests.needs import ROOT, needs

pytestmark = needs(ROOT)
"""The projected capture listeners are transparent (IP_TRANSPARENT)."""

NODE = "node-a"
CLIENT_IP, CART_IP = "127.0.41.1", "127.0.41.11"
CART = "cart.shop.aether.internal"
CONVERGE = 30
"""Seconds an agent start, a take-over or Envoy's convergence may take (well under a few under load)."""
HANDOVERS = 3


@attrs.frozen
class Node:
    base: Path

    @property
    def log(self) -> Path:
        return self.base / "log"

    @property
    def xds(self) -> Path:
        return self.base / "xds.sock"

    @property
    def admin(self) -> Path:
        return self.base / "admin.sock"

    def command(self, *extra: str) -> list[str]:
        return [
            *(sys.executable, "-m", "aether.cli", "agent", "--node-name", NODE, "--log-dir", str(self.log)),
            *("--xds", f"unix:{self.xds}", "--admin-socket", str(self.admin)),
            *("--svid-dir", str(self.base / "svids"), *extra),
        ]


async def _prepare(base: Path) -> Node:
    """A node log holding both pods and the registry, and the SVID directory, as the agent's sources would leave."""
    node = Node(base)
    ca = TestCA("aether.internal")
    svids = base / "svids"
    svids.mkdir(parents=True)
    write_bundle(svids, ca.bundle_pem)
    for account in ("client", "cart"):
        write_svid(
            svids, owner=f"shop/{account}", content=ca.issue(f"spiffe://aether.internal/ns/shop/sa/{account}")
        )
    client = make_pod(
        "client-1",
        namespace="shop",
        service_account="client",
        ips=(CLIENT_IP,),
        node_name=NODE,
        annotations={"config.aether.io/upstreams": "cart"},
    )
    cart = make_pod("cart-1", namespace="shop", service_account="cart", ips=(CART_IP,), node_name=NODE)
    events = [
        pod_added(client),
        pod_added(cart),
        registry_service_added("shop/cart", version="1"),
        registry_service_added("shop/client", version="2"),
        endpoint_added(make_endpoint(CART_IP, service="shop/cart", node_name=NODE), version="3"),
        endpoint_added(make_endpoint(CLIENT_IP, service="shop/client", node_name=NODE), version="4"),
    ]
    async with open_journal(node.log) as journal:
        async with journal.sender() as send:
            for event in events:
                await send.send(event)
        await wait_for(_holds(lambda: journal.state.seq == len(events)), timeout=CONVERGE)
    return node


async def _start(command: list[str], nursery: trio.Nursery) -> trio.Process:
    """Start an agent process; the nursery's cancellation kills it (trio's run_process: SIGTERM, then SIGKILL)."""
    process: trio.Process = await nursery.start(
        functools.partial(trio.run_process, command, check=False, stderr=subprocess.PIPE)
    )
    return process


async def _synced(node: Node) -> bool:
    """The agent answering on the admin socket serves node-a's Envoy a stream on which every type is SYNCED."""
    try:
        document = await trio.to_thread.run_sync(fetch_admin, node.admin, "/status")
    except (OSError, ValueError):
        return False
    return any(
        stream["nodeId"] == NODE
        and stream["types"]
        and all(item["status"] == "SYNCED" for item in stream["types"])
        for stream in document["streams"]
    )


async def _owner_pid(node: Node) -> int | None:
    text = (await trio.Path(node.log / "LOCK").read_text()).strip()
    return int(text) if text.isdigit() else None


async def test_a_second_agent_on_the_same_log_exits_naming_the_owner_pid(short_dir: Path) -> None:
    """The second agent exits 3 with the owner's pid in its message; the owner keeps its sockets and serves on."""
    node = await _prepare(short_dir)
    async with trio.open_nursery() as nursery:
        owner = await _start(node.command(), nursery)
        await wait_for(trio.Path(node.admin).exists, timeout=CONVERGE)
        second = await trio.run_process(node.command(), check=False, capture_stderr=True)

        assert second.returncode == 3
        assert f"the log is owned by pid {owner.pid}" in second.stderr.decode()
        assert await _owner_pid(node) == owner.pid
        assert (await trio.to_thread.run_sync(fetch_admin, node.admin, "/statistics"))["journal"]["seq"] >= 6
        assert await trio.Path(node.xds).is_socket()
        nursery.cancel_scope.cancel()


async def test_a_standby_takes_over_from_a_killed_owner_without_a_failed_request(short_dir: Path) -> None:
    """Over several hand-overs (owner killed with SIGKILL, its standby takes over, a new standby starts), Envoy gets
    SYNCED again from each new owner, and a request loop through it sees no failure."""
    node = await _prepare(short_dir)
    bootstrap = ads_bootstrap(node_id=NODE, xds_unix_socket=node.xds, delta=True)
    loop = RequestLoop(CLIENT_IP, 18081, headers={"host": CART}, pause=0.01)
    async with trio.open_nursery() as nursery, open_http_upstream(name="cart-1", host=CART_IP, port=8080):
        owner = await _start(node.command(), nursery)
        await wait_for(trio.Path(node.admin).exists, timeout=CONVERGE)
        async with open_envoy(bootstrap, work_dir=short_dir / "envoy", wait_live=False, log_level="warning"):

            async def answering() -> bool:
                with contextlib.suppress(OSError, ValueError, trio.TooSlowError):
                    return (
                        await http_request(CLIENT_IP, 18081, "GET", "/", headers={"host": CART})
                    ).status == 200
                return False

            await wait_for(answering, timeout=CONVERGE, interval=0.05)
            await wait_for(functools.partial(_synced, node), timeout=CONVERGE, interval=0.05)
            nursery.start_soon(loop.run)
            for _ in range(HANDOVERS):
                standby = await _start(node.command("--standby"), nursery)
                # The standby has read the log when it says so; then the owner dies without a word.
                await _wait_standing_by(standby)
                owner.send_signal(signal.SIGKILL)
                await owner.wait()
                await wait_for(_holds(functools.partial(_lock_names, node, standby.pid)), timeout=CONVERGE)
                await wait_for(functools.partial(_synced, node), timeout=CONVERGE, interval=0.05)
                await wait_for(
                    _holds(functools.partial(lambda at: loop.answered >= at + 20, loop.answered)),
                    timeout=CONVERGE,
                )
                owner = standby
            nursery.cancel_scope.cancel()

    assert loop.failures == []
    assert loop.answered > HANDOVERS * 20


def _holds(condition: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    """`condition` as the async predicate `wait_for` polls."""

    async def holds() -> bool:
        return condition()

    return holds


def _lock_names(node: Node, pid: int) -> bool:
    text = (node.log / "LOCK").read_text().strip()
    return text == str(pid)


async def _wait_standing_by(process: trio.Process) -> None:
    """Read the standby's stderr until it says it stands by (its warning), bounded in time."""
    assert process.stderr is not None
    seen = b""
    with trio.fail_after(CONVERGE):
        while b"standing by" not in seen:
            chunk = await process.stderr.receive_some()
            assert chunk, f"the standby exited before standing by: {seen.decode(errors='replace')}"
            seen += chunk
