"""Tests of the registrar's Kubernetes backend against the test API server: endpoints from labelled pods and their
nodes, changes as store updates, outages as availability; registrations refused."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from aether.cli import main
from aether.core.events.registry import Endpoint, Health, HealthCheckMode, Protocol
from aether.kube.resources import NODES, PODS
from aether.proto.registrar.v1 import registrar_pb2 as pb
from aether.registrar.backends.base import BackendFeed, StoreAvailability
from aether.registrar.backends.kubernetes import KubernetesBackend
from aether.registrar.errors import StoreError
from aether.registrar.snapshot import (
    EndpointRegistered,
    EndpointsReplaced,
    EndpointsUpdated,
    apply_update,
    empty_snapshot,
)
from aether.rpc.backoff import Backoff
from aether.testing.kubeapi import KubeApi, open_kube_api
from tests.registrar._grpc import rpc
from tests.registrar._kube import client_of, node_object, pod_name, pod_object, put_node

FAST = Backoff(base=0.01, cap=0.05)
WEB = "shop/web"


@pytest.fixture
async def api() -> AsyncIterator[KubeApi]:
    async with open_kube_api() as server:
        yield server


def backend_of(api: KubeApi) -> KubernetesBackend:
    return KubernetesBackend(client_of(api), backoff=FAST, rng=random.Random(3))


def expected(ip: str, **fields: object) -> Endpoint:
    values: dict[str, object] = {
        "service": WEB,
        "ip": ip,
        "port": 8080,
        "health": Health.HEALTHY,
        "health_check_mode": HealthCheckMode.EDS,
        "namespace": "shop",
        "pod_name": pod_name(WEB, ip),
        "node_name": "node-1",
        "labels": {"aether.io/managed": "true"},
        **fields,
    }
    return Endpoint(**values)  # type: ignore[arg-type]


async def feed(backend: KubernetesBackend, nursery: trio.Nursery) -> trio.MemoryReceiveChannel[BackendFeed]:
    send, receive = trio.open_memory_channel[BackendFeed](100)
    await nursery.start(backend.serve_updates, send)
    return receive


async def next_feed(receive: trio.MemoryReceiveChannel[BackendFeed]) -> BackendFeed:
    with trio.fail_after(10):
        return await receive.receive()


async def test_load_derives_endpoints_from_meshed_pods_and_their_nodes(api: KubeApi) -> None:
    """Only labelled, addressed, unfinished pods outside the system namespaces count; annotations, health and
    locality are read; the snapshot's version is the API's."""
    put_node(api, "node-1", region="eu-west", zone="eu-west-1a", internal_ip="192.168.0.1")
    annotated = {
        "endpoint.aether.io/port": "9090",
        "endpoint.aether.io/ports": "9091,9092",
        "endpoint.aether.io/weight": "10",
        "endpoint.aether.io/protocol": "tcp",
    }
    api.store.create(PODS, pod_object(WEB, "10.0.0.1", annotations=annotated))
    api.store.create(PODS, pod_object(WEB, "10.0.0.2", conditions=[{"type": "Ready", "status": "False"}]))
    draining = pod_object(WEB, "10.0.0.3")
    draining["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    api.store.create(PODS, draining)
    api.store.create(PODS, pod_object(WEB, "10.0.0.4", labels={}))
    api.store.create(PODS, pod_object("kube-system/dns", "10.0.0.5"))
    api.store.create(PODS, pod_object("spire-server/spire", "10.0.0.6"))
    api.store.create(PODS, pod_object(WEB, "10.0.0.7", phase="Succeeded"))
    host = pod_object(WEB, "10.0.0.8")
    host["spec"]["hostNetwork"] = True
    api.store.create(PODS, host)
    no_ip = pod_object(WEB, "10.0.0.9")
    del no_ip["status"]["podIP"], no_ip["status"]["podIPs"]
    api.store.create(PODS, no_ip)

    snapshot = await backend_of(api).load()

    locality = {"region": "eu-west", "zone": "eu-west-1a", "node_ip": "192.168.0.1"}
    assert snapshot.sorted_endpoints() == (
        expected("10.0.0.2", health=Health.UNHEALTHY, **locality),
        expected("10.0.0.3", health=Health.DRAINING, **locality),
        expected("10.0.0.1", protocol=Protocol.TCP, port=9090, ports=(9091, 9092), weight=10, **locality),
    )
    assert snapshot.version == api.store.revision


async def test_changes_of_pods_and_nodes_become_store_updates(api: KubeApi) -> None:
    """Readiness, labels, deletion and the node's zone: each change is one EndpointsUpdated naming what changed."""
    put_node(api, "node-1", region="r", zone="a")
    api.store.create(PODS, pod_object(WEB, "10.0.0.1"))
    api.store.create(PODS, pod_object(WEB, "10.0.0.2"))
    backend = backend_of(api)
    await backend.load()
    async with trio.open_nursery() as nursery:
        receive = await feed(backend, nursery)
        api.store.update(PODS, pod_object(WEB, "10.0.0.1", conditions=[]))
        assert await next_feed(receive) == EndpointsUpdated(
            upserted=(expected("10.0.0.1", health=Health.UNHEALTHY, region="r", zone="a"),)
        )
        api.store.update(NODES, node_object("node-1", region="r", zone="b"))
        assert await next_feed(receive) == EndpointsUpdated(
            upserted=(
                expected("10.0.0.1", health=Health.UNHEALTHY, region="r", zone="b"),
                expected("10.0.0.2", region="r", zone="b"),
            )
        )
        api.store.update(PODS, pod_object(WEB, "10.0.0.2", labels={}))
        assert await next_feed(receive) == EndpointsUpdated(removed=((WEB, Protocol.HTTP, "10.0.0.2"),))
        api.store.delete(PODS, name=pod_name(WEB, "10.0.0.1"), namespace="shop")
        assert await next_feed(receive) == EndpointsUpdated(removed=((WEB, Protocol.HTTP, "10.0.0.1"),))
        assert backend.statistics().endpoints == 0
        nursery.cancel_scope.cancel()


