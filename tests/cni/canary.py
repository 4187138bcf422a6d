"""The canary's shape for the netns tests: two versions' pods of one service account (`default/echo`) on another
node, told apart only by their `version` label, and the objects an agent learns before a pod starts."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from aether.agent.app import RunningAgent
from aether.core.events.kube import KubeObject, KubeService
from aether.testing import (
    endpoints_snapshot_completed,
    endpoints_snapshot_received,
    gateway_object_upserted,
    kube_service_upserted,
    make_endpoint,
    make_pod,
    pod_added,
)
from tests.cni.conftest import MANAGED, PluginRun, environment, network_config, prev_result, run_cni_process


async def learn_canary(
    agent: RunningAgent,
    versions: Mapping[str, str],
    *,
    services: Iterable[KubeService],
    objects: Iterable[KubeObject],
) -> None:
    """Tell `agent` the pods `echo-<version>` (version → pod IP) of the service account `default/echo` on node-b,
    their registry endpoints (with their labels), `services` and the Gateway API `objects`."""
    labels = {version: {**MANAGED, "app": "echo", "version": version} for version in versions}
    at = time.time_ns()
    async with agent.journal.sender() as send:
        for version, ip in versions.items():
            pod = make_pod(
                f"echo-{version}",
                service_account="echo",
                node_name="node-b",
                ips=(ip,),
                labels=labels[version],
            )
            await send.send(pod_added(pod, at=at, source="kubernetes"))
        for service in services:
            await send.send(kube_service_upserted(service, at=at))
        for item in objects:
            await send.send(gateway_object_upserted(item, at=at))
        endpoints = [
            make_endpoint(ip, service="default/echo", labels=labels[version])
            for version, ip in versions.items()
        ]
        await send.send(endpoints_snapshot_received(*endpoints, at=at))
        await send.send(endpoints_snapshot_completed(at=at))


async def start_captured_pod(pod: Path, cni_socket: Path) -> None:
    """Run the plugin's ADD for `default/web-1` in the namespace `pod`: it returns once Envoy ACKed the pod's
    listeners, built from everything the agent knew by then."""
    run = await run_cni_process(environment("ADD", netns=pod), network_config(cni_socket))
    assert run == PluginRun(status=0, output=prev_result())
