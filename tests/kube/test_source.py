"""The agent's Kubernetes source against the test API server: objects reach the journal's state as events; deletions
while the agent was down or hidden by a compaction are caught by the next list; bad objects are skipped."""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from aether.core.state import State
from aether.kube.api import KubeClient
from aether.kube.config import ClusterConfig
from aether.kube.resources import ENDPOINT_SLICES, HTTP_ROUTES, PODS, REFERENCE_GRANTS, SERVICES
from aether.kube.source import (
    MESH_QUERIES,
    KubeSourceStatistics,
    known_objects,
    node_pod_query,
    serve_kube_source,
)
from aether.plane.journal import Journal, open_journal
from aether.rpc.backoff import Backoff
from aether.testing.envoy import wait_for
from aether.testing.kubeapi import KubeApi, open_kube_api

FAST = Backoff(base=0.01, cap=0.05)
AT = 1_700_000_000_000_000_000


def service(name: str, *, namespace: str = "shop") -> Any:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }


def route(name: str) -> Any:
    return {
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "parentRefs": [{"group": "", "kind": "Service", "name": "web"}],
            "rules": [{"backendRefs": [{"name": "web", "port": 80}]}],
        },
    }


def grant() -> Any:
    return {
        "metadata": {"name": "allow-shop", "namespace": "db"},
        "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "shop"}],
            "to": [{"group": "", "kind": "Service"}],
        },
    }


def pod(name: str, *, node: str) -> Any:
    return {
        "metadata": {"name": name, "namespace": "shop", "labels": {"aether.io/managed": "true"}},
        "spec": {"nodeName": node, "serviceAccountName": "web"},
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }


def kube_keys(state: State) -> list[str]:
    return sorted(
        [*state.kube.services.keys(), *state.kube.gateway_objects.keys(), *state.kube.reference_grants.keys()]
    )


async def until(journal: Journal, done: Callable[[State], bool]) -> None:
    reached = trio.Event()
    journal.subscribe(lambda state, now: reached.set() if done(state) else None)
    with trio.fail_after(10):
        await reached.wait()


@contextlib.asynccontextmanager
async def running_source(
    api: KubeApi, journal: Journal, **options: Any
) -> AsyncIterator[Callable[[], KubeSourceStatistics]]:
    client = KubeClient(ClusterConfig.from_url(api.url))
    async with trio.open_nursery() as nursery:
        statistics = await nursery.start(
            lambda task_status: serve_kube_source(
                client,
                journal.sender(),
                backoff=FAST,
                rng=random.Random(5),
                clock=lambda: AT,
                task_status=task_status,
                **options,
            )
        )
        yield statistics
        nursery.cancel_scope.cancel()


async def test_objects_and_node_pods_reach_the_journal(tmp_path: Path) -> None:
    """Services, routes, grants and this node's meshed pods become state; changes and deletions follow."""
    async with open_kube_api() as api, open_journal(tmp_path / "log") as journal:
        api.store.create(SERVICES, service("web"))
        api.store.create(HTTP_ROUTES, route("web-route"))
        api.store.create(REFERENCE_GRANTS, grant())
        api.store.create(PODS, pod("web-1", node="node-1"))
        api.store.create(PODS, pod("web-2", node="node-2"))
        queries = (*MESH_QUERIES, node_pod_query("node-1"))
        async with running_source(api, journal, queries=queries) as statistics:
            await until(journal, lambda s: len(kube_keys(s)) == 3 and "shop/web-1" in s.pods)
            assert kube_keys(journal.state) == [
                "HTTPRoute/shop/web-route",
                "ReferenceGrant/db/allow-shop",
                "Service/shop/web",
            ]
            assert sorted(journal.state.pods.keys()) == ["shop/web-1"]
            api.store.create(SERVICES, service("db", namespace="db"))
            api.store.delete(HTTP_ROUTES, name="web-route", namespace="shop")
            api.store.delete(PODS, name="web-1", namespace="shop")
            # The three changes travel on three watches, so they arrive in any order: wait for all of them.
            after = ["ReferenceGrant/db/allow-shop", "Service/db/db", "Service/shop/web"]
            await until(journal, lambda s: kube_keys(s) == after and not s.pods)
            assert kube_keys(journal.state) == after
            assert statistics().rejected == 0


