"""How the test Kubernetes API server reads a request and writes its answer: the query (namespace, label and field
selectors, with each kind's selectable fields), continue tokens and version parameters; objects rendered as the
real server renders them, watch events of filtered watches, bookmarks and Status objects."""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Mapping
from typing import Any

import attrs

from aether.kube.resources import JsonObject, ResourceType
from aether.testing.kubestore import StoredChange
from aether.testing.kubewrites import Rejected
from aether.testing.selectors import FieldSelector, LabelSelector, SelectorError

__all__ = [
    "Query",
    "bookmark",
    "continue_token",
    "field_selector",
    "int_param",
    "label_selector",
    "parse_continue_token",
    "render",
    "status_object",
    "version_number",
    "watch_event",
]


_FIELDS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "pods": {
        "spec.nodeName": ("spec", "nodeName"),
        "spec.serviceAccountName": ("spec", "serviceAccountName"),
        "spec.restartPolicy": ("spec", "restartPolicy"),
        "spec.schedulerName": ("spec", "schedulerName"),
        "status.phase": ("status", "phase"),
        "status.podIP": ("status", "podIP"),
        "status.nominatedNodeName": ("status", "nominatedNodeName"),
    },
    "nodes": {"spec.unschedulable": ("spec", "unschedulable")},
    "secrets": {"type": ("type",)},
    "namespaces": {"status.phase": ("status", "phase")},
}
"""The field selectors each kind supports beyond metadata.name and metadata.namespace (the real server's set);
any other field is refused with 400 BadRequest, as the real server does."""

_COMMON_FIELDS = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")}


@attrs.frozen(kw_only=True)
class Query:
    """A list or watch request, parsed."""

    resource: ResourceType
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector

    def selects(self, obj: JsonObject | None) -> bool:
        """Return whether `obj` (None: no object) is in the request's namespace and matches its selectors."""
        if obj is None:
            return False
        metadata = obj.get("metadata") or {}
        if self.namespace is not None and metadata.get("namespace") != self.namespace:
            return False
        return self.labels.matches(metadata.get("labels") or {}) and self.fields.matches(
            _field_values(self.resource, obj)
        )


def watch_event(query: Query, change: StoredChange) -> tuple[str, JsonObject] | None:
    """Translate a change for a filtered watch: objects entering or leaving the selection become ADDED/DELETED."""
    now = change.type != "DELETED" and query.selects(change.object)
    before = query.selects(change.previous)
    if now and before:
        kind, obj = "MODIFIED", change.object
    elif now:
        kind, obj = "ADDED", change.object
    elif before and change.previous is not None:
        # Left the selection (or was deleted): its last selected state, at the revision it left.
        obj = copy.deepcopy(change.previous)
        obj["metadata"]["resourceVersion"] = str(change.revision)
        kind = "DELETED"
    else:
        return None
    return kind, render(obj, query.resource, in_list=False)


def render(obj: JsonObject, resource: ResourceType, *, in_list: bool) -> JsonObject:
    rendered = copy.deepcopy(obj)
    rendered["apiVersion"] = resource.api_version
    rendered["kind"] = resource.kind
    if in_list and not resource.group:
        # Built-in kinds' list items carry no kind or apiVersion (the list's say it); custom resources' do.
        del rendered["apiVersion"], rendered["kind"]
    return rendered


def bookmark(resource: ResourceType, revision: int) -> JsonObject:
    return {
        "kind": resource.kind,
        "apiVersion": resource.api_version,
        "metadata": {"resourceVersion": str(revision)},
    }


def status_object(code: int, reason: str, message: str, *, continue_token: str = "") -> JsonObject:
    metadata = {"continue": continue_token} if continue_token else {}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": metadata,
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def label_selector(text: str) -> LabelSelector:
    try:
        return LabelSelector.parse(text)
    except SelectorError as error:
        raise Rejected(400, "BadRequest", f"unable to parse requirement: {error}") from None


def field_selector(resource: ResourceType, text: str) -> FieldSelector:
    try:
        selector = FieldSelector.parse(text)
    except SelectorError as error:
        raise Rejected(400, "BadRequest", f"invalid field selector: {error}") from None
    supported = _COMMON_FIELDS.keys() | _FIELDS.get(resource.plural, {}).keys()
    for field in sorted(selector.fields - supported):
        raise Rejected(400, "BadRequest", f"field label not supported: {field}")
    return selector


def _field_values(resource: ResourceType, obj: JsonObject) -> dict[str, str]:
    values: dict[str, str] = {}
    for name, path in {**_COMMON_FIELDS, **_FIELDS.get(resource.plural, {})}.items():
        value: Any = obj
        for step in path:
            value = value.get(step) if isinstance(value, dict) else None
        values[name] = "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return values


def continue_token(revision: int, start: str) -> str:
    # The real token's shape: base64url (unpadded) of {"v", "rv", "start"}; clients treat it as opaque.
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": start + "\x00"}).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def parse_continue_token(token: str) -> tuple[int, str]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return int(decoded["rv"]), str(decoded["start"]).removesuffix("\x00")
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise Rejected(400, "BadRequest", f"continue key is not valid: {token!r}") from None


def version_number(version: str) -> int:
    if not version.isascii() or not version.isdigit():
        raise Rejected(400, "BadRequest", f"invalid resource version: {version!r}")
    return int(version)


def int_param(params: Mapping[str, str], name: str) -> int:
    raw = params.get(name, "")
    if not raw:
        return 0
    if not raw.isascii() or not raw.isdigit():
        raise Rejected(400, "BadRequest", f"{name}: must be a non-negative integer (got {raw!r})")
    return int(raw)
