"""Control planes killed -9 and restarted under traffic: `role_restarts("edge", ...)` (`aether edge` and the edge's
Envoy) and `role_restarts("agent", ...)` (`aether agent` and its node's Envoy), each reporting `RestartFigures`.

Envoy keeps serving with the config it holds while its plane is down, so not one request may fail; once the new
process answers on its admin socket, Envoy must be SYNCED with it again within a second.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from aether.demo.upstream import UPSTREAM_NAME_HEADER, open_http_upstream
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import open_envoy
from aether.http1 import http_get
from aether.identity.mint import TestCA, write_bundle, write_svid
from aether.kube.resources import PODS
from aether.registrar import serve_registrar
from aether.rpc.listen import ListenAddress
from aether.testing.envoy import wait_for
from aether.testing.h2c_upstream import open_h2c_upstream
from aether.testing.kubeapi import open_kube_api
from aether.testing.memory_backend import MemoryBackend
from faults.processes import RoleProcess, Traffic, TrafficTarget, quantile, running
from tests.integration.test_routing_traffic import MESH_INBOUND, free_port, http_route, write_manifests

RATE = 200.0
"""Requests per second through Envoy while the plane restarts (the issue's load)."""
CONVERGE = 30.0
"""Seconds the first configuration gets to reach Envoy and carry traffic (interpreter starts are slow under load)."""
EDGE_POD = "aether-edge-faults"
EDGE_ADDRESS = "127.0.35.1"
"""The edge's listeners bind here: an address of this loop's own (the readiness port 18021 is fixed)."""
EDGE_BACKENDS = {"alpha": "127.0.35.11", "beta": "127.0.35.12"}
"""The h2c backends behind the edge's route (name → pod IP; each listens on the mesh inbound port)."""
EDGE_HOST = "web.example"


@attrs.frozen(kw_only=True)
class RestartFigures:
    """What one restart loop measured."""

    role: str
    restarts: int
    """Kill -9 and restart cycles the plane came back from."""
    requests: int
    """Requests sent through Envoy during the loop."""
    failed: int
    """Requests without a good answer (the aim: 0)."""
    resync: tuple[float, ...]
    """Seconds from the restarted plane answering to Envoy SYNCED with it, one per restart."""
    failures: tuple[str, ...]
    """The first few failed requests, described."""
    seconds: float
    """How long the traffic ran (so `requests / seconds` is the rate reached)."""

    @property
    def resync_p50(self) -> float:
        return quantile(self.resync, 0.5)

    @property
    def resync_max(self) -> float:
        return max(self.resync, default=0.0)

    def lines(self) -> list[str]:
        """The figures, as the loop prints them."""
        return [
            f"{self.role}: {self.restarts} kill -9 restarts survived, {self.requests} requests in {self.seconds:.0f} s"
            f" ({self.requests / max(self.seconds, 1e-9):.0f}/s),"
            f" {self.failed} failed (aim 0); Envoy SYNCED again after the plane answered: p50"
            f" {self.resync_p50 * 1000:.0f} ms, max {self.resync_max * 1000:.0f} ms (aim <= 1000 ms)",
            *(f"  failure: {failure}" for failure in self.failures),
        ]


@attrs.frozen(kw_only=True)
class Scene:
    """A plane process and an Envoy it configures, carrying traffic to `target`."""

    plane: RoleProcess
    target: TrafficTarget


async def restart_loop(scene: Scene, *, restarts: int, rate: float = RATE) -> RestartFigures:
    """Under `rate` requests/s to `scene.target`, kill -9 and restart `scene.plane` `restarts` times; after each
    restart, time from the plane answering to Envoy SYNCED with it.

    Raises:
        RoleFailed: The plane exited on its own, did not answer, or Envoy did not sync with it in time.
    """
    traffic = Traffic(target=scene.target, rate=rate)
    resync: list[float] = []
    began = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(traffic.serve)
        for _ in range(restarts):
            await scene.plane.wait_synced()
            await scene.plane.kill()
            await scene.plane.start()
            answering = await scene.plane.wait_answering()
            resync.append(await scene.plane.wait_synced() - answering)
        nursery.cancel_scope.cancel()
    return RestartFigures(
        role=scene.plane.name,
        restarts=len(resync),
        requests=traffic.sent,
        failed=traffic.failed,
        resync=tuple(resync),
        failures=tuple(traffic.failures),
        seconds=trio.current_time() - began,
    )


async def wait_answered(target: TrafficTarget) -> None:
    """Wait until a request to `target` gets its good answer (the first configuration has reached Envoy)."""

    async def answered() -> bool:
        try:
            response = await http_get(
                target.host, target.port, target.path, headers={"host": target.authority}
            )
        except (OSError, ValueError):
            return False
        return response.status == 200 and response.headers.get(target.expect_header) == target.expect

    await wait_for(answered, timeout=CONVERGE, interval=0.05)


def edge_role(work_dir: Path, *, manifests: Path, xds: Path) -> RoleProcess:
    """`aether edge` in cleartext on `EDGE_ADDRESS`, reading `manifests`, serving xDS on the Unix socket `xds`."""
    arguments = ["edge", "--pod-name", EDGE_POD, "--log-dir", str(work_dir / "log")]
    arguments += ["--manifests", str(manifests), "--xds", f"unix:{xds}"]
    arguments += ["--admin-socket", str(work_dir / "admin.sock")]
    arguments += ["--identity", "none", "--bind", EDGE_ADDRESS]
    return RoleProcess(
        name="edge", arguments=arguments, admin_socket=work_dir / "admin.sock", work_dir=work_dir
    )


@asynccontextmanager
async def open_edge_scene(work_dir: Path) -> AsyncIterator[Scene]:
    """A running `aether edge` (its own process), its Envoy (Delta ADS) and two h2c backends; the route sends
    `web.example` to `alpha`. Yields once a request through Envoy has landed on `alpha`."""
    port = free_port(EDGE_ADDRESS)
    route = http_route("web", EDGE_HOST, "  - backendRefs: [{name: alpha, port: 80}]\n")
    manifests = write_manifests(work_dir / "manifests", route, port=port, backends=EDGE_BACKENDS)
    xds = work_dir / "xds.sock"
    plane = edge_role(work_dir, manifests=manifests, xds=xds)
    bootstrap = ads_bootstrap(node_id=EDGE_POD, xds_unix_socket=xds, delta=True)
    async with AsyncExitStack() as stack:
        for name, ip in EDGE_BACKENDS.items():
            await stack.enter_async_context(open_h2c_upstream(name=name, host=ip, port=MESH_INBOUND))
        await stack.enter_async_context(running(plane))
        await stack.enter_async_context(
            open_envoy(bootstrap, work_dir=work_dir / "envoy", wait_live=False, log_level="warning")
        )
        target = TrafficTarget(host=EDGE_ADDRESS, port=port, authority=EDGE_HOST, expect="alpha")
        await wait_answered(target)
        yield Scene(plane=plane, target=target)


AGENT_NODE = "node-faults"
AGENT_CLIENT_IP = "127.0.36.1"
"""The caller pod `client-1`: Envoy's outbound listener for it binds `<ip>:18081`, where the traffic goes."""
AGENT_CART_IP = "127.0.36.11"
"""The callee pod `cart-1`: its application answers on `<ip>:8080` behind Envoy's mesh inbound `<ip>:18008`."""
TRUST_DOMAIN = "aether.internal"
CART_AUTHORITY = f"cart.shop.{TRUST_DOMAIN}"
APP_PORT = 8080
OUTBOUND_PORT = 18081


def _pod(name: str, *, account: str, ip: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "uid": f"uid-{name}",
            "labels": {"app": account, "aether.io/managed": "true"},
            "annotations": annotations,
        },
        "spec": {"serviceAccountName": account, "nodeName": AGENT_NODE},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
    }