async def test_deletions_while_down_are_caught_at_start_up(tmp_path: Path) -> None:
    """Restarted with the keys of its replayed state, the source deletes what vanished while it was down."""
    async with open_kube_api() as api:
        api.store.create(SERVICES, service("web"))
        api.store.create(SERVICES, service("old"))
        async with open_journal(tmp_path / "log") as journal, running_source(api, journal):
            await until(journal, lambda s: len(s.kube.services) == 2)
        api.store.delete(SERVICES, name="old", namespace="shop")
        async with open_journal(tmp_path / "log") as journal:
            assert sorted(journal.state.kube.services.keys()) == ["Service/shop/old", "Service/shop/web"]
            known = known_objects(journal.state, queries=MESH_QUERIES)
            async with running_source(api, journal, known=known):
                await until(journal, lambda s: sorted(s.kube.services.keys()) == ["Service/shop/web"])


async def test_a_restart_with_nothing_changed_appends_nothing(tmp_path: Path) -> None:
    """Restarted over its replayed log, the first lists of an unchanged API send no event (no re-upsert of the
    Services, routes and the node's pods); a Service changed meanwhile sends only its upsert."""
    queries = (*MESH_QUERIES, node_pod_query("node-1"))
    async with open_kube_api() as api:
        api.store.create(SERVICES, service("web"))
        api.store.create(SERVICES, service("db"))
        api.store.create(HTTP_ROUTES, route("web-route"))
        api.store.create(PODS, pod("web-1", node="node-1"))
        async with open_journal(tmp_path / "log") as journal, running_source(api, journal, queries=queries):
            await until(journal, lambda s: len(kube_keys(s)) == 3 and "shop/web-1" in s.pods)
        for changed in (False, True):
            if changed:
                api.store.update(SERVICES, {**service("db"), "spec": {"ports": [{"port": 81}]}})
            async with open_journal(tmp_path / "log") as journal:
                seq = journal.state.seq
                known = known_objects(journal.state, queries=queries)
                async with running_source(api, journal, queries=queries, known=known) as statistics:

                    async def listed() -> bool:
                        return statistics().resyncs == len(queries)

                    await wait_for(listed, timeout=10)  # nothing may be appended: poll the source's counters
                    assert statistics().events == (1 if changed else 0)
                    await until(journal, lambda s, seq=seq: s.seq == seq + statistics().events)
                    assert journal.state.kube.services["Service/shop/db"].ports[0].port == (
                        81 if changed else 80
                    )


async def test_a_compaction_while_cut_off_deletes_the_vanished(tmp_path: Path) -> None:
    """The API restarts with its history compacted: the re-list removes what was deleted meanwhile."""
    async with (
        open_kube_api() as api,
        open_journal(tmp_path / "log") as journal,
        trio.open_nursery() as nursery,
    ):
        api.store.create(HTTP_ROUTES, route("a"))
        api.store.create(HTTP_ROUTES, route("b"))
        async with running_source(api, journal) as statistics:
            await until(journal, lambda s: len(s.kube.gateway_objects) == 2)
            await api.stop()
            api.store.delete(HTTP_ROUTES, name="a", namespace="shop")
            await api.restart(nursery=nursery)
            await until(journal, lambda s: sorted(s.kube.gateway_objects.keys()) == ["HTTPRoute/shop/b"])
            assert statistics().resyncs >= len(MESH_QUERIES) + 1
        nursery.cancel_scope.cancel()


async def test_an_unreadable_object_is_skipped(tmp_path: Path) -> None:
    """A Service whose selector values are not strings is logged and skipped; the others still arrive."""
    async with open_kube_api() as api, open_journal(tmp_path / "log") as journal:
        broken = service("broken")
        broken["spec"]["selector"] = {"tier": 3}
        api.store.create(SERVICES, broken)
        api.store.create(SERVICES, service("web"))
        async with running_source(api, journal) as statistics:
            await until(journal, lambda s: "Service/shop/web" in s.kube.services)
            assert (sorted(journal.state.kube.services.keys()), statistics().rejected) == (
                ["Service/shop/web"],
                1,
            )


