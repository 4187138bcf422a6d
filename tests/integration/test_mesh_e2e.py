"""Two nodes, end to end: two agents, each serving its own real Envoy over Delta ADS, carry mesh traffic.

Local mode on loopback addresses: node-a runs the caller `client-1` (127.0.20.1), node-b runs the callee pods
`cart-1` and `cart-2` (127.0.20.11 and .12) with their applications listening on `<pod ip>:8080`. The registrar
does not exist yet, so the test plays it: both journals get the same registry events. SVIDs and the trust bundle
come from each node's SVID directory (the file source), minted by one CA of the mesh's default trust domain.

The caller dials `<pod ip>:18081` with the Host header naming the mesh service; node-a's Envoy opens mTLS to
node-b's inbound at `<callee ip>:18008`, which delivers to the application.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.core.events import Event
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import Envoy, open_envoy
from aether.http1 import HttpConnection, http_request
from aether.identity.mint import TestCA, write_bundle, write_svid
from aether.rpc.listen import ListenAddress
from aether.testing import (
    endpoint_added,
    make_endpoint,
    make_pod,
    pod_added,
    registry_service_added,
)
from aether.testing.envoy import wait_for
from tests.needs import ROOT, needs

TRUST_DOMAIN = "aether.internal"
NAMESPACE = "shop"
CLIENT_IP = "127.0.20.1"
CART_IPS = {"cart-1": "127.0.20.11", "cart-2": "127.0.20.12"}
APP_PORT = 8080
"""The application port (the default of `endpoint.aether.io/port`)."""
OUTBOUND_PORT = 18081
CART = f"cart.{NAMESPACE}.{TRUST_DOMAIN}"
CLIENT_ID = f"spiffe://{TRUST_DOMAIN}/ns/{NAMESPACE}/sa/client"
CART_ID = f"spiffe://{TRUST_DOMAIN}/ns/{NAMESPACE}/sa/cart"
CART_CLUSTER = CART
CALLER_CLUSTER = f"quic_client.{NAMESPACE}@{CART}"
"""The caller's own HTTP/3 cluster of cart, fetched on demand, as Envoy's stat names spell it (`:` as `_`)."""
CONVERGE = 10
"""Seconds the agents and Envoys get to converge (they take well under one)."""
REQUEST_TIMEOUT = 5
"""Seconds one request through both proxies gets (retries included)."""

pytestmark = needs(ROOT)
"""The projected capture listeners are transparent (IP_TRANSPARENT)."""


# --- the applications ---


class App:
    """A cart pod's application on `<pod ip>:8080`: answers 200 with its name and the request's XFCC, except
    `/drop`, which it reads and then closes the connection without answering. Records what it received."""

    def __init__(self, name: str, host: str) -> None:
        self.name = name
        self.host = host
        self.hits: dict[str, int] = {}
        """Requests received, by `<method> <path>` (`/drop` included)."""
        self.xfcc: list[str] = []
        """The `x-forwarded-client-cert` of every request received."""
        self._cancel_scope = trio.CancelScope()

    @property
    def received(self) -> int:
        return sum(self.hits.values())

    def stop(self) -> None:
        """Close the listener and every open connection: the app is gone, its port refuses connections."""
        self._cancel_scope.cancel()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with self._cancel_scope:
            listeners = await trio.open_tcp_listeners(APP_PORT, host=self.host)
            async with trio.open_nursery() as nursery:
                await nursery.start(trio.serve_listeners, self._handle, listeners)
                task_status.started()

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            async with stream:
                connection = HttpConnection(stream, client=False, peer="callee's proxy")
                request = await connection.receive_request()
                if request is None:
                    return
                method, path = request.method, request.target
                self.hits[f"{method} {path}"] = self.hits.get(f"{method} {path}", 0) + 1
                xfcc = request.headers.get("x-forwarded-client-cert", "")
                self.xfcc.append(xfcc)
                if path == "/drop":
                    return  # received, never answered: the connection closes (FIN)
                body = json.dumps({"name": self.name, "xfcc": xfcc}).encode()
                headers = [("content-type", "application/json"), ("connection", "close")]
                await connection.send_response(200, headers=headers, body=body)
        except (trio.BrokenResourceError, ValueError):
            return


# --- the client ---


@attrs.frozen
class Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def request(method: str = "GET", path: str = "/", *, authority: str = CART) -> Response:
    """Send one request from the caller pod through its outbound proxy (a fresh connection)."""
    body = b"x" if method == "POST" else b""
    response = await http_request(
        CLIENT_IP,
        OUTBOUND_PORT,
        method,
        path,
        headers={"host": authority},
        body=body,
        timeout=REQUEST_TIMEOUT,
    )
    return Response(response.status, response.headers, response.body)


# --- the mesh ---


@attrs.frozen(kw_only=True)
class Node:
    name: str
    agent: RunningAgent
    envoy: Envoy
    svid_dir: Path


@attrs.frozen(kw_only=True)
class Mesh:
    a: Node
    b: Node
    apps: dict[str, App]
    cart_ca: TestCA


def _svid_dir(path: Path, ca: TestCA, *owners: str) -> Path:
    path.mkdir(parents=True)
    write_bundle(path, ca.bundle_pem)
    for owner in owners:
        namespace, account = owner.split("/")
        write_svid(
            path, owner=owner, content=ca.issue(f"spiffe://{TRUST_DOMAIN}/ns/{namespace}/sa/{account}")
        )
    return path


def registry_events(*, cart_cluster: str = "") -> list[Event]:
    """What the registrar would send every node: the catalog and the endpoints of shop/cart and shop/client (the
    cart endpoints of the cluster `cart_cluster`, when given: behind the waypoint, so callers stay on HTTP/2)."""
    return [
        registry_service_added("shop/cart", version="1"),
        registry_service_added("shop/client", version="2"),
        endpoint_added(
            make_endpoint(
                CART_IPS["cart-1"], service="shop/cart", node_name="node-b", cluster_name=cart_cluster
            ),
            version="3",
        ),
        endpoint_added(
            make_endpoint(
                CART_IPS["cart-2"], service="shop/cart", node_name="node-b", cluster_name=cart_cluster
            ),
            version="4",
        ),
        endpoint_added(make_endpoint(CLIENT_IP, service="shop/client", node_name="node-a"), version="5"),
    ]


def _listeners(dump: dict[str, Any]) -> dict[str, dict[str, Any]]:
    for config in dump["configs"]:
        if config["@type"].endswith("ListenersConfigDump"):
            return {item["name"]: item for item in config.get("dynamic_listeners", [])}
    return {}


def _secrets(dump: dict[str, Any]) -> dict[str, dict[str, Any]]:
    for config in dump["configs"]:
        if config["@type"].endswith("SecretsConfigDump"):
            return {item["name"]: item for item in config.get("dynamic_active_secrets", [])}
    return {}


async def _cluster_hosts(envoy: Envoy, name: str) -> list[dict[str, Any]]:
    _, body = await envoy.admin_get("/clusters?format=json")
    for cluster in json.loads(body).get("cluster_statuses", []):
        if cluster["name"] == name:
            hosts: list[dict[str, Any]] = cluster.get("host_statuses", [])
            return hosts
    return []


async def _stat(envoy: Envoy, name: str) -> int:
    return (await envoy.stats()).get(name, 0)


@asynccontextmanager
async def open_node(
    tmp_path: Path,
    name: str,
    *,
    pods: list[Any],
    svid_dir: Path,
    nursery: trio.Nursery,
    cart_cluster: str = "",
) -> AsyncIterator[Node]:
    """Start a node's agent, send it its pods and the registry, and start its Envoy on the agent's xDS."""
    base = tmp_path / name
    config = AgentConfig(
        node_name=name,
        log_dir=base / "log",
        xds=ListenAddress.unix(base / "xds.sock"),
        admin_socket=base / "admin.sock",
        svid_dir=svid_dir,
    )
    agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
    async with agent.journal.sender() as send:
        for event in [*(pod_added(pod) for pod in pods), *registry_events(cart_cluster=cart_cluster)]:
            await send.send(event)
    bootstrap = ads_bootstrap(node_id=name, xds_unix_socket=base / "xds.sock", delta=True)
    async with open_envoy(bootstrap, work_dir=base / "envoy", wait_live=False) as envoy:
        yield Node(name=name, agent=agent, envoy=envoy, svid_dir=svid_dir)


@asynccontextmanager
async def open_mesh(
    tmp_path: Path,
    *,
    cart_ca: TestCA | None = None,
    impostor: bool = False,
    declared: bool = True,
    cart_cluster: str = "",
) -> AsyncIterator[Mesh]:
    """Run both nodes and the cart apps; return once the caller's proxy knows both cart endpoints and node-b's
    inbound listeners are active. `cart_ca` issues node-b's SVIDs and bundle (default: the mesh's one CA); with
    `impostor`, the pod at cart-1's registered address runs as service account `evil` (and holds its SVID); without
    `declared`, the caller does not declare cart as an upstream (its first request discovers it on demand); with
    `cart_cluster`, the cart endpoints are of that cluster (behind the waypoint: HTTP/2 only)."""
    ca = TestCA(TRUST_DOMAIN)
    cart_ca = ca if cart_ca is None else cart_ca
    client = make_pod(
        "client-1",
        namespace=NAMESPACE,
        service_account="client",
        ips=(CLIENT_IP,),
        node_name="node-a",
        annotations={"config.aether.io/upstreams": "cart"} if declared else {},
    )
    carts = [
        make_pod(
            name,
            namespace=NAMESPACE,
            service_account="evil" if impostor and name == "cart-1" else "cart",
            ips=(ip,),
            node_name="node-b",
        )
        for name, ip in CART_IPS.items()
    ]
    apps = {name: App(name, ip) for name, ip in CART_IPS.items()}
    async with trio.open_nursery() as nursery:
        for app in apps.values():
            await nursery.start(app.serve)
        a_svids = _svid_dir(tmp_path / "node-a" / "svids", ca, "shop/client")
        b_svids = _svid_dir(tmp_path / "node-b" / "svids", cart_ca, "shop/cart", "shop/evil")
        async with (
            open_node(
                tmp_path,
                "node-a",
                pods=[client],
                svid_dir=a_svids,
                nursery=nursery,
                cart_cluster=cart_cluster,
            ) as a,
            open_node(
                tmp_path, "node-b", pods=carts, svid_dir=b_svids, nursery=nursery, cart_cluster=cart_cluster
            ) as b,
        ):

            async def converged() -> bool:
                a_listeners = _listeners(await a.envoy.config_dump())
                b_listeners = _listeners(await b.envoy.config_dump())
                inbound = [f"inbound_{name}.{NAMESPACE}" for name in CART_IPS]
                return (
                    "active_state" in a_listeners.get(f"outbound_http_client-1.{NAMESPACE}", {})
                    and all("active_state" in b_listeners.get(name, {}) for name in inbound)
                    and (not declared or len(await _cluster_hosts(a.envoy, CART_CLUSTER)) == len(CART_IPS))
                )

            await wait_for(converged, timeout=CONVERGE, interval=0.05)
            yield Mesh(a=a, b=b, apps=apps, cart_ca=cart_ca)
        nursery.cancel_scope.cancel()


# --- the tests ---


async def test_the_caller_reaches_the_callee_by_mesh_name_over_mtls(tmp_path: Path) -> None:
    """`Host: cart.shop.aether.internal` on the caller's 18081 reaches a cart app, which sees the caller's
    SPIFFE ID in XFCC (the callee's inbound verified the caller's certificate)."""
    async with open_mesh(tmp_path) as mesh:
        response = await request()
        assert response.status == 200, response.body
        answer = response.json()
        assert answer["name"] in CART_IPS
        assert f"URI={CLIENT_ID}" in answer["xfcc"]
        # HTTP/3 (the default between proxies) carries no `By=` element: Envoy's QUIC server does not expose its
        # own certificate's SAN. The caller's cluster pins the callee's SPIFFE ID instead (tested on its own).
        assert "By=" not in answer["xfcc"] or f"By={CART_ID}" in answer["xfcc"]  # the HTTP/2 fallback has it
        seen = {(await request()).json()["name"] for _ in range(10)}
        assert seen == set(CART_IPS)  # both endpoints serve
        assert all(f"URI={CLIENT_ID}" in xfcc for app in mesh.apps.values() for xfcc in app.xfcc)


async def test_an_http2_caller_presents_its_own_certificate_fetched_from_the_agent_over_sds(
    tmp_path: Path,
) -> None:
    """Cart behind the waypoint stays on HTTP/2: the service cluster's one TLS socket presents the caller's own
    SVID, which Envoy's certificate selector fetched by the name the caller's listener set (`caller:<SPIFFE ID>`)
    from the agent's standalone SDS, over the bootstrap's xDS cluster (`aether.core.project.tls`)."""
    async with open_mesh(tmp_path, cart_cluster="east") as mesh:
        response = await request()
        assert response.status == 200, response.body
        answer = response.json()
        assert f"URI={CLIENT_ID}" in answer["xfcc"]
        assert f"By={CART_ID}" in answer["xfcc"]  # HTTP/2 end to end: the callee's own SAN is there
        assert await _stat(mesh.a.envoy, f"cluster.{CART_CLUSTER}.upstream_cx_total") >= 1
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_cx_total") == 0
        # The caller's own secret (not the default `caller:fallback`), fetched on demand.
        assert f"caller:{CLIENT_ID}" in _secrets(await mesh.a.envoy.config_dump())


async def test_a_callee_certificate_from_an_untrusted_ca_is_refused(tmp_path: Path) -> None:
    """Node-b's cart SVIDs come from another CA (same trust domain, another key) that node-a's bundle does not
    hold: the caller's proxy refuses the handshake, answers 503, and nothing reaches an app."""
    rogue = TestCA(TRUST_DOMAIN, key=TestCA("rogue.internal").key)
    async with open_mesh(tmp_path, cart_ca=rogue) as mesh:
        response = await request()
        assert response.status == 503, response
        # Envoy 1.40 names no TLS reason in this local reply (the verify failure shows in the stats below).
        assert response.body.endswith(b"retried and the latest reset reason: remote connection failure")
        assert "x-aether-outcome" not in response.headers  # the caller's own reply, not a callee's
        assert sum(app.received for app in mesh.apps.values()) == 0
        # The caller refused the callee's certificate on the first try and both retries.
        # Each try races HTTP/3 and its HTTP/2 fallback (`aether.core.project.quic`): both are refused.
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.ssl.fail_verify_error") == 6
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_cx_connect_fail") == 6


