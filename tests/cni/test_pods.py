"""The pod directory over the test Kubernetes API: labels and service accounts for the CNI service, retries until
the watch has seen a pod."""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from aether.agent.app import RunningAgent, serve_agent
from aether.cni import call_agent
from aether.cni.client import agent_errors
from aether.cni.errors import AgentUnavailable
from aether.cni.pods import PodDirectory, PodDirectoryStatistics, serve_pod_directory
from aether.cni.server import PodMetadata, PodNotKnown
from aether.kube.api import KubeClient
from aether.kube.config import ClusterConfig
from aether.kube.resources import PODS
from aether.proto.cni.v1 import cni_pb2
from aether.testing.envoy import wait_for
from aether.testing.kubeapi import KubeApi, open_kube_api
from tests.cni.conftest import MANAGED, NODE_NAME, POD_IP, agent_config

UNSEEN = "pod 'shop/{name}' is not known to the agent yet (the agent's pod watch has not seen it); retry"


def _pod(name: str, *, node: str = NODE_NAME, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "labels": labels or {}},
        "spec": {"nodeName": node, "serviceAccountName": "cart"},
    }


@pytest.fixture
async def api() -> AsyncIterator[KubeApi]:
    async with open_kube_api() as server:
        yield server


async def _directory(nursery: trio.Nursery, api: KubeApi) -> PodDirectory:
    client = KubeClient(ClusterConfig.from_url(api.url))
    directory: PodDirectory = await nursery.start(
        functools.partial(serve_pod_directory, client, node_name=NODE_NAME)
    )
    return directory


async def _known(directory: PodDirectory, namespace: str, name: str) -> PodMetadata:
    """The pod's metadata once the directory has seen it (the reflector runs in another task)."""

    async def known() -> bool:
        try:
            directory.lookup(namespace, name)
        except PodNotKnown:
            return False
        return True

    await wait_for(known, timeout=10)
    return directory.lookup(namespace, name)


async def test_the_directory_follows_this_nodes_pods(api: KubeApi, nursery: trio.Nursery) -> None:
    """Pods of this node with their labels and service account; other nodes' pods and deleted ones are unknown."""
    created = api.store.create(PODS, _pod("cart-1", labels=MANAGED))
    api.store.create(PODS, _pod("elsewhere", node="node-b"))
    directory = await _directory(nursery, api)
    assert await _known(directory, "shop", "cart-1") == PodMetadata(
        uid=created["metadata"]["uid"], service_account="cart", labels=MANAGED
    )
    with pytest.raises(PodNotKnown, match=re.escape(UNSEEN.format(name="elsewhere"))):
        directory.lookup("shop", "elsewhere")
    created = api.store.create(PODS, _pod("cart-2"))
    assert await _known(directory, "shop", "cart-2") == PodMetadata(
        uid=created["metadata"]["uid"], service_account="cart"
    )
    api.store.delete(PODS, name="cart-1", namespace="shop")

    async def deleted() -> bool:
        return directory.statistics() == PodDirectoryStatistics(synced=True, pods=1, rejected=0)

    await wait_for(deleted, timeout=10)


async def test_add_pod_is_retried_until_the_watch_has_seen_the_pod(
    api: KubeApi, nursery: trio.Nursery, short_dir: Path
) -> None:
    """An ADD that outruns the watch is UNAVAILABLE (code 11 for the plugin); once the pod is seen, it is managed."""
    directory = await _directory(nursery, api)

    async def synced() -> bool:
        return directory.statistics().synced

    await wait_for(synced, timeout=10)
    config = agent_config(short_dir, lookup=directory.lookup, ack_wait=0.0)
    running: RunningAgent = await nursery.start(serve_agent, config)
    socket = short_dir / "cni.sock"
    request = cni_pb2.AddPodRequest(
        pod=cni_pb2.CNIPod(name="cart-1", namespace="shop", container_id="c1", ips=[POD_IP])
    )
    with pytest.raises(AgentUnavailable) as caught, agent_errors(socket, "AddPod"):
        await call_agent(socket, "AddPod", request, cni_pb2.AddPodResponse)
    assert (caught.value.code, caught.value.details) == (
        11,
        UNSEEN.format(name="cart-1"),
    )
    api.store.create(PODS, _pod("cart-1", labels=MANAGED))
    await _known(directory, "shop", "cart-1")
    response = await call_agent(socket, "AddPod", request, cni_pb2.AddPodResponse)
    assert response.result == cni_pb2.RESULT_SUCCESS

    async def folded() -> bool:  # ack_wait 0: the answer may come before the journal folded the pod
        return "shop/cart-1" in running.journal.state.pods

    await wait_for(folded, timeout=10)
    assert running.journal.state.pods["shop/cart-1"].pod.service_account == "cart"
