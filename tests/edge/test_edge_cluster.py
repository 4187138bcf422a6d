"""`aether edge` in a cluster: objects from the test API server, endpoints from a real registrar, a real Envoy.

An HTTPRoute written to the API routes traffic through the edge's Envoy to an h2c backend whose endpoint only the
registrar knows. With the API server and the registrar both down, the edge serves its last snapshot (Envoy's
config unchanged, traffic still flowing); once they return, a route edit in the API and a new endpoint in the
registrar reach Envoy. The registrar watch follows the backends: it is scoped to the mesh services they resolve to.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from aether.cli import main
from aether.core.events.registry import Endpoint, Health
from aether.edge import EdgeConfig, RunningEdge, serve_edge
from aether.http1 import http_get
from aether.identity.mint import TestCA
from aether.kube.access import EDGE_QUERIES
from aether.kube.api import KubeClient
from aether.kube.config import ClusterConfig
from aether.kube.resources import GATEWAY_CLASSES, GATEWAYS, HTTP_ROUTES, SERVICES
from aether.plane.admin_client import fetch_admin
from aether.registrar import serve_registrar
from aether.registrar.convert import registration_to_proto
from aether.registrar.snapshot import snapshot_of
from aether.rpc.backoff import Backoff
from aether.rpc.listen import ListenAddress
from aether.rpc.tls import server_tls_context
from aether.testing.envoy import wait_for
from aether.testing.h2c_upstream import open_h2c_upstream
from aether.testing.kubeapi import KubeApi, open_kube_api
from aether.testing.memory_backend import MemoryBackend
from tests.edge.test_edge_role import open_edge_envoy
from tests.integration.test_routing_traffic import MESH_INBOUND, free_port
from tests.registrar._grpc import rpc

pytestmark = pytest.mark.slow

POD = "aether-edge-7"
CONVERGE = 20
EDGE_ADDRESS = "127.0.31.3"
"""This test's own address: the edge's fixed readiness port (18021) meets no other test's."""
BACKENDS = {"alpha": "127.0.32.1", "beta": "127.0.32.2"}
"""Backend name → pod IP: each listens on `<ip>:18008`; only the registrar tells the edge these addresses."""
FAST = Backoff(base=0.01, cap=0.2)
TRUST_DOMAIN = "aether.internal"
TLS_FILES = (("cert", "edge.pem"), ("key", "edge.key"), ("bundle", "bundle.pem"))
"""The edge's mTLS files towards the registrar: `--registrar-<flag>` → its file."""


def gateway_objects(port: int) -> list[tuple[Any, dict[str, Any]]]:
    """The GatewayClass of the edge's controller, a Gateway on `port`, and the backends' Services."""
    objects: list[tuple[Any, dict[str, Any]]] = [
        (
            GATEWAY_CLASSES,
            {"metadata": {"name": "aether"}, "spec": {"controllerName": "gateway.aether.io/edge"}},
        ),
        (
            GATEWAYS,
            {
                "metadata": {"name": "edge", "namespace": "default"},
                "spec": {
                    "gatewayClassName": "aether",
                    "listeners": [
                        {
                            "name": "http",
                            "port": port,
                            "protocol": "HTTP",
                            "allowedRoutes": {"namespaces": {"from": "All"}},
                        }
                    ],
                },
            },
        ),
    ]
    for name in BACKENDS:
        service = {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        }
        objects.append((SERVICES, service))
    return objects


def http_route(backend: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "edge"}],
            "hostnames": ["web.example"],
            "rules": [{"backendRefs": [{"name": backend, "port": 80}]}],
        },
    }


def backend_endpoint(name: str) -> Endpoint:
    """Backend `name`'s pod as the registrar knows it: service account `name`, label `app: name`."""
    return Endpoint(
        service=f"default/{name}",
        ip=BACKENDS[name],
        port=8080,
        ports=(8080,),
        health=Health.HEALTHY,
        namespace="default",
        pod_name=f"{name}-0",
        node_name="node-a",
        labels={"app": name},
    )


async def register(registrar: Path, name: str) -> None:
    """Register backend `name`'s pod with the registrar at Unix socket `registrar`."""
    await rpc(registrar, "RegisterEndpoint", registration_to_proto(backend_endpoint(name)))


@attrs.define
class Registrar:
    """A registrar on a Unix socket that a test can stop and start again (its memory backend kept)."""

    socket: Path
    backend: MemoryBackend = attrs.field(factory=MemoryBackend)
    _scope: trio.CancelScope | None = None

    async def start(self, nursery: trio.Nursery) -> None:
        self._scope = trio.CancelScope()
        await nursery.start(self._serve, self._scope)

    async def _serve(self, scope: trio.CancelScope, *, task_status: trio.TaskStatus[None]) -> None:
        self.socket.unlink(missing_ok=True)
        with scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    functools.partial(
                        serve_registrar, backend=self.backend, listen=ListenAddress.unix(self.socket)
                    )
                )
                task_status.started()

    def stop(self) -> None:
        assert self._scope is not None
        self._scope.cancel()


