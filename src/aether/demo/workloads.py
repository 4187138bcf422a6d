"""The demo's workloads: one small HTTP server per pod, at `<podIP>:8080`, answering with the pod's name.

The set follows the pods of the manifest folder (a pod that appears gets its server, one that leaves loses it),
except the traffic source, which has no server. `kill(pod)` stops a server while its pod stays (a crashed
replica) until the pod leaves and comes back.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence

import trio

from aether.demo.upstream import HttpUpstream, serve_http_upstream

__all__ = ["APP_PORT", "TRAFFIC_SOURCE_LABEL", "Workloads"]

APP_PORT = 8080
"""The application port (the default of `endpoint.aether.io/port`)."""
TRAFFIC_SOURCE_LABEL = ("demo.aether.io/role", "traffic-source")
"""The label of the pod the demo's requests leave from (it runs no server)."""


Listen = Callable[[str, str], Awaitable[Sequence[trio.SocketListener]]]
"""`(pod, ip)` to the listening sockets of the pod's server (another network namespace's, in `--netns` mode)."""


class Workloads:
    """The running servers, keyed by pod name; `sync` them with the manifests' pods."""

    def __init__(self, nursery: trio.Nursery, *, listen: Listen | None = None) -> None:
        self._nursery = nursery
        self._listen = listen
        self._addresses: dict[str, str] = {}
        self._running: dict[str, HttpUpstream] = {}
        self._killed: set[str] = set()

    @property
    def running(self) -> frozenset[str]:
        """The pods whose server is up."""
        return frozenset(self._running)

    async def sync(self, pods: Mapping[str, str]) -> None:
        """Serve exactly `pods` (pod name → IP), except those killed; restart a pod whose IP changed."""
        for name in sorted(set(self._running) - set(pods)):
            self._running.pop(name).stop()
        for name, ip in sorted(pods.items()):
            if self._addresses.get(name) != ip and name in self._running:
                self._running.pop(name).stop()
            self._addresses[name] = ip
            if name not in self._running and name not in self._killed:
                await self._start(name)
        for name in set(self._addresses) - set(pods):
            del self._addresses[name]
            self._killed.discard(name)

    def kill(self, name: str) -> None:
        """Stop `name`'s server (its pod stays in the mesh until the manifests say otherwise)."""
        self._killed.add(name)
        upstream = self._running.pop(name, None)
        if upstream is not None:
            upstream.stop()

    def forget(self, name: str) -> None:
        """Stop `name`'s server and forget the pod (it left)."""
        self.kill(name)
        self._killed.discard(name)
        self._addresses.pop(name, None)

    async def _start(self, name: str) -> None:
        ip = self._addresses[name]
        listeners = None if self._listen is None else await self._listen(name, ip)
        serve = functools.partial(
            serve_http_upstream,
            name=name,
            host=ip,
            port=APP_PORT,
            body=f"{name}\n".encode(),
            listeners=listeners,
        )
        self._running[name] = await self._nursery.start(serve)
