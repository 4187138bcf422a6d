"""Kubernetes sources against the test API server (loopback HTTP/1.1): a 10,000-pod list, the registrar's
Kubernetes backend loading those pods, and watch throughput through the reflector.

References measured in the same run: one unpaged list of the same pods (what paging costs), and that list for
the backend's load (what deriving endpoints costs).
"""

from __future__ import annotations

import argparse
import random

import trio
from _common import write_results

from aether.kube.api import KubeClient
from aether.kube.config import ClusterConfig
from aether.kube.resources import PODS
from aether.kube.watch import Reflector, Update, Upserted, WatchQuery
from aether.registrar.backends.kubernetes import KubernetesBackend
from aether.testing.kubeapi import open_kube_api

PODS_COUNT = 10_000
WATCH_EVENTS = 10_000


def _pod(index: int, *, generation: int = 0) -> dict[str, object]:
    return {
        "metadata": {
            "name": f"web-{index}",
            "namespace": f"ns{index % 50}",
            "labels": {"aether.io/managed": "true", "app": "web"},
            "annotations": {"endpoint.aether.io/port": "8080", "generation": str(generation)},
        },
        "spec": {"nodeName": f"node-{index % 100}", "serviceAccountName": f"svc{index % 500}"},
        "status": {
            "phase": "Running",
            "podIP": f"10.{index // 62500}.{index // 250 % 250}.{index % 250 + 1}",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


async def _main(pods: int, events: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    async with open_kube_api(history_limit=events + pods) as api:
        for index in range(pods):
            api.store.create(PODS, _pod(index))
        client = KubeClient(ClusterConfig.from_url(api.url))
        start = trio.current_time()
        await client.list_page(PODS)
        figures["list_unpaged_s"] = trio.current_time() - start
        start = trio.current_time()
        listed = await client.list_all(PODS, page_size=500)
        figures["list_paged_500_s"] = trio.current_time() - start
        assert len(listed.items) == pods
        start = trio.current_time()
        snapshot = await KubernetesBackend(client).load()
        figures["backend_load_s"] = trio.current_time() - start
        assert len(snapshot.endpoints) == pods

        send, receive = trio.open_memory_channel[Update](0)
        reflector = Reflector(client, WatchQuery(resource=PODS), rng=random.Random(1))
        async with trio.open_nursery() as nursery:
            await nursery.start(reflector.run, send)
            await receive.receive()  # the Synced
            await api.wait_watches()
            start = trio.current_time()
            for index in range(events):
                api.store.update(PODS, _pod(index % pods, generation=index + 1))
            received = 0
            async for update in receive:
                received += isinstance(update, Upserted)
                if received == events:
                    break
            figures["watch_events_per_s"] = events / (trio.current_time() - start)
            nursery.cancel_scope.cancel()
    figures["paged_over_unpaged"] = figures["list_paged_500_s"] / figures["list_unpaged_s"]
    figures["backend_load_over_paged_list"] = figures["backend_load_s"] / figures["list_paged_500_s"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a tenth of the workload")
    arguments = parser.parse_args()
    scale = 10 if arguments.quick else 1
    figures = trio.run(_main, PODS_COUNT // scale, WATCH_EVENTS // scale)
    for name, value in figures.items():
        print(f"{name:32} {value:10.3f}")
    write_results("kube_quick" if arguments.quick else "kube", {"pods": PODS_COUNT // scale, **figures})


if __name__ == "__main__":
    main()