async def test_an_outage_is_reported_and_a_compacted_return_relists(api: KubeApi) -> None:
    """The API goes away: not available; it returns with its history compacted: available, and the whole set."""
    api.store.create(PODS, pod_object(WEB, "10.0.0.1"))
    backend = backend_of(api)
    await backend.load()
    async with trio.open_nursery() as nursery:
        receive = await feed(backend, nursery)
        with trio.fail_after(10):
            await api.wait_watches(open_count=2)
        await api.stop()
        unavailable = await next_feed(receive)
        assert isinstance(unavailable, StoreAvailability)
        assert unavailable.available is False
        api.store.delete(PODS, name=pod_name(WEB, "10.0.0.1"), namespace="shop")
        api.store.create(PODS, pod_object(WEB, "10.0.0.2"))
        await api.restart(nursery=nursery)
        got = [await next_feed(receive) for _ in range(3)]
        assert StoreAvailability(available=True) in got
        assert EndpointsReplaced(endpoints=(expected("10.0.0.2"),)) in got
        nursery.cancel_scope.cancel()


async def test_load_waits_for_the_api(api: KubeApi) -> None:
    """A registrar started before the API server gets its first snapshot once the server answers."""
    api.store.create(PODS, pod_object(WEB, "10.0.0.1"))
    await api.stop()
    backend = backend_of(api)
    async with trio.open_nursery() as nursery:
        loaded: list[int] = []
        done = trio.Event()

        async def load() -> None:
            loaded.append(len((await backend.load()).endpoints))
            done.set()

        nursery.start_soon(load)
        await trio.testing.wait_all_tasks_blocked()
        assert loaded == []
        await api.restart(nursery=nursery)
        with trio.fail_after(10):
            await done.wait()
        assert loaded == [1]
        nursery.cancel_scope.cancel()