def _write_svids(svids: Path) -> Path:
    """Mint a CA for this run and write the bundle and the SVIDs of `shop/client` and `shop/cart` into `svids`."""
    ca = TestCA(TRUST_DOMAIN)
    svids.mkdir(parents=True, exist_ok=True)
    write_bundle(svids, ca.bundle_pem)
    for account in ("client", "cart"):
        write_svid(
            svids, owner=f"shop/{account}", content=ca.issue(f"spiffe://{TRUST_DOMAIN}/ns/shop/sa/{account}")
        )
    return svids


def agent_role(work_dir: Path, *, kube_api: str, registrar: Path, svids: Path, xds: Path) -> RoleProcess:
    """`aether agent` for `AGENT_NODE`: pods from `kube_api`, endpoints from the registrar's Unix socket
    `registrar`, SVIDs from the directory `svids`, xDS on the Unix socket `xds`."""
    arguments = [
        "agent",
        "--node-name",
        AGENT_NODE,
        "--log-dir",
        str(work_dir / "log"),
        "--kube-api",
        kube_api,
    ]
    arguments += ["--registrar", f"unix:{registrar}", "--svid-dir", str(svids), "--xds", f"unix:{xds}"]
    arguments += ["--admin-socket", str(work_dir / "admin.sock")]
    return RoleProcess(
        name="agent", arguments=arguments, admin_socket=work_dir / "admin.sock", work_dir=work_dir
    )