@asynccontextmanager
async def running_edge(tmp_path: Path, api: KubeApi, registrar: Registrar) -> AsyncIterator[RunningEdge]:
    """An edge on `api` and `registrar`, in cleartext (identity none), retrying fast."""
    config = EdgeConfig(
        pod_name=POD,
        log_dir=tmp_path / "log",
        kube=KubeClient(ClusterConfig.from_url(api.url)),
        registrar=ListenAddress.unix(registrar.socket),
        xds=ListenAddress.unix(tmp_path / "xds.sock"),
        admin_socket=tmp_path / "admin.sock",
        bind=EDGE_ADDRESS,
        cleartext=True,
        backoff=FAST,
    )
    async with trio.open_nursery() as nursery:
        yield await nursery.start(functools.partial(serve_edge, config))
        nursery.cancel_scope.cancel()


async def lands_on(port: int, name: str) -> bool:
    try:
        response = await http_get(EDGE_ADDRESS, port, "/", headers={"host": "web.example"})
    except OSError:
        return False
    return response.headers.get("x-upstream-name") == name


def served_config(dump: dict[str, Any]) -> list[Any]:
    """The dynamic listeners, route tables and clusters Envoy holds, with their versions."""
    kept = []
    for config in dump["configs"]:
        for key in ("dynamic_listeners", "dynamic_route_configs", "dynamic_active_clusters"):
            kept.extend(config.get(key, []))
    return kept


async def test_a_route_in_the_api_reaches_a_registrar_endpoint_and_outages_keep_the_last_snapshot(
    tmp_path: Path,
) -> None:
    """The route from the API and alpha's endpoint from the registrar carry a request to alpha, the watch scoped
    to `default/alpha`. With the API server and the registrar down, nothing changes in the log or in Envoy and
    traffic still lands on alpha; once both return, a route edit to beta and beta's registration reach Envoy."""
    port = free_port(EDGE_ADDRESS)
    registrar = Registrar(socket=tmp_path / "registrar.sock")
    async with (
        open_kube_api() as api,
        trio.open_nursery() as services,
        open_h2c_upstream(name="alpha", host=BACKENDS["alpha"], port=MESH_INBOUND),
        open_h2c_upstream(name="beta", host=BACKENDS["beta"], port=MESH_INBOUND),
    ):
        await registrar.start(services)
        await register(registrar.socket, "alpha")
        for resource, obj in gateway_objects(port):
            api.store.create(resource, obj)
        async with (
            running_edge(tmp_path, api, registrar) as edge,
            open_edge_envoy(tmp_path, node_id=POD) as envoy,
        ):
            api.store.create(HTTP_ROUTES, http_route("alpha"))
            await wait_for(functools.partial(lands_on, port, "alpha"), timeout=CONVERGE)
            assert edge.scope is not None
            assert edge.scope() == {"default/alpha"}
            assert edge.registrar is not None
            assert edge.kube is not None
            before = served_config(await envoy.config_dump())
            assert len(before) >= 3  # the listener, its route table, the backend cluster
            seq = edge.journal.state.seq

            await api.stop()
            registrar.stop()
            failures = edge.registrar.statistics().failures

            async def noticed() -> bool:
                assert edge.kube is not None
                assert edge.registrar is not None
                return bool(edge.kube().interrupted) and edge.registrar.statistics().failures > failures + 1

            await wait_for(noticed, timeout=CONVERGE)
            assert edge.journal.state.seq == seq
            assert await lands_on(port, "alpha")
            assert served_config(await envoy.config_dump()) == before

            await api.restart(nursery=services)
            await registrar.start(services)
            await register(registrar.socket, "beta")
            api.store.put(HTTP_ROUTES, http_route("beta"))
            await wait_for(functools.partial(lands_on, port, "beta"), timeout=CONVERGE)
            assert edge.scope() == {"default/beta"}
            assert edge.kube().interrupted == ()
        services.cancel_scope.cancel()


