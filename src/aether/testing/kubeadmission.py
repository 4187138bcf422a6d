"""Admission webhooks called by the test API server the way kube-apiserver calls them.

On a create or update of an object that a MutatingWebhookConfiguration's or ValidatingWebhookConfiguration's
webhook matches (its `rules`, `namespaceSelector` and `objectSelector`), the server POSTs an AdmissionReview v1 over
TLS to the webhook's `clientConfig.url`, or to its `clientConfig.service` through `service_addresses` (no cluster
DNS here: `namespace/name:port` → `host:port`), verifying the certificate with `caBundle` against the Service's DNS
name `<name>.<namespace>.svc`, as the real server does. The mutating webhooks run first, in the configurations'
name order, each JSONPatch applied to the object the next one sees; then every validating webhook. A denial is
answered as kube-apiserver formats it (`admission webhook "<name>" denied the request: <message>`, code >= 400), so
kubectl prints it; a webhook that cannot be called (refused, TLS, timeout, a bad response) is skipped under
`failurePolicy: Ignore` and refuses the request with 500 InternalError under `Fail` (the default).

Not modelled: `matchPolicy: Equivalent` across versions (a rule matches the request's own version), `matchConditions`
(CEL), reinvocation, and webhooks on subresources.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.parse
import uuid
from collections.abc import Mapping
from typing import Any

import attrs
import h11
import trio

from aether.kube.resources import NAMESPACES, JsonObject, ResourceType
from aether.testing.kubestore import ObjectStore, storage_of
from aether.testing.kubewrites import Rejected, merge_patch
from aether.testing.selectors import LabelSelector, Operator, Requirement

__all__ = ["ADMISSION_KINDS", "Admitted", "AdmittedWrite", "WebhookCaller", "admit_write"]

ADMISSION_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
DEFAULT_TIMEOUT = 10
"""Seconds, the API's default `timeoutSeconds`."""
_OPERATORS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}


class WebhookCallFailed(Exception):
    """The webhook could not be called, or answered something that is not a review response."""


@attrs.frozen(kw_only=True)
class Admitted:
    """The object as the webhooks left it, and the warnings they returned (sent as `Warning` headers)."""

    object: JsonObject
    warnings: tuple[str, ...] = ()
    reviews: int = 0
    """How many webhooks matched (and were called, or skipped under Ignore)."""


@attrs.frozen(kw_only=True)
class _Request:
    """What one write asks of the webhooks (the object itself changes as mutating webhooks patch it)."""

    resource: ResourceType
    operation: str
    namespace: str
    old: JsonObject | None


def _selector(value: Any) -> LabelSelector:
    """A metav1.LabelSelector (`matchLabels`, `matchExpressions`); absent selects everything."""
    value = value or {}
    requirements = [
        Requirement(key=key, operator=Operator.EQUALS, values=frozenset([label]))
        for key, label in sorted((value.get("matchLabels") or {}).items())
    ]
    for expression in value.get("matchExpressions") or []:
        requirements.append(
            Requirement(
                key=expression["key"],
                operator=_OPERATORS[expression["operator"]],
                values=frozenset(expression.get("values") or ()),
            )
        )
    return LabelSelector(requirements=tuple(requirements))


def _listed(patterns: Any, value: str) -> bool:
    return any(pattern in ("*", value) for pattern in patterns or ())


def _rule_matches(rule: Mapping[str, Any], resource: ResourceType, operation: str) -> bool:
    scope = rule.get("scope", "*")
    return (
        _listed(rule.get("apiGroups"), resource.group)
        and _listed(rule.get("apiVersions"), resource.version)
        and _listed(rule.get("operations"), operation)
        and (_listed(rule.get("resources"), resource.plural) or "*/*" in (rule.get("resources") or ()))
        and (scope == "*" or scope == ("Namespaced" if resource.namespaced else "Cluster"))
    )


