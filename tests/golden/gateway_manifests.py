"""Test-side reading of Kubernetes-style YAML manifests into events, for the Gateway API golden cases.

Deliberately small: Services, Pods, ReferenceGrants and the Gateway API kinds, the fields the projection reads.
A document without `metadata.creationTimestamp` gets one from its position (a second per document), so the order
of a case file is the age order of its objects unless a case says otherwise.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import yaml

from aether.core.events import Event
from aether.kube.convert import object_events
from aether.testing import builders


def _timestamp(index: int) -> str:
    return f"2024-01-01T{index // 3600:02d}:{index // 60 % 60:02d}:{index % 60:02d}Z"


def _with_defaults(document: dict[str, Any], index: int) -> dict[str, Any]:
    """`document` with what the cases leave out: generation 1, an age from its position, a pod on node-a with an
    IP, a Service port 80."""
    filled = copy.deepcopy(document)
    metadata = filled.setdefault("metadata", {})
    metadata.setdefault("generation", 1)
    metadata.setdefault("creationTimestamp", _timestamp(index))
    if filled.get("kind") == "Pod":
        filled.setdefault("spec", {}).setdefault("nodeName", "node-a")
        filled.setdefault("status", {}).setdefault("podIP", "10.0.0.10")
    if filled.get("kind") == "Service":
        filled.setdefault("spec", {}).setdefault("ports", [{"port": 80}])
    return filled


def manifest_events(documents: Iterable[dict[str, Any]]) -> list[Event]:
    """Return the events that observe `documents` (in order), through the converter the CLI and sources use."""
    events: list[Event] = []
    for index, document in enumerate(documents):
        converted = object_events(_with_defaults(document, index), source="golden", observed_at=builders.AT)
        if not converted:
            raise AssertionError(f"document {index}: kind {document.get('kind')!r} is not read by the mesh")
        events.extend(converted)
    return events


def read_documents(*texts: str) -> list[dict[str, Any]]:
    """Return the non-empty YAML documents of `texts`, in order."""
    return [document for text in texts for document in yaml.safe_load_all(text) if document]
