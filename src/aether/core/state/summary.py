"""Human-facing views of a state: counts with the digest, and a JSON document with secrets redacted."""

from __future__ import annotations

from typing import Any

import attrs
from google.protobuf import json_format

from aether.core.state.codec import state_digest, state_to_proto
from aether.core.state.state import State


@attrs.frozen(kw_only=True)
class StateSummary:
    """What a state holds, counted, plus its digest."""

    seq: int
    digest: str
    pods: int
    registry_version: str
    registry_synced: bool
    services: int
    endpoints: int
    kube_services: int
    gateway_objects: int
    reference_grants: int
    mesh_domain: str
    svids: int
    trust_bundles: int
    xds_streams: int
    xds_nacked: int
    on_demand: int
    rejections: int
    rejected_total: int

    def lines(self) -> list[str]:
        """Return the summary as aligned `name: value` lines, in field order."""
        return [f"{field.name:<17} {getattr(self, field.name)}" for field in attrs.fields(StateSummary)]


def summarize(state: State) -> StateSummary:
    """Count what `state` holds."""
    return StateSummary(
        seq=state.seq,
        digest=state_digest(state),
        pods=len(state.pods),
        registry_version=state.registry.version,
        registry_synced=state.registry.synced,
        services=len(state.registry.services),
        endpoints=state.registry.endpoint_count(),
        kube_services=len(state.kube.services),
        gateway_objects=len(state.kube.gateway_objects),
        reference_grants=len(state.kube.reference_grants),
        mesh_domain=state.kube.mesh_config.mesh_domain,
        svids=len(state.identity.svids),
        trust_bundles=len(state.identity.trust_bundles),
        xds_streams=len(state.feedback.streams),
        xds_nacked=sum(1 for item in state.feedback.streams.values() if item.nacked_version),
        on_demand=len(state.feedback.on_demand),
        rejections=len(state.diagnostics.rejections),
        rejected_total=state.diagnostics.rejected_total,
    )


def state_document(state: State) -> dict[str, Any]:
    """Return the whole state as a JSON-ready document (the checkpoint's fields), private keys redacted."""
    message = state_to_proto(state)
    for svid in message.svids:
        svid.private_key = f"<redacted {len(svid.private_key)} bytes>".encode()
    document: dict[str, Any] = json_format.MessageToDict(message, always_print_fields_with_no_presence=False)
    return document
