"""xDS feedback events: what Envoy said about the config it was sent."""

from __future__ import annotations

import attrs

from aether.core.events.base import Event


@attrs.frozen(kw_only=True)
class ResourceAcked(Event):
    """Envoy `node_id` accepted `version` of the resources of `type_url` (a request whose nonce matched)."""

    node_id: str
    type_url: str
    version: str
    nonce: str = ""

    @property
    def subject(self) -> str:
        return f"xds/{self.node_id}/{self.type_url}"


@attrs.frozen(kw_only=True)
class ResourceNacked(Event):
    """Envoy `node_id` rejected `version` of `type_url` with `error_message`; its last accepted version stays."""

    node_id: str
    type_url: str
    version: str
    nonce: str = ""
    error_code: int = 0
    error_message: str

    @property
    def subject(self) -> str:
        return f"xds/{self.node_id}/{self.type_url}"


@attrs.frozen(kw_only=True)
class OnDemandClusterRequested(Event):
    """Envoy `node_id` asked for a cluster its snapshot does not hold (on-demand CDS)."""

    node_id: str
    cluster_name: str

    @property
    def subject(self) -> str:
        return f"cluster/{self.cluster_name}"