async def test_a_callee_presenting_another_identity_is_refused(tmp_path: Path) -> None:
    """The pod at cart-1's registered address runs as `shop/evil` and presents that (valid, trusted) SVID: the
    caller pins `spiffe://aether.internal/ns/shop/sa/cart`, refuses the handshake, and retries on cart-2; cart-1's
    app never sees a request."""
    async with open_mesh(tmp_path, impostor=True) as mesh:
        responses = [await request() for _ in range(6)]
        assert [response.status for response in responses] == [200] * 6
        assert {response.json()["name"] for response in responses} == {"cart-2"}
        assert mesh.apps["cart-1"].received == 0
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.ssl.fail_verify_san") >= 1


async def test_a_request_to_a_stopped_app_is_retried_onto_a_healthy_endpoint(tmp_path: Path) -> None:
    """cart-1's app stops (its port refuses): node-b's inbound reports the request undelivered, and the caller
    retries it on cart-2; no request fails."""
    async with open_mesh(tmp_path) as mesh:
        assert (await request()).status == 200
        mesh.apps["cart-1"].stop()
        before = mesh.apps["cart-1"].received
        responses = [await request() for _ in range(20)]
        assert [response.status for response in responses] == [200] * 20
        assert {response.json()["name"] for response in responses} == {"cart-2"}
        assert mesh.apps["cart-1"].received == before
        # Node-b's inbound found cart-1's app port closed (undelivered), and the caller retried elsewhere.
        assert (
            await _stat(mesh.b.envoy, f"cluster.app_cart-1.{NAMESPACE}_{APP_PORT}.upstream_cx_connect_fail")
            >= 1
        )
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_rq_retry") >= 1