async def test_the_agent_watches_the_api_it_is_given_and_the_cni_keeps_the_pods_labels(
    tmp_path: Path,
) -> None:
    """`AgentConfig.kube` starts the source with the node's pods; the CNI service then finds a pod's labels and
    service account in the agent's own log, and a later API update keeps the sandbox the CNI reported."""
    from aether.agent.app import AgentConfig, RunningAgent, serve_agent
    from aether.cni.server import PodMetadata
    from aether.rpc.listen import ListenAddress

    async with open_kube_api() as api, trio.open_nursery() as nursery:
        api.store.create(SERVICES, service("web"))
        api.store.create(PODS, pod("web-1", node="node-1"))
        api.store.create(PODS, pod("web-2", node="node-2"))
        config = AgentConfig(
            node_name="node-1",
            log_dir=tmp_path / "log",
            xds=ListenAddress.unix(tmp_path / "xds.sock"),
            admin_socket=tmp_path / "admin.sock",
            kube=KubeClient(ClusterConfig.from_url(api.url)),
            cni_socket=tmp_path / "cni.sock",
        )
        agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
        await until(agent.journal, lambda state: "shop/web-1" in state.pods and bool(state.kube.services))
        assert sorted(agent.journal.state.pods) == ["shop/web-1"]  # only this node's pods

        from aether.agent.pod_lookup import StatePodLookup

        lookup = StatePodLookup()
        agent.journal.subscribe(lookup.follow)
        found = lookup("shop", "web-1")
        assert found is not None
        assert found == PodMetadata(
            uid=found.uid, service_account="web", labels={"aether.io/managed": "true"}, annotations={}
        )
        assert found.uid  # the API server's uid, from the watch
        assert lookup("shop", "nobody") is None
        nursery.cancel_scope.cancel()


def test_a_lookup_fed_by_the_pod_watch_asks_for_a_retry_for_a_pod_it_lacks() -> None:
    from aether.agent.pod_lookup import StatePodLookup
    from aether.cni.server import PodNotKnown
    from aether.core.state import EMPTY_STATE

    lookup = StatePodLookup(authoritative=True)
    lookup.follow(EMPTY_STATE, 0)
    with pytest.raises(PodNotKnown):
        lookup("shop", "web-1")
    assert StatePodLookup()("shop", "web-1") is None


def endpoint_slice(name: str, *, service_name: str, address: str) -> Any:
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": {"kubernetes.io/service-name": service_name},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
    }


async def test_endpoint_slices_are_watched_and_a_deletion_while_down_is_caught(tmp_path: Path) -> None:
    """The agent watches EndpointSlices (the backends of Services without a selector): a slice becomes state,
    indexed under its Service; a slice deleted while the agent was down is deleted at its next start."""
    async with open_kube_api() as api:
        api.store.create(
            ENDPOINT_SLICES, endpoint_slice("legacy-1", service_name="legacy", address="192.0.2.1")
        )
        api.store.create(
            ENDPOINT_SLICES, endpoint_slice("legacy-2", service_name="legacy", address="192.0.2.2")
        )
        async with open_journal(tmp_path / "log") as journal, running_source(api, journal) as statistics:
            await until(journal, lambda s: len(s.kube.endpoint_slices) == 2)
            assert [
                item.endpoints[0].addresses for item in journal.state.kube.slices_of("shop", "legacy")
            ] == [
                ("192.0.2.1",),
                ("192.0.2.2",),
            ]
            assert statistics().rejected == 0
        api.store.delete(ENDPOINT_SLICES, name="legacy-2", namespace="shop")
        async with open_journal(tmp_path / "log") as journal:
            known = known_objects(journal.state, queries=MESH_QUERIES)
            async with running_source(api, journal, known=known):
                await until(
                    journal, lambda s: list(s.kube.endpoint_slices) == ["EndpointSlice/shop/legacy-1"]
                )
            assert dict(journal.state.kube.slices_by_service) == {
                "shop/legacy": {"EndpointSlice/shop/legacy-1"}
            }
