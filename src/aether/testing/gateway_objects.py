"""Builders of Gateway API objects for tests and benchmarks: any kind from its spec, and the edge's Gateway."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aether.core.events import Event
from aether.core.events.kube import KubeObject, ObjectMeta
from aether.core.gateway import EDGE_CONTROLLER
from aether.core.reduce.kube import canonical_json
from aether.testing.builders import gateway_object_upserted

EDGE_LISTENER = {
    "name": "http",
    "port": 8080,
    "protocol": "HTTP",
    "allowedRoutes": {"namespaces": {"from": "All"}},
}
"""The edge Gateway's default listener: HTTP on 8080, routes from every namespace."""


def gateway_api_object(
    kind: str,
    name: str,
    spec: Mapping[str, Any],
    *,
    namespace: str = "default",
    generation: int = 1,
    creation_timestamp: str = "2024-01-01T00:00:00Z",
) -> KubeObject:
    """Return a Gateway API object of `kind` with `spec` (written as canonical JSON; a GatewayClass has no namespace)."""
    meta = ObjectMeta(
        kind=kind,
        namespace="" if kind == "GatewayClass" else namespace,
        name=name,
        generation=generation,
        creation_timestamp=creation_timestamp,
    )
    return KubeObject(meta=meta, spec_json=canonical_json(dict(spec)))


def edge_gateway_events(*, listeners: Sequence[Mapping[str, Any]] = (EDGE_LISTENER,)) -> list[Event]:
    """Return the events of the edge's GatewayClass `aether` and its Gateway `edge/edge` with `listeners`."""
    return [
        gateway_object_upserted(
            gateway_api_object("GatewayClass", "aether", {"controllerName": EDGE_CONTROLLER})
        ),
        gateway_object_upserted(
            gateway_api_object(
                "Gateway",
                "edge",
                {"gatewayClassName": "aether", "listeners": [dict(item) for item in listeners]},
                namespace="edge",
            )
        ),
    ]
