"""Two nodes whose pod identities come from SPIFFE, end to end: each agent takes its own SVID and the trust bundle
from a (fake) SPIFFE Workload API and brokers its pods' SVIDs from a (fake) SPIFFE Broker API over mTLS; its real
Envoy gets them over SDS, and the two Envoys speak mTLS with the broker-issued identities.

The fakes are `aether.testing.spiffe` (faithful servers of the published protos: no SPIRE can run here). The pods,
applications, registry events and the caller are those of `test_mesh_e2e` (local mode on loopback addresses).
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.cli.main import main
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import Envoy, open_envoy
from aether.identity.mint import TestCA
from aether.plane.admin_client import fetch_admin
from aether.rpc.listen import ListenAddress
from aether.testing import make_pod, pod_added
from aether.testing.envoy import wait_for
from aether.testing.spiffe import FakeBroker, FakeWorkloadApi
from tests.integration.test_mesh_e2e import (
    CART_CLUSTER,
    CART_ID,
    CART_IPS,
    CLIENT_ID,
    CLIENT_IP,
    CONVERGE,
    NAMESPACE,
    TRUST_DOMAIN,
    App,
    _cluster_hosts,
    _listeners,
    _secrets,
    registry_events,
    request,
)
from tests.needs import ROOT, needs

pytestmark = needs(ROOT)
"""The projected capture listeners are transparent (IP_TRANSPARENT)."""

HOUR = 3600 * 10**9


@attrs.frozen(kw_only=True)
class Node:
    name: str
    agent: RunningAgent
    envoy: Envoy
    workload: FakeWorkloadApi
    broker: FakeBroker
    broker_socket: Path
    admin_socket: Path


@attrs.frozen(kw_only=True)
class Mesh:
    a: Node
    b: Node
    apps: dict[str, App]
    ca: TestCA
    nursery: trio.Nursery


@asynccontextmanager
async def open_node(
    tmp_path: Path, name: str, *, ca: TestCA, pods: list[Any], nursery: trio.Nursery, broker_up: bool = True
) -> AsyncIterator[Node]:
    """Start a node's fake SPIFFE endpoints, its agent (identities from them), its pods and its Envoy."""
    base = tmp_path / name
    workload = FakeWorkloadApi(ca, svids=[ca.issue(f"spiffe://{TRUST_DOMAIN}/spire/agent/{name}")])
    broker = FakeBroker(ca, directory=base / "broker")
    for pod in pods:
        broker.set_svids(
            f"{pod.namespace}/{pod.name}",
            [ca.issue(f"spiffe://{TRUST_DOMAIN}/ns/{pod.namespace}/sa/{pod.service_account}")],
        )
    await nursery.start(workload.serve, base / "workload.sock")
    if broker_up:
        await nursery.start(broker.serve, base / "broker.sock")
    config = AgentConfig(
        node_name=name,
        log_dir=base / "log",
        xds=ListenAddress.unix(base / "xds.sock"),
        admin_socket=base / "admin.sock",
        spiffe_workload_socket=base / "workload.sock",
        spiffe_broker_socket=base / "broker.sock",
    )
    agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
    async with agent.journal.sender() as send:
        for event in [*(pod_added(pod) for pod in pods), *registry_events()]:
            await send.send(event)
    bootstrap = ads_bootstrap(node_id=name, xds_unix_socket=base / "xds.sock", delta=True)
    async with open_envoy(bootstrap, work_dir=base / "envoy", wait_live=False) as envoy:
        yield Node(
            name=name,
            agent=agent,
            envoy=envoy,
            workload=workload,
            broker=broker,
            broker_socket=base / "broker.sock",
            admin_socket=base / "admin.sock",
        )


