"""The pods of this node, each with the mesh settings read from its annotations."""

from __future__ import annotations

import attrs

from aether.core.events.pods import Pod
from aether.core.events.registry import HealthCheckMode, Protocol


@attrs.frozen(kw_only=True)
class PodConfig:
    """A pod's mesh settings, parsed from its annotations (defaults where an annotation is absent or invalid)."""

    port: int = 8080
    ports: tuple[int, ...] = (8080,)
    """Every app port, sorted: `endpoint.aether.io/ports` plus `port`."""
    weight: int = 1024
    protocol: Protocol = Protocol.HTTP
    upstreams: tuple[str, ...] = ()
    """Mesh service keys `<ns>/<sa>` this pod calls, sorted and distinct."""
    health_check_mode: HealthCheckMode = HealthCheckMode.EDS


@attrs.frozen(kw_only=True)
class PodRecord:
    """A pod of this node and its parsed settings."""

    pod: Pod
    config: PodConfig

    @property
    def service(self) -> str:
        """The pod's mesh service key `<namespace>/<serviceAccount>`."""
        return f"{self.pod.namespace}/{self.pod.service_account}"