@asynccontextmanager
async def open_agent_scene(work_dir: Path) -> AsyncIterator[Scene]:
    """A running `aether agent` (its own process) for one node, with the test Kubernetes API holding the caller
    pod `client-1` (upstreams: cart) and the callee `cart-1`, a registrar (in this process, memory-backed), SVIDs
    minted by a CA of this run, the callee's application, and the node's Envoy (Delta ADS). Traffic goes from the
    caller's outbound listener through mTLS to the callee's inbound and its application. Yields once a request has
    landed on the application."""
    svids = await trio.to_thread.run_sync(_write_svids, work_dir / "svids")
    registrar = work_dir / "registrar.sock"
    xds = work_dir / "xds.sock"
    bootstrap = ads_bootstrap(node_id=AGENT_NODE, xds_unix_socket=xds, delta=True)
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(open_kube_api())
        api.store.create(
            PODS,
            _pod(
                "client-1",
                account="client",
                ip=AGENT_CLIENT_IP,
                annotations={"config.aether.io/upstreams": "cart"},
            ),
        )
        api.store.create(PODS, _pod("cart-1", account="cart", ip=AGENT_CART_IP, annotations={}))
        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        await nursery.start(
            functools.partial(serve_registrar, backend=MemoryBackend(), listen=ListenAddress.unix(registrar))
        )
        await stack.enter_async_context(open_http_upstream(name="cart-1", host=AGENT_CART_IP, port=APP_PORT))
        plane = agent_role(work_dir, kube_api=api.url, registrar=registrar, svids=svids, xds=xds)
        await stack.enter_async_context(running(plane))
        await stack.enter_async_context(
            open_envoy(bootstrap, work_dir=work_dir / "envoy", wait_live=False, log_level="warning")
        )
        target = TrafficTarget(
            host=AGENT_CLIENT_IP,
            port=OUTBOUND_PORT,
            authority=CART_AUTHORITY,
            expect_header=UPSTREAM_NAME_HEADER,
            expect="cart-1",
        )
        await wait_answered(target)
        yield Scene(plane=plane, target=target)


SCENES: dict[str, Callable[[Path], AbstractAsyncContextManager[Scene]]] = {
    "edge": open_edge_scene,
    "agent": open_agent_scene,
}
"""Each restartable role's scene, by role name."""


async def role_restarts(role: str, work_dir: Path, *, restarts: int, rate: float = RATE) -> RestartFigures:
    """The restart loop of `role` (a key of `SCENES`)."""
    async with SCENES[role](work_dir / role) as scene:
        return await restart_loop(scene, restarts=restarts, rate=rate)