async def test_a_restarted_edge_appends_only_what_changed_in_the_api_while_it_was_down(
    tmp_path: Path,
) -> None:
    """The first lists are compared with the replayed log: a restart with the API unchanged sends no Kubernetes
    event, and a route deleted while the edge was down is one deletion."""
    registrar = Registrar(socket=tmp_path / "registrar.sock")
    async with open_kube_api() as api, trio.open_nursery() as services:
        await registrar.start(services)
        for resource, obj in gateway_objects(free_port(EDGE_ADDRESS)):
            api.store.create(resource, obj)
        api.store.create(HTTP_ROUTES, http_route("alpha"))

        async def start() -> tuple[int, list[str]]:
            """Run the edge until its first lists are in the log; return the Kubernetes events and the routes."""
            async with running_edge(tmp_path, api, registrar) as edge:
                assert edge.kube is not None
                assert edge.registrar is not None
                listed = edge.kube

                registrar_client = edge.registrar

                async def synced() -> bool:
                    """Every first list and the registrar's sync sent, and every event sent folded."""
                    sent = listed().events + registrar_client.statistics().events_sent
                    return (
                        listed().resyncs == len(EDGE_QUERIES)
                        and registrar_client.statistics().synced
                        and edge.journal.state.seq == edge.journal.replay.state.seq + sent
                    )

                await wait_for(synced, timeout=CONVERGE)
                sent = listed().events
                routes = [
                    key for key in edge.journal.state.kube.gateway_objects if key.startswith("HTTPRoute/")
                ]
            return sent, routes

        sent, routes = await start()
        assert (sent, routes) == (len(gateway_objects(0)) + 1, ["HTTPRoute/default/web"])
        assert await start() == (0, routes)
        api.store.delete(HTTP_ROUTES, name="web", namespace="default")
        assert await start() == (1, [])
        services.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--manifests", "{tmp}", "--kube-api", "http://127.0.0.1:1"],
            "give --manifests DIR (local runs) or one",
        ),
        (
            ["--kube-api", "http://127.0.0.1:1"],
            "--kube-api/--kubeconfig/--in-cluster need --registrar ADDRESS",
        ),
        ([], "give --manifests DIR (local runs) or one"),
        (
            ["--kube-api", "http://127.0.0.1:1", "--registrar", "unix:/none", "--registrar-cert", "{tmp}"],
            "--registrar-cert, --registrar-key and --registrar-bundle go together",
        ),
    ],
)
def test_the_edge_command_takes_exactly_one_object_source_and_the_api_needs_a_registrar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    """Both sources, neither, or the API without a registrar: exit 2 naming the options that go together."""
    arguments = ["edge", "--pod-name", POD, "--log-dir", str(tmp_path / "log")]
    arguments += [word.format(tmp=tmp_path) for word in extra]
    assert main(arguments) == 2
    assert capsys.readouterr().err.startswith(f"aether: error: {message}")


async def test_the_edge_command_runs_on_the_api_and_a_tls_registrar(tmp_path: Path) -> None:
    """`aether edge --kube-api URL --registrar HOST:PORT --registrar-cert/-key/-bundle` starts, says where its
    objects and endpoints come from, and its state (read on its admin socket) holds the API's Gateway objects and,
    of the registrar's two endpoints, only the one of the route's backend: the mTLS watch is scoped to it."""
    ca = TestCA(TRUST_DOMAIN)
    for owner, svid in (
        ("registrar", ca.issue(f"spiffe://{TRUST_DOMAIN}/ns/aether-system/sa/aether-registrar")),
        ("edge", ca.issue(f"spiffe://{TRUST_DOMAIN}/ns/aether-system/sa/aether-edge")),
    ):
        (tmp_path / f"{owner}.pem").write_bytes(svid.cert_chain_pem)
        (tmp_path / f"{owner}.key").write_bytes(svid.private_key_pem)
    (tmp_path / "bundle.pem").write_bytes(ca.bundle_pem)
    backend = MemoryBackend(snapshot=snapshot_of([backend_endpoint(name) for name in BACKENDS], version=1))
    port = free_port(EDGE_ADDRESS)
    async with open_kube_api() as api, trio.open_nursery() as services:
        address = await services.start(
            functools.partial(
                serve_registrar,
                backend=backend,
                listen=ListenAddress.tcp(host="127.0.0.1", port=0),
                tls=server_tls_context(
                    certificate=tmp_path / "registrar.pem",
                    key=tmp_path / "registrar.key",
                    bundle=tmp_path / "bundle.pem",
                ),
                trust_domain=TRUST_DOMAIN,
            )
        )
        for resource, obj in gateway_objects(port):
            api.store.create(resource, obj)
        api.store.create(HTTP_ROUTES, http_route("alpha"))
        command = [sys.executable, "-m", "aether.cli", "edge", "--pod-name", POD]
        command += ["--log-dir", str(tmp_path / "log"), "--kube-api", api.url, "--registrar", str(address)]
        command += [f"--registrar-{flag}={tmp_path / name}" for flag, name in TLS_FILES]
        command += ["--xds", f"unix:{tmp_path / 'xds.sock'}", "--admin-socket", str(tmp_path / "admin.sock")]
        command += ["--bind", EDGE_ADDRESS, "--identity", "none"]
        process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE)
        try:
            assert process.stderr is not None
            received = b""
            with trio.fail_after(CONVERGE * 3):
                while b"\n" not in received:
                    chunk = await process.stderr.receive_some()
                    assert chunk, f"aether edge ended: {received!r}"
                    received += chunk
            line = received.decode().splitlines()[0]
            assert line.startswith(f"aether edge {POD}: log ")
            assert f"kubernetes {api.url}, endpoints from registrar {address}" in line

            async def scoped() -> bool:
                try:
                    state = await trio.to_thread.run_sync(fetch_admin, tmp_path / "admin.sock", "/state")
                except OSError:
                    return False
                return (state["gateway_objects"], state["endpoints"]) == (3, 1)

            await wait_for(scoped, timeout=CONVERGE)
        finally:
            process.kill()
            await process.wait()
        services.cancel_scope.cancel()
