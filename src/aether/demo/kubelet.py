"""The demo's stand-in for the kubelet and the container runtime: it runs the pods the manifests declare.

For each pod of the demo node it keeps, in step with the manifest folder: an SVID file for the pod's service
account (minted by the run's CA), the pod's HTTP server, and, in `--netns` mode, the pod's network namespace with
`aether-cni` ADD run for it (so the agent learns the namespace and the capture rules are programmed, as on a real
node). A pod that leaves the folder loses its server, then (`--netns`) CNI DEL runs and its namespace goes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Mapping
from pathlib import Path

import attrs
import trio

from aether.demo.netns import PodNetwork, listen_in
from aether.demo.workloads import APP_PORT, TRAFFIC_SOURCE_LABEL, Workloads
from aether.identity.mint import TestCA, write_svid
from aether.kube.manifests import ManifestDirectory

__all__ = ["DemoPod", "Kubelet", "demo_pods"]


@attrs.frozen(kw_only=True)
class DemoPod:
    """A pod of the demo node, as its manifest declares it."""

    name: str
    namespace: str
    uid: str
    ip: str
    service: str
    """`<namespace>/<serviceAccount>`."""
    labels: Mapping[str, str]
    upstreams: str = ""
    """Its `config.aether.io/upstreams` annotation."""

    @property
    def traffic_source(self) -> bool:
        return self.labels.get(TRAFFIC_SOURCE_LABEL[0]) == TRAFFIC_SOURCE_LABEL[1]

    @property
    def index(self) -> int:
        """The last octet of its address: names its network namespace and its /30 in `--netns` mode."""
        return int(self.ip.rsplit(".", 1)[-1]) if self.ip.startswith("127.") else int(self.ip.split(".")[2])


def demo_pods(reading: ManifestDirectory, *, node: str) -> dict[str, DemoPod]:
    """Return the pods of `reading` on `node` that have an IP, by name."""
    pods: dict[str, DemoPod] = {}
    for item in reading.objects.values():
        body = item.body
        spec = body.get("spec") or {}
        if body.get("kind") != "Pod" or spec.get("nodeName", node) != node:
            continue
        metadata = body.get("metadata") or {}
        ip = str((body.get("status") or {}).get("podIP") or "")
        if not ip:
            continue
        namespace = str(metadata.get("namespace") or "default")
        name = str(metadata["name"])
        pods[name] = DemoPod(
            name=name,
            namespace=namespace,
            uid=str(metadata.get("uid") or ""),
            ip=ip,
            service=f"{namespace}/{spec.get('serviceAccountName') or 'default'}",
            labels={str(key): str(value) for key, value in (metadata.get("labels") or {}).items()},
            upstreams=str((metadata.get("annotations") or {}).get("config.aether.io/upstreams") or ""),
        )
    return pods


def run_tag(work_dir: Path) -> str:
    """A short tag naming this run's namespaces (stable for one directory, so a rerun cleans up a killed one)."""
    return hashlib.blake2b(str(work_dir.resolve()).encode(), digest_size=3).hexdigest()


class Kubelet:
    """Runs the demo node's pods; `sync` it with the manifests' pods."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        ca: TestCA,
        svids: Path,
        trust_domain: str,
        netns_run: str | None,
        cni_socket: Path | None,
    ) -> None:
        self._ca = ca
        self._svids = svids
        self._trust_domain = trust_domain
        self._netns_run = netns_run
        self._cni_socket = cni_socket
        self._minted: set[str] = set()
        self._networks: dict[str, PodNetwork] = {}
        self._pods: dict[str, DemoPod] = {}
        self.workloads = Workloads(nursery, listen=self._listen if netns_run is not None else None)

    def network(self, pod: str) -> PodNetwork | None:
        """The network namespace of `pod` (`--netns` mode), or None."""
        return self._networks.get(pod)

    async def sync(self, pods: Mapping[str, DemoPod]) -> None:
        """Run exactly `pods`: start what is new, stop what left (a changed pod restarts)."""
        for name in sorted(set(self._pods) - set(pods)):
            await self._stop(self._pods.pop(name))
        for name, pod in sorted(pods.items()):
            known = self._pods.get(name)
            if known is not None and known != pod:
                await self._stop(self._pods.pop(name))
            if name not in self._pods:
                await self._start(pod)
                self._pods[name] = pod
        await self.workloads.sync(self._servers())

    def _servers(self, *, also: DemoPod | None = None) -> dict[str, str]:
        """The servers to run (pod name to IP): the started pods' and `also`'s, but no traffic source's."""
        pods = [*self._pods.values(), *([] if also is None else [also])]
        return {pod.name: pod.ip for pod in pods if not pod.traffic_source}

    async def stop_all(self) -> None:
        """Stop every pod (`--netns`: CNI DEL and namespace removal); never raises."""
        for name in sorted(self._pods):
            await self._stop(self._pods.pop(name))

    async def _start(self, pod: DemoPod) -> None:
        if pod.service not in self._minted:
            namespace, _, account = pod.service.partition("/")
            spiffe_id = f"spiffe://{self._trust_domain}/ns/{namespace}/sa/{account}"
            await trio.to_thread.run_sync(
                functools.partial(
                    write_svid, self._svids, owner=pod.service, content=self._ca.issue(spiffe_id)
                )
            )
            self._minted.add(pod.service)
        if self._netns_run is None or self._cni_socket is None:
            return
        network = PodNetwork(pod=pod.name, index=pod.index, run=self._netns_run)
        await trio.to_thread.run_sync(network.remove)  # what a killed earlier run of this directory left
        add = functools.partial(
            network.cni, "ADD", namespace=pod.namespace, uid=pod.uid, agent_socket=self._cni_socket
        )
        self._networks[pod.name] = network
        added = False
        try:
            await trio.to_thread.run_sync(network.create)
            # The app listens before the ADD registers the pod's endpoint, as a readiness probe would have it: a
            # request routed to the pod in between would find no app (a 503, retried, that can overflow retries).
            await self.workloads.sync(self._servers(also=pod))
            await trio.to_thread.run_sync(add)
            added = True
        finally:
            if not added:
                # Failed or cancelled: the pod is not in `_pods` yet, so `stop_all` would not see it, and its
                # namespace would outlive the demo holding the pod's /30 (see `check_networks`).
                await self._stop(pod)

    async def _stop(self, pod: DemoPod) -> None:
        self.workloads.forget(pod.name)
        network = self._networks.pop(pod.name, None)
        if network is None or self._cni_socket is None:
            return
        with trio.CancelScope(shield=True):
            delete = functools.partial(
                network.cni, "DEL", namespace=pod.namespace, uid=pod.uid, agent_socket=self._cni_socket
            )
            with contextlib.suppress(
                OSError
            ):  # the agent is gone (the demo is stopping): the namespace goes anyway
                await trio.to_thread.run_sync(delete)
            await trio.to_thread.run_sync(network.remove)

    async def _listen(self, name: str, ip: str) -> list[trio.SocketListener]:
        network = self._networks[name]
        return [await listen_in(network.netns, APP_PORT)]
