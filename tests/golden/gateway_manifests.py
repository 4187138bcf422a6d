"""Test-side reading of Kubernetes-style YAML manifests into events, for the Gateway API golden cases.

Deliberately small: Services, Pods, ReferenceGrants and the Gateway API kinds, the fields the projection reads.
A document without `metadata.creationTimestamp` gets one from its position (a second per document), so the order
of a case file is the age order of its objects unless a case says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from aether.core.events import Event
from aether.core.events.kube import KubeObject, KubeService, ObjectMeta, ServicePort
from aether.core.reduce.kube import GATEWAY_KINDS, canonical_json
from aether.testing import builders


def _timestamp(index: int) -> str:
    return f"2024-01-01T{index // 3600:02d}:{index // 60 % 60:02d}:{index % 60:02d}Z"


def _meta(document: dict[str, Any], index: int) -> ObjectMeta:
    metadata = document.get("metadata") or {}
    kind = str(document["kind"])
    return ObjectMeta(
        kind=kind,
        namespace="" if kind == "GatewayClass" else str(metadata.get("namespace", "default")),
        name=str(metadata["name"]),
        generation=int(metadata.get("generation", 1)),
        creation_timestamp=str(metadata.get("creationTimestamp", _timestamp(index))),
    )


def manifest_events(documents: Iterable[dict[str, Any]]) -> list[Event]:
    """Return the events that observe `documents` (in order)."""
    events: list[Event] = []
    for index, document in enumerate(documents):
        meta = _meta(document, index)
        kind = meta.kind
        spec = document.get("spec") or {}
        if kind == "Service":
            ports = [
                ServicePort(
                    name=str(port.get("name", "")),
                    port=int(port["port"]),
                    target_port=str(port.get("targetPort", "")),
                )
                for port in spec.get("ports", [{"port": 80}])
            ]
            events.append(
                builders.kube_service_upserted(
                    KubeService(meta=meta, selector=spec.get("selector", {}), ports=ports)
                )
            )
        elif kind == "Pod":
            metadata = document.get("metadata") or {}
            pod = builders.make_pod(
                name=meta.name,
                namespace=meta.namespace,
                service_account=str(spec.get("serviceAccountName", "default")),
                labels=metadata.get("labels", {}),
                node_name=str(spec.get("nodeName", "node-a")),
                ips=[str((document.get("status") or {}).get("podIP", "10.0.0.10"))],
            )
            events.append(builders.pod_added(pod))
        elif kind == "ReferenceGrant":
            events.append(
                builders.reference_grant_upserted(KubeObject(meta=meta, spec_json=canonical_json(spec)))
            )
        elif kind in GATEWAY_KINDS:
            events.append(
                builders.gateway_object_upserted(KubeObject(meta=meta, spec_json=canonical_json(spec)))
            )
        else:
            raise AssertionError(f"document {index}: kind {kind!r} is not read by the golden harness")
    return events


def read_documents(*texts: str) -> list[dict[str, Any]]:
    """Return the non-empty YAML documents of `texts`, in order."""
    return [document for text in texts for document in yaml.safe_load_all(text) if document]