def _labels(obj: JsonObject | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


class WebhookCaller:
    """Calls the webhooks the store's configurations declare (`admit`)."""

    def __init__(self, store: ObjectStore, *, service_addresses: Mapping[str, str]) -> None:
        self.store = store
        self.service_addresses = dict(service_addresses)
        """`namespace/name:port` → `host:port`: where a `clientConfig.service` is reached."""
        self.calls = 0
        self.failures = 0

    def _configurations(self, kind: str) -> list[JsonObject]:
        found = [resource for resource in self.store.kinds.values() if resource.kind == kind]
        if not found:
            return []
        storage = next(iter(found))
        objects = self.store.objects_at(storage_of(storage), revision=self.store.revision)
        return [objects[key] for key in sorted(objects)]

    def _namespace_labels(self, namespace: str) -> dict[str, str]:
        found = (
            self.store.get(NAMESPACES, name=namespace) if storage_of(NAMESPACES) in self.store.kinds else None
        )
        # The API server labels every namespace with its name (since 1.21).
        return {**_labels(found), "kubernetes.io/metadata.name": namespace}

    def _matches(self, hook: Mapping[str, Any], request: _Request, obj: JsonObject) -> bool:
        resource, operation, namespace, old = (
            request.resource,
            request.operation,
            request.namespace,
            request.old,
        )
        if not any(_rule_matches(rule, resource, operation) for rule in hook.get("rules") or ()):
            return False
        if resource.namespaced and not _selector(hook.get("namespaceSelector")).matches(
            self._namespace_labels(namespace)
        ):
            return False
        objects = _selector(hook.get("objectSelector"))
        return objects.matches(_labels(obj)) or (old is not None and objects.matches(_labels(old)))

    async def admit(
        self,
        resource: ResourceType,
        *,
        operation: str,
        namespace: str,
        obj: JsonObject,
        old: JsonObject | None,
    ) -> Admitted:
        """Run the matching mutating, then validating webhooks on `obj` (`old`: the stored object of an update).

        Raises:
            Rejected: A webhook denied the request, or failed under `failurePolicy: Fail`.
        """
        warnings: list[str] = []
        reviews = 0
        request = _Request(resource=resource, operation=operation, namespace=namespace, old=old)
        for kind in ADMISSION_KINDS:
            for configuration in self._configurations(kind):
                for hook in configuration.get("webhooks") or ():
                    if self._matches(hook, request, obj):
                        reviews += 1
                        mutating = kind == ADMISSION_KINDS[0]
                        obj = await self._review(hook, request, obj, mutating=mutating, warnings=warnings)
        return Admitted(object=obj, warnings=tuple(warnings), reviews=reviews)

    async def _review(
        self,
        hook: Mapping[str, Any],
        request: _Request,
        obj: JsonObject,
        *,
        mutating: bool,
        warnings: list[str],
    ) -> JsonObject:
        resource = request.resource
        name = str(hook.get("name", ""))
        kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
        plural = {"group": resource.group, "version": resource.version, "resource": resource.plural}
        uid = str(uuid.uuid4())
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": kind,
                "resource": plural,
                "requestKind": kind,
                "requestResource": plural,
                "name": (obj.get("metadata") or {}).get("name", ""),
                "namespace": request.namespace if resource.namespaced else "",
                "operation": request.operation,
                "userInfo": {"username": "aether-test"},
                "object": obj,
                "oldObject": request.old,
                "dryRun": False,
            },
        }
        self.calls += 1
        try:
            with trio.fail_after(float(hook.get("timeoutSeconds") or DEFAULT_TIMEOUT)):
                response = await self._call(hook, json.dumps(review).encode())
            answer = _response_of(response, uid)
        except (
            WebhookCallFailed,
            trio.TooSlowError,
            OSError,
            trio.BrokenResourceError,
            h11.ProtocolError,
        ) as error:
            self.failures += 1
            reason = "context deadline exceeded" if isinstance(error, trio.TooSlowError) else str(error)
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return obj
            raise Rejected(
                500,
                "InternalError",
                f'Internal error occurred: failed calling webhook "{name}": failed to call webhook: {reason}',
            ) from None
        warnings.extend(str(item) for item in answer.get("warnings") or ())
        if not answer.get("allowed"):
            raise _denial(name, answer.get("status") or {})
        if mutating and answer.get("patch"):
            return _patched(name, obj, answer)
        return obj

    def _target(self, hook: Mapping[str, Any]) -> tuple[str, int, str, str, str]:
        """`(host, port, server name to verify, path, the URL as the API server names it)` of a clientConfig."""
        client = hook.get("clientConfig") or {}
        if client.get("url"):
            url = urllib.parse.urlsplit(client["url"])
            hostname = url.hostname or ""
            return hostname, url.port or 443, hostname, url.path or "/", str(client["url"])
        service = client.get("service") or {}
        port = int(service.get("port") or 443)
        key = f"{service.get('namespace')}/{service.get('name')}:{port}"
        address = self.service_addresses.get(key)
        if address is None:
            raise WebhookCallFailed(f"service {key} has no address in this test server (service_addresses)")
        host, _, mapped = address.rpartition(":")
        server_name = f"{service.get('name')}.{service.get('namespace')}.svc"
        path = service.get("path") or "/"
        return host, int(mapped), server_name, path, f"https://{server_name}:{port}{path}"

    async def _call(self, hook: Mapping[str, Any], body: bytes) -> bytes:
        host, port, server_name, path, url = self._target(hook)
        bundle = (hook.get("clientConfig") or {}).get("caBundle")
        try:
            context = ssl.create_default_context(
                cadata=base64.b64decode(bundle).decode("ascii") if bundle else None
            )
        except (ValueError, ssl.SSLError) as error:
            raise WebhookCallFailed(f"caBundle: not PEM certificates ({error})") from None
        where = f'Post "{url}"'
        try:
            tcp = await trio.open_tcp_stream(host, port)
        except OSError as error:
            raise WebhookCallFailed(f"{where}: dial tcp {host}:{port}: {error}") from None
        stream = trio.SSLStream(tcp, context, server_hostname=server_name)
        async with stream:
            try:
                await stream.do_handshake()
                return await _exchange(stream, host=server_name, path=path, body=body)
            except (trio.BrokenResourceError, ssl.SSLError) as error:
                raise WebhookCallFailed(f"{where}: tls: {error.__cause__ or error}") from None