async def test_an_unanswered_post_is_not_retried_and_an_unanswered_get_is(tmp_path: Path) -> None:
    """The apps receive `/drop` and close the connection without answering: a POST reaches one app once and the
    caller gets the callee's 502 `unanswered`; a GET (idempotent) is tried three times."""
    async with open_mesh(tmp_path) as mesh:

        def dropped(method: str) -> list[int]:
            return sorted(app.hits.get(f"{method} /drop", 0) for app in mesh.apps.values())

        response = await request("POST", "/drop")
        assert (response.status, response.headers.get("x-aether-outcome"), dropped("POST")) == (
            502,
            "unanswered",
            [0, 1],
        )
        response = await request("GET", "/drop")
        # Three attempts (two retries), the first retry on the other endpoint (`previous_hosts`).
        assert (response.status, response.headers.get("x-aether-outcome"), dropped("GET")) == (
            502,
            "unanswered",
            [1, 2],
        )
        assert await _stat(mesh.a.envoy, f"cluster.{CALLER_CLUSTER}.upstream_rq_retry") == 2


async def test_a_rotated_callee_svid_is_served_without_dropping_traffic(tmp_path: Path) -> None:
    """A new cart SVID lands in node-b's SVID directory while the caller sends requests: node-b's Envoy serves
    the new certificate (its SDS secret changes), and not one request fails."""
    async with open_mesh(tmp_path) as mesh:
        envoy = mesh.b.envoy

        async def served_chain() -> str:
            secret = _secrets(await envoy.config_dump()).get(CART_ID, {})
            chain: str = (
                secret.get("secret", {})
                .get("tls_certificate", {})
                .get("certificate_chain", {})
                .get("inline_bytes", "")
            )
            return chain

        old_chain = await served_chain()
        assert old_chain, "node-b's Envoy serves no cart certificate"
        statuses: list[int] = []
        stop = trio.Event()

        async def traffic() -> None:
            while not stop.is_set():
                statuses.append((await request()).status)
                await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(traffic)
            await wait_for(lambda: _true_after(statuses, 5), timeout=CONVERGE)
            rotated = mesh.cart_ca.issue(CART_ID, not_after=4_000_000_000 * 10**9)
            write_svid(mesh.b.svid_dir, owner="shop/cart", content=rotated)

            async def rotated_served() -> bool:
                return await served_chain() not in ("", old_chain)

            await wait_for(rotated_served, timeout=CONVERGE, interval=0.1)
            count = len(statuses)
            await wait_for(lambda: _true_after(statuses, count + 10), timeout=CONVERGE)
            stop.set()
        assert set(statuses) == {200}, statuses
        for ip in CART_IPS.values():  # both inbound listeners loaded the new certificate
            expiry = f"listener.{ip}_18008.ssl.certificate.{CART_ID}.expiration_unix_time_seconds"
            assert await _stat(envoy, expiry) == 4_000_000_000


async def _true_after(items: list[int], count: int) -> bool:
    return len(items) >= count