@asynccontextmanager
async def open_mesh(tmp_path: Path, *, b_broker_up: bool = True) -> AsyncIterator[Mesh]:
    """Run both nodes and the cart apps; return once the caller's proxy knows both cart endpoints and node-b's
    inbound listeners are active (with `b_broker_up` False, node-b's broker is down: return at once)."""
    ca = TestCA(TRUST_DOMAIN)
    client = make_pod(
        "client-1",
        namespace=NAMESPACE,
        service_account="client",
        ips=(CLIENT_IP,),
        node_name="node-a",
        annotations={"config.aether.io/upstreams": "cart"},
    )
    carts = [
        make_pod(name, namespace=NAMESPACE, service_account="cart", ips=(ip,), node_name="node-b")
        for name, ip in CART_IPS.items()
    ]
    apps = {name: App(name, ip) for name, ip in CART_IPS.items()}
    async with trio.open_nursery() as nursery:
        for app in apps.values():
            await nursery.start(app.serve)
        async with (
            open_node(tmp_path, "node-a", ca=ca, pods=[client], nursery=nursery) as a,
            open_node(tmp_path, "node-b", ca=ca, pods=carts, nursery=nursery, broker_up=b_broker_up) as b,
        ):
            mesh = Mesh(a=a, b=b, apps=apps, ca=ca, nursery=nursery)
            if b_broker_up:
                await wait_for(functools.partial(_converged, mesh), timeout=CONVERGE, interval=0.05)
                await wait_for(_answered, timeout=CONVERGE, interval=0.05)
            yield mesh
        nursery.cancel_scope.cancel()


async def _converged(mesh: Mesh) -> bool:
    a_listeners = _listeners(await mesh.a.envoy.config_dump())
    b_listeners = _listeners(await mesh.b.envoy.config_dump())
    inbound = [f"inbound_{name}.{NAMESPACE}" for name in CART_IPS]
    return (
        "active_state" in a_listeners.get(f"outbound_http_client-1.{NAMESPACE}", {})
        and all("active_state" in b_listeners.get(name, {}) for name in inbound)
        and len(await _cluster_hosts(mesh.a.envoy, CART_CLUSTER)) == len(CART_IPS)
    )


async def _answered() -> bool:
    """Whether a request gets through: a listener shows active in the config dump a moment before Envoy has bound
    it, so right after `_converged` the first request may still meet a refused connection (503)."""
    return (await request()).status == 200


async def served_chain(envoy: Envoy, name: str = CART_ID) -> str:
    secret = _secrets(await envoy.config_dump()).get(name, {})
    chain: str = (
        secret.get("secret", {})
        .get("tls_certificate", {})
        .get("certificate_chain", {})
        .get("inline_bytes", "")
    )
    return chain


async def _identity(node: Node) -> dict[str, dict[str, Any]]:
    """The agent's `/identity` document by pod (read in a thread: the client blocks, the agent runs here)."""
    document = await trio.to_thread.run_sync(fetch_admin, node.admin_socket, "/identity")
    return {pod["pod"]: pod for pod in document["pods"]}


def _snapshot_secrets(node: Node) -> set[str]:
    snapshot = node.agent.cache.get(node.name)
    assert snapshot is not None
    return {
        name
        for type_url, resources in snapshot.resources.items()
        if type_url.endswith("Secret")
        for name in resources
    }


