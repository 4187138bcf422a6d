"""AdmissionReview v1 (admission.k8s.io/v1) in and out: the webhooks' wire format, with no I/O.

`answer_review(path, body, ...)` reads one request body the API server POSTed to `path` and returns the HTTP status
and body to answer with. A body that is not an AdmissionReview v1 request is a 400 whose message names what is wrong
(the API server then applies the webhook's failurePolicy); a well-formed review of an object the webhook does not
expect (another kind, a malformed object) is answered 200 with a denial naming the field and the rule, as the API
server shows a denial to the client. Every webhook allows DELETE and CONNECT, which carry no object to check.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

import attrs

from aether.controller.config_admission import config_verdict
from aether.controller.pod_mutation import PodMutation, pod_verdict
from aether.controller.route_admission import (
    ROUTE_KINDS_VALIDATED,
    GatewayOwner,
    every_gateway,
    route_verdict,
)
from aether.controller.verdict import ALLOWED, Verdict

__all__ = [
    "ADMISSION_API_VERSION",
    "WEBHOOK_PATHS",
    "ReviewInvalid",
    "ReviewRequest",
    "answer_review",
    "review_response",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"
REVIEWED_OPERATIONS = ("CREATE", "UPDATE")

WEBHOOK_PATHS: Mapping[str, tuple[str, ...]] = {
    "/validate-route": ROUTE_KINDS_VALIDATED,
    "/validate-meshconfig": ("MeshConfig",),
    "/validate-edgeconfig": ("EdgeConfig",),
    "/mutate-pod": ("Pod",),
}
"""Each webhook's path and the kinds it reviews (manifests/base/webhooks.yaml names the same paths)."""

_MAX_MESSAGE = 4096
"""A denial's message is cut to this many characters (the API server caps what it shows too)."""


class ReviewInvalid(ValueError):
    """A body that is not an AdmissionReview v1 request: `field` is what is wrong, `rule` what it must be."""

    def __init__(self, field: str, rule: str, *, value: object = None) -> None:
        super().__init__(field, rule, value)
        self.field = field
        self.rule = rule
        self.value = value

    def __str__(self) -> str:
        shown = "" if self.value is None else f" (got {_short(self.value)})"
        return f"not an AdmissionReview {ADMISSION_API_VERSION} request: {self.field}: {self.rule}{shown}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@attrs.frozen(kw_only=True)
class ReviewRequest:
    """The parts of an AdmissionReview request the webhooks read."""

    uid: str
    kind: str
    group: str
    namespace: str
    operation: str
    object: Mapping[str, Any] | None

    @classmethod
    def from_json(cls, body: bytes) -> ReviewRequest:
        """Parse an AdmissionReview v1 request body.

        Raises:
            ReviewInvalid: The body is not JSON, not an AdmissionReview, not v1, or lacks a request's fields.
        """
        try:
            review = json.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            raise ReviewInvalid("body", f"must be JSON ({error})") from None
        if not isinstance(review, dict):
            raise ReviewInvalid("body", "must be a JSON object", value=review)
        if review.get("kind") != "AdmissionReview":
            raise ReviewInvalid("kind", "must be 'AdmissionReview'", value=review.get("kind"))
        if review.get("apiVersion") != ADMISSION_API_VERSION:
            raise ReviewInvalid(
                "apiVersion", f"must be {ADMISSION_API_VERSION!r}", value=review.get("apiVersion")
            )
        request = review.get("request")
        if not isinstance(request, dict):
            raise ReviewInvalid("request", "must be an object", value=request)
        uid = request.get("uid")
        if not isinstance(uid, str) or not uid:
            raise ReviewInvalid("request.uid", "must be a non-empty string", value=uid)
        kind = request.get("kind")
        if not isinstance(kind, dict) or not isinstance(kind.get("kind"), str):
            raise ReviewInvalid("request.kind", "must be an object with a string 'kind'", value=kind)
        operation = request.get("operation")
        if operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
            raise ReviewInvalid(
                "request.operation", "must be CREATE, UPDATE, DELETE or CONNECT", value=operation
            )
        obj = request.get("object")
        if obj is not None and not isinstance(obj, dict):
            raise ReviewInvalid("request.object", "must be an object or null", value=obj)
        namespace = request.get("namespace") or ""
        if not isinstance(namespace, str):
            raise ReviewInvalid("request.namespace", "must be a string", value=namespace)
        return cls(
            uid=uid,
            kind=kind["kind"],
            group=str(kind.get("group") or ""),
            namespace=namespace,
            operation=operation,
            object=obj,
        )


def review_response(uid: str, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview v1 response carrying `verdict` (keys sorted when encoded: byte-for-byte stable)."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        message = verdict.message[:_MAX_MESSAGE]
        response["status"] = {"code": HTTPStatus.FORBIDDEN.value, "message": message, "status": "Failure"}
    if verdict.patch:
        encoded = json.dumps(list(verdict.patch), separators=(",", ":"), sort_keys=True).encode()
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(encoded).decode("ascii")
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


def _verdict(path: str, request: ReviewRequest, mutation: PodMutation, owns_gateway: GatewayOwner) -> Verdict:
    expected = WEBHOOK_PATHS[path]
    if request.kind not in expected:
        return Verdict(
            allowed=False,
            message=f"request.kind: {path} reviews {', '.join(expected)} only (got {request.kind!r})",
        )
    if request.operation not in REVIEWED_OPERATIONS:
        return ALLOWED
    if request.object is None:
        return Verdict(allowed=False, message=f"request.object: required for {request.operation} (got null)")
    reviewers: Mapping[str, Callable[[], Verdict]] = {
        "/validate-route": lambda: route_verdict(
            request.kind, request.object or {}, owns_gateway=owns_gateway
        ),
        "/validate-meshconfig": lambda: config_verdict(request.kind, request.object or {}),
        "/validate-edgeconfig": lambda: config_verdict(request.kind, request.object or {}),
        "/mutate-pod": lambda: pod_verdict(
            request.object or {}, namespace=request.namespace, mutation=mutation
        ),
    }
    return reviewers[path]()


def answer_review(
    path: str, body: bytes, *, mutation: PodMutation, owns_gateway: GatewayOwner = every_gateway
) -> tuple[HTTPStatus, dict[str, Any]]:
    """Answer the review POSTed to `path`: `(200, AdmissionReview)`, or `(400 or 404, {"error": ...})`; routes are
    judged only when a parent is ours (`owns_gateway` says which Gateways are)."""
    if path not in WEBHOOK_PATHS:
        return HTTPStatus.NOT_FOUND, {
            "error": f"no webhook at {path!r}; try one of {sorted(WEBHOOK_PATHS)!r}"
        }
    try:
        request = ReviewRequest.from_json(body)
    except ReviewInvalid as error:
        return HTTPStatus.BAD_REQUEST, {"error": str(error)}
    return HTTPStatus.OK, review_response(request.uid, _verdict(path, request, mutation, owns_gateway))