async def _exchange(stream: trio.abc.Stream, *, host: str, path: str, body: bytes) -> bytes:
    connection = h11.Connection(h11.CLIENT)
    headers = [
        ("Host", host),
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
        ("Content-Length", str(len(body))),
    ]
    request = h11.Request(method="POST", target=path, headers=headers)
    await stream.send_all(
        b"".join(
            connection.send(event) or b"" for event in (request, h11.Data(data=body), h11.EndOfMessage())
        )
    )
    status = 0
    received = bytearray()
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            connection.receive_data(bytes(data))
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            received += event.data
        elif isinstance(event, h11.EndOfMessage):
            break
        elif isinstance(event, h11.ConnectionClosed):
            raise WebhookCallFailed("the webhook closed the connection before answering")
    if status != 200:
        raise WebhookCallFailed(f"the server responded with HTTP {status}: {bytes(received[:200])!r}")
    return bytes(received)


def _response_of(body: bytes, uid: str) -> JsonObject:
    try:
        review = json.loads(body)
    except ValueError as error:
        raise WebhookCallFailed(f"the response is not JSON: {error}") from None
    if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
        raise WebhookCallFailed("expected response of kind AdmissionReview")
    if review.get("apiVersion") != "admission.k8s.io/v1":
        raise WebhookCallFailed(
            f"expected webhook response of admission.k8s.io/v1, got {review.get('apiVersion')}"
        )
    response = review.get("response")
    if not isinstance(response, dict) or response.get("uid") != uid:
        raise WebhookCallFailed(f"expected response.uid={uid!r}")
    return response


def _denial(name: str, status: Mapping[str, Any]) -> Rejected:
    """kube-apiserver's `webhookerrors.ToStatusErr`: the code at least 400, the message prefixed."""
    denied = f'admission webhook "{name}" denied the request'
    code = int(status.get("code") or 0)
    message = status.get("message") or status.get("reason") or ""
    text = f"{denied}: {message}" if message else f"{denied} without explanation"
    return Rejected(max(code, 400), str(status.get("reason") or ""), text)


def _patched(name: str, obj: JsonObject, answer: Mapping[str, Any]) -> JsonObject:
    import jsonpatch  # a test dependency: only a mutating webhook's answer needs it

    if answer.get("patchType") != "JSONPatch":
        raise Rejected(
            500, "InternalError", f'webhook "{name}": unsupported patch type {answer.get("patchType")!r}'
        )
    try:
        operations = json.loads(base64.b64decode(answer["patch"]))
        patched = jsonpatch.apply_patch(obj, operations)
    except (ValueError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
        raise Rejected(
            500, "InternalError", f'Internal error occurred: JSON patch of webhook "{name}": {error}'
        ) from None
    if not isinstance(patched, dict):
        raise Rejected(500, "InternalError", f'webhook "{name}": the patched object is not an object')
    return patched


@attrs.frozen(kw_only=True)
class AdmittedWrite:
    """A write request after admission: what `aether.testing.kubewrites.write` gets, and the warnings to send."""

    method: str
    body: bytes
    content_type: str
    warnings: tuple[str, ...] = ()


async def admit_write(
    caller: WebhookCaller,
    resource: ResourceType,
    *,
    method: str,
    namespace: str | None,
    name: str | None,
    body: bytes,
    content_type: str,
) -> AdmittedWrite:
    """Run the webhooks on a create (POST) or update (PUT, merge PATCH) of `resource`; other requests, and ones
    the write itself refuses (bad JSON, not found), and writes no webhook matches, pass unchanged for `write` to
    answer. A reviewed merge patch is applied first and becomes a PUT of the object the webhooks left (its
    resourceVersion kept: no conflict is invented).

    Raises:
        Rejected: A webhook denied the request, or failed under `failurePolicy: Fail`.
    """
    unchanged = AdmittedWrite(method=method, body=body, content_type=content_type)
    old: JsonObject | None = None
    try:
        sent = json.loads(body)
    except ValueError:
        return unchanged
    if not isinstance(sent, dict):
        return unchanged
    if method == "POST" and name is None:
        obj, operation = sent, "CREATE"
    elif method in ("PUT", "PATCH") and name is not None:
        old = caller.store.get(resource, name=name, namespace=namespace or "")
        if old is None or (method == "PATCH" and content_type != "application/merge-patch+json"):
            return unchanged
        obj, operation = (merge_patch(old, sent) if method == "PATCH" else sent), "UPDATE"
    else:
        return unchanged
    if resource.namespaced and namespace is not None:
        obj.setdefault("metadata", {}).setdefault("namespace", namespace)
    admitted = await caller.admit(resource, operation=operation, namespace=namespace or "", obj=obj, old=old)
    if not admitted.reviews:
        return unchanged
    return AdmittedWrite(
        method="PUT" if method == "PATCH" else method,
        body=json.dumps(admitted.object).encode(),
        content_type="application/json",
        warnings=admitted.warnings,
    )