async def test_broker_issued_identities_carry_mtls_between_two_envoys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The caller's SVID and the callee's both come from the broker: the callee's app sees the caller in XFCC,
    each agent's `/identity` says its pods' SVIDs are served, and `aether identity-ready` agrees (and says why
    not for a pod the agent does not know)."""
    async with open_mesh(tmp_path) as mesh:
        answer = (await request()).json()
        assert f"URI={CLIENT_ID}" in answer["xfcc"]
        # HTTP/3 (the default between proxies) carries no `By=` element: Envoy's QUIC server does not expose its
        # own certificate's SAN. The caller's cluster pins the callee's SPIFFE ID instead (tested on its own).
        assert "By=" not in answer["xfcc"] or f"By={CART_ID}" in answer["xfcc"]  # the HTTP/2 fallback has it
        assert (await _identity(mesh.a))[f"{NAMESPACE}/client-1"]["served"]
        b_pods = await _identity(mesh.b)
        assert all(b_pods[f"{NAMESPACE}/{name}"]["served"] for name in CART_IPS)
        assert {kind for kind, _ in mesh.b.broker.calls} == {"kubernetes"}
        ready = ["identity-ready", "--admin", str(mesh.a.admin_socket), "--namespace", NAMESPACE]
        assert await trio.to_thread.run_sync(main, [*ready, "--pod", "client-1", "--timeout", "5"]) == 0
        assert await trio.to_thread.run_sync(main, [*ready, "--pod", "ghost", "--timeout", "0.2"]) == 1
        assert "does not know pod 'shop/ghost'" in capsys.readouterr().err


async def test_a_rotation_by_the_broker_reaches_envoy_without_a_failed_request(tmp_path: Path) -> None:
    async with open_mesh(tmp_path) as mesh:
        old_chain = await served_chain(mesh.b.envoy)
        assert old_chain
        statuses: list[int] = []
        stop = trio.Event()

        async def traffic() -> None:
            while not stop.is_set():
                statuses.append((await request()).status)
                await trio.sleep(0.01)

        async def at_least(count: int) -> bool:
            return len(statuses) >= count

        async with trio.open_nursery() as nursery:
            nursery.start_soon(traffic)
            await wait_for(functools.partial(at_least, 5), timeout=CONVERGE)
            for name in CART_IPS:
                mesh.b.broker.set_svids(f"{NAMESPACE}/{name}", [mesh.ca.issue(CART_ID)])
            mesh.a.broker.set_svids(f"{NAMESPACE}/client-1", [mesh.ca.issue(CLIENT_ID)])

            async def rotated() -> bool:
                return await served_chain(mesh.b.envoy) not in ("", old_chain)

            await wait_for(rotated, timeout=CONVERGE, interval=0.05)
            await wait_for(functools.partial(at_least, len(statuses) + 10), timeout=CONVERGE)
            stop.set()
        assert set(statuses) == {200}, statuses


async def test_a_refused_svid_leaves_the_last_good_one_served_and_a_revoked_one_stops_being_served(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with open_mesh(tmp_path) as mesh:
        good_chain = await served_chain(mesh.b.envoy)
        now = time.time_ns()
        expired = mesh.ca.issue(CART_ID, not_before=now - 2 * HOUR, not_after=now - HOUR)
        mesh.b.broker.set_svids(f"{NAMESPACE}/cart-1", [expired])

        async def refused() -> bool:
            return "expired" in (await _identity(mesh.b))[f"{NAMESPACE}/cart-1"]["rejection"]

        await wait_for(refused, timeout=CONVERGE, interval=0.05)
        assert await served_chain(mesh.b.envoy) == good_chain
        assert (await request()).status == 200
        capsys.readouterr()
        assert await trio.to_thread.run_sync(main, ["status", "--admin", str(mesh.b.admin_socket)]) == 0
        assert "identity shop/cart-1: serving the last good SVID; rejected:" in capsys.readouterr().out
        for name in CART_IPS:
            mesh.b.broker.revoke(f"{NAMESPACE}/{name}")

        async def withdrawn() -> bool:
            return CART_ID not in _snapshot_secrets(mesh.b)

        await wait_for(withdrawn, timeout=CONVERGE, interval=0.05)
        assert not (await _identity(mesh.b))[f"{NAMESPACE}/cart-1"]["served"]


async def test_the_broker_down_at_start_and_mid_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """node-b's broker is down when its agent starts: the agent retries with backoff, `aether identity-ready
    --inbound` says no SVID is served yet, and the SVIDs are served once the broker is up; when it goes down again,
    Envoy keeps serving the last good SVIDs and traffic flows; a rotation made while it was down arrives when it
    is back."""
    async with open_mesh(tmp_path, b_broker_up=False) as mesh:
        broker = mesh.b.agent.broker
        assert broker is not None

        async def retried() -> bool:
            return broker.statistics().failures >= 2

        await wait_for(retried, timeout=CONVERGE, interval=0.01)
        assert CART_ID not in _snapshot_secrets(mesh.b)
        inbound = f"{CART_IPS['cart-1']}:18008"
        ready = ["identity-ready", "--inbound", inbound, "--namespace", NAMESPACE, "--pod", "cart-1"]
        ready += ["--service-account", "cart"]
        assert await trio.to_thread.run_sync(main, [*ready, "--timeout", "0.2"]) == 1
        assert "identity not ready after 0.2 s" in capsys.readouterr().err
        await mesh.nursery.start(mesh.b.broker.serve, mesh.b.broker_socket)
        assert await trio.to_thread.run_sync(main, [*ready, "--timeout", str(CONVERGE)]) == 0
        await wait_for(functools.partial(_converged, mesh), timeout=CONVERGE, interval=0.05)
        await wait_for(_answered, timeout=CONVERGE, interval=0.05)
        served = await served_chain(mesh.b.envoy)
        failures = broker.statistics().failures
        await mesh.b.broker.stop()

        async def noticed() -> bool:
            return broker.statistics().failures > failures + 1

        await wait_for(noticed, timeout=CONVERGE, interval=0.01)
        assert await served_chain(mesh.b.envoy) == served
        assert [(await request()).status for _ in range(3)] == [200, 200, 200]
        for name in CART_IPS:
            mesh.b.broker.set_svids(f"{NAMESPACE}/{name}", [mesh.ca.issue(CART_ID)])
        await mesh.nursery.start(mesh.b.broker.serve, mesh.b.broker_socket)

        async def rotated() -> bool:
            return await served_chain(mesh.b.envoy) not in ("", served)

        await wait_for(rotated, timeout=CONVERGE, interval=0.05)
        assert (await request()).status == 200


async def test_identity_ready_checks_the_svid_the_pods_own_inbound_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`aether identity-ready --inbound`: no admin socket; a TLS handshake with the pod's mesh inbound (node-b's
    real Envoy) must show the pod's SVID, verified against the bundle when one is given. The wrong service
    account, a bundle of another CA and a port nothing serves are each refused with the reason."""
    async with open_mesh(tmp_path) as mesh:
        bundle, foreign = tmp_path / "bundle.pem", tmp_path / "foreign.pem"
        bundle.write_bytes(mesh.ca.bundle_pem)
        foreign.write_bytes(TestCA("elsewhere.example").bundle_pem)
        inbound = f"{CART_IPS['cart-1']}:18008"
        ready = ["identity-ready", "--inbound", inbound, "--namespace", NAMESPACE, "--pod", "cart-1"]

        async def run(*arguments: str) -> int:
            code: int = await trio.to_thread.run_sync(main, [*ready, *arguments])
            return code

        assert await run("--service-account", "cart", "--timeout", "5") == 0
        assert (
            await run("--service-account", "cart", "--trust-domain", TRUST_DOMAIN, "--bundle", str(bundle))
            == 0
        )
        assert "pod shop/cart-1: SVID served" in capsys.readouterr().out
        assert await run("--service-account", "client", "--timeout", "0.2") == 1
        assert (
            f"names '{CART_ID}', not 'spiffe://<trust domain>/ns/shop/sa/client'" in capsys.readouterr().err
        )
        assert await run("--service-account", "cart", "--bundle", str(foreign), "--timeout", "0.2") == 1
        assert "does not verify against the trust bundle" in capsys.readouterr().err
        assert (
            await run("--service-account", "cart", "--trust-domain", "other.example", "--timeout", "0.2") == 1
        )
        assert "not 'spiffe://other.example/ns/shop/sa/cart'" in capsys.readouterr().err
        unused = ["identity-ready", "--inbound", f"{CART_IPS['cart-1']}:1", "--namespace", NAMESPACE]
        assert (
            await trio.to_thread.run_sync(
                main, [*unused, "--pod", "cart-1", "--service-account", "cart", "--timeout", "0.2"]
            )
            == 1
        )
        assert "cannot connect to" in capsys.readouterr().err
