"""Writes through the test Kubernetes API: create, replace, merge-patch and delete, with the `status` subresource and
optimistic concurrency (a stale resourceVersion is 409 Conflict), as status writers and controllers use them."""

from __future__ import annotations

import copy
import json
from typing import Any

from aether.kube.resources import JsonObject, ResourceType
from aether.testing.kubestore import ObjectStore

__all__ = ["MERGE_PATCH", "Rejected", "merge_patch", "write"]

MERGE_PATCH = "application/merge-patch+json"
"""The one patch type served (RFC 7386); strategic merge and server-side apply answer 415."""


class Rejected(Exception):
    """A request the API refuses with a Status (`code`, `reason`, `message`)."""

    def __init__(self, code: int, reason: str, message: str, *, continue_token: str = "") -> None:
        super().__init__(code, reason, message)
        self.code = code
        self.reason = reason
        self.message = message
        self.continue_token = continue_token


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch: objects merge key by key, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def write(
    store: ObjectStore,
    resource: ResourceType,
    *,
    method: str,
    namespace: str | None,
    name: str | None,
    subresource: str,
    body: bytes,
    content_type: str,
) -> tuple[int, JsonObject]:
    """Serve one write request; return the HTTP code and the object after it.

    Raises:
        Rejected: The request breaks an API rule (the Status to answer with).
    """
    if method == "POST" and name is None and not subresource:
        return 201, _create(store, resource, namespace=namespace, obj=_decode(body))
    if name is None or method not in ("PUT", "PATCH", "DELETE") or (subresource and method == "DELETE"):
        raise Rejected(405, "MethodNotAllowed", f"{method} is not allowed here")
    if resource.namespaced and namespace is None:
        raise Rejected(404, "NotFound", "the server could not find the requested resource")
    current = store.get(resource, name=name, namespace=namespace or "")
    if current is None:
        raise Rejected(404, "NotFound", f'{resource.plural} "{name}" not found')
    if method == "DELETE":
        return 200, store.delete(resource, name=name, namespace=namespace or "")
    if method == "PATCH":
        if content_type != MERGE_PATCH:
            raise Rejected(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format: {content_type}",
            )
        wanted = merge_patch(current, _decode(body))
    else:
        wanted = _decode(body)
    _check_identity(resource, wanted, name=name, namespace=namespace)
    expected = str((wanted.get("metadata") or {}).get("resourceVersion") or "")
    if expected and expected != current["metadata"]["resourceVersion"]:
        raise Rejected(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been modified; '
            "apply your changes to the latest version and try again",
        )
    if subresource == "status":
        # The status subresource changes only status; the main resource never does.
        updated = {**current, "status": wanted.get("status")}
    else:
        updated = {**wanted, "status": current.get("status")}
        if updated["status"] is None:
            del updated["status"]
    return 200, store.update(resource, updated)


def _create(
    store: ObjectStore, resource: ResourceType, *, namespace: str | None, obj: JsonObject
) -> JsonObject:
    metadata = obj.setdefault("metadata", {})
    if resource.namespaced:
        if namespace is None:
            raise Rejected(405, "MethodNotAllowed", f"create {resource.plural} in a namespace")
        metadata.setdefault("namespace", namespace)
    if not metadata.get("name") and metadata.get("generateName"):
        metadata["name"] = f"{metadata['generateName']}{store.revision + 1:05x}"
    _check_identity(resource, obj, name=None, namespace=namespace)
    try:
        return store.create(resource, obj)
    except FileExistsError:
        raise Rejected(
            409, "AlreadyExists", f'{resource.plural} "{metadata["name"]}" already exists'
        ) from None


def _check_identity(
    resource: ResourceType, obj: JsonObject, *, name: str | None, namespace: str | None
) -> None:
    metadata = obj.get("metadata") or {}
    if not metadata.get("name"):
        raise Rejected(422, "Invalid", f"{resource.kind} is invalid: metadata.name: Required value")
    if name is not None and metadata["name"] != name:
        raise Rejected(
            400,
            "BadRequest",
            f"the name of the object ({metadata['name']}) does not match the name on the URL ({name})",
        )
    if resource.namespaced and metadata.get("namespace", namespace) != namespace:
        raise Rejected(
            400,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
        )


def _decode(body: bytes) -> JsonObject:
    try:
        value = json.loads(body)
    except ValueError as error:
        raise Rejected(400, "BadRequest", f"the body is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise Rejected(400, "BadRequest", "the body must be a JSON object")
    return value