async def test_registrations_are_refused(api: KubeApi) -> None:
    """The backend is read-only: `writable` is False, and `apply` refuses with a StoreError naming it."""
    backend = backend_of(api)
    assert (backend.writable, backend.description) == (False, f"kubernetes {api.url}")
    with pytest.raises(StoreError, match=r"^registry store 'kubernetes http://127\.0\.0\.1:\d+': read-only"):
        await backend.apply(
            EndpointRegistered(endpoint=expected("10.0.0.1")), snapshot=empty_snapshot(), changes=()
        )


async def test_the_registrar_process_serves_the_cluster_pods(api: KubeApi, tmp_path: Path) -> None:
    """`aether registrar --backend kubernetes --kube-api URL` lists the labelled pods' endpoints, and follows them."""
    api.store.create(PODS, pod_object(WEB, "10.0.0.1"))
    socket = tmp_path / "registrar.sock"
    command = [sys.executable, "-m", "aether.cli", "registrar", "--backend", "kubernetes"]
    command += ["--kube-api", api.url, "--listen", f"unix:{socket}"]
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            partial(trio.run_process, command, check=False, stderr=subprocess.DEVNULL)
        )
        try:
            with trio.fail_after(30):
                # Another process: nothing in this trio loop could signal it, so poll (under fail_after).
                while not socket.exists():  # noqa: ASYNC110
                    await trio.sleep(0.05)
                assert await listed_ips(socket) == {WEB: ["10.0.0.1"]}
                api.store.create(PODS, pod_object(WEB, "10.0.0.2"))
                while await listed_ips(socket) != {WEB: ["10.0.0.1", "10.0.0.2"]}:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        finally:
            process.terminate()


async def listed_ips(socket: Path) -> dict[str, list[str]]:
    response = await rpc(socket, "ListAllEndpoints", pb.ListAllEndpointsRequest())
    return {
        service: sorted(one.ip for one in group.endpoints) for service, group in response.services.items()
    }


def test_without_a_cluster_the_kubernetes_backend_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a pod and without --kube-api or --kubeconfig: a clear message and exit status 2."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["registrar", "--backend", "kubernetes"]) == 2
    assert capsys.readouterr().err == (
        "aether: error: kubernetes config 'in-cluster': KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are "
        "unset: not running in a pod; use --kubeconfig or --kube-api\n"
    )


async def test_random_churn_folds_to_what_a_fresh_load_sees(api: KubeApi) -> None:
    """Seeded random pod and node changes, cut watches and a compaction: the snapshot folded from the feed equals
    the snapshot a new backend loads."""
    rng = random.Random(5)
    backend = backend_of(api)
    snapshot = await backend.load()
    async with trio.open_nursery() as nursery:
        receive = await feed(backend, nursery)
        for step in range(80):
            ip = f"10.0.0.{rng.randrange(1, 10)}"
            node = f"node-{rng.randrange(3)}"
            action = rng.random()
            if action < 0.4:
                ready = [{"type": "Ready", "status": "True" if rng.random() < 0.7 else "False"}]
                api.store.put(PODS, pod_object(WEB, ip, node=node, conditions=ready))
            elif action < 0.55 and api.store.get(PODS, name=pod_name(WEB, ip), namespace="shop") is not None:
                api.store.delete(PODS, name=pod_name(WEB, ip), namespace="shop")
            elif action < 0.8:
                put_node(api, node, region="r", zone=f"z{rng.randrange(3)}", internal_ip=f"192.168.0.{step}")
            elif action < 0.9:
                api.drop_watches()
            else:
                api.compact()
                api.drop_watches()
        expected_snapshot = await backend_of(api).load()
        with trio.fail_after(10):
            while snapshot.endpoints != expected_snapshot.endpoints:
                update = await receive.receive()
                if not isinstance(update, StoreAvailability):
                    snapshot, _ = apply_update(snapshot, update)
        nursery.cancel_scope.cancel()
