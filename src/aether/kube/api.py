"""A small native Kubernetes API client on trio and h11: get, paged lists, watch streams, and writes.

Why not the official `kubernetes` package: it is synchronous (urllib3), so each watch would pin a thread that
trio cannot cancel; a watch is one long HTTP/1.1 response of JSON lines, which h11 (sans-IO, from the h2
family the xDS server already uses) parses in a few dozen lines, with cancellation, deadlines and errors
under trio's structured concurrency. One connection per request: lists are rare and watches are long.
"""

from __future__ import annotations

import json
import logging
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import attrs
import h11
import trio

from aether.http1 import HttpConnection, HttpProtocolError
from aether.kube.config import ClusterConfig
from aether.kube.errors import (
    ApiConnectionError,
    ApiProtocolError,
    KubeError,
    ResourceExpiredError,
    status_error,
)
from aether.kube.resources import JsonObject, ResourceType, object_key

__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_PAGE_SIZE",
    "KubeClient",
    "KubeClientStatistics",
    "ObjectList",
    "WatchEvent",
]

LOG = logging.getLogger("aether.kube.api")

CONNECT_TIMEOUT = 5.0
"""Seconds to connect (and finish TLS): an API server answers in milliseconds, and a blackholed address must not
hold a source for the kernel's two-minute SYN timeout."""

DEFAULT_PAGE_SIZE = 500
"""Objects per list page: client-go's reflector default, which keeps each response well under a megabyte."""

_MAX_LINE = 16 * 1024 * 1024
"""The longest watch event accepted: the API server caps an object at about 1.5 MiB (etcd's request limit), so a
longer line is a broken stream, not an object."""


@attrs.frozen(kw_only=True)
class ObjectList:
    """A list response: the objects (each with `kind` and `apiVersion` filled in) and the list's version."""

    items: tuple[JsonObject, ...]
    resource_version: str
    """The collection's resourceVersion when listed: watch from it to see every later change."""
    continue_token: str = ""
    """Set when more pages follow."""


@attrs.frozen(kw_only=True)
class WatchEvent:
    """One event of a watch stream: ADDED, MODIFIED, DELETED or BOOKMARK (ERROR events raise instead)."""

    type: str
    object: JsonObject

    @property
    def resource_version(self) -> str:
        """The event's resourceVersion: where a watch resumes after it."""
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


@attrs.frozen(kw_only=True)
class KubeClientStatistics:
    """Counters of a `KubeClient`."""

    requests: int
    """HTTP requests sent (list pages, gets, watches)."""
    watch_events: int
    """Watch events received (bookmarks included)."""


class KubeClient:
    """Talks to one API server as `config` says.

    Error handling: every failure is a `KubeError` (see `aether.kube.errors`): a Status from the server,
    a broken or refused connection, or a response that is not the API's JSON.
    """

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self._requests = 0
        self._watch_events = 0

    def statistics(self) -> KubeClientStatistics:
        """Return the client's counters."""
        return KubeClientStatistics(requests=self._requests, watch_events=self._watch_events)

    async def get(self, resource: ResourceType, *, name: str, namespace: str | None = None) -> JsonObject:
        """Return one object.

        Raises:
            ApiStatusError: 404 NotFound if it does not exist, or any other refusal.
        """
        async with self._exchange(self._object_path(resource, name, namespace, ""), {}) as response:
            return _with_kind(await response.json(), resource)

    async def create(
        self, resource: ResourceType, obj: JsonObject, *, namespace: str | None = None
    ) -> JsonObject:
        """Create `obj` (in `namespace`, for namespaced kinds); return it as stored.

        Raises:
            ApiStatusError: 409 AlreadyExists, 422 Invalid, or any other refusal.
        """
        return await self._write("POST", resource.collection_path(namespace=namespace), resource, obj)

    async def replace(self, resource: ResourceType, obj: JsonObject, *, subresource: str = "") -> JsonObject:
        """Replace `obj` (PUT; its `metadata.resourceVersion`, if set, must be current); return it as stored.

        Args:
            resource: The object's kind.
            obj: The whole object (name and namespace from its metadata).
            subresource: `status` to replace only the status (what a controller writes).

        Raises:
            ApiStatusError: 409 Conflict when the object changed since it was read, 404 NotFound, or another refusal.
        """
        metadata = obj.get("metadata") or {}
        path = self._object_path(
            resource, str(metadata.get("name") or ""), metadata.get("namespace"), subresource
        )
        return await self._write("PUT", path, resource, obj)

    async def merge_patch(
        self,
        resource: ResourceType,
        *,
        name: str,
        patch: JsonObject,
        namespace: str | None = None,
        subresource: str = "",
    ) -> JsonObject:
        """Apply a JSON merge patch (RFC 7386) to one object (or its `status`); return it as stored.

        Raises:
            ApiStatusError: 404 NotFound, 409 Conflict (a stale resourceVersion in the patch), or another refusal.
        """
        path = self._object_path(resource, name, namespace, subresource)
        return await self._write("PATCH", path, resource, patch, content_type="application/merge-patch+json")

    async def delete(self, resource: ResourceType, *, name: str, namespace: str | None = None) -> None:
        """Delete one object.

        Raises:
            ApiStatusError: 404 NotFound, or another refusal.
        """
        async with self._exchange(
            self._object_path(resource, name, namespace, ""), {}, method="DELETE"
        ) as response:
            await response.body()

    @staticmethod
    def _object_path(resource: ResourceType, name: str, namespace: object, subresource: str) -> str:
        path = f"{resource.collection_path(namespace=str(namespace) if namespace else None)}/{urllib.parse.quote(name, safe='')}"
        return f"{path}/{subresource}" if subresource else path

    async def _write(
        self,
        method: str,
        path: str,
        resource: ResourceType,
        body: JsonObject,
        *,
        content_type: str = "application/json",
    ) -> JsonObject:
        async with self._exchange(path, {}, method=method, body=body, content_type=content_type) as response:
            return _with_kind(await response.json(), resource)

    async def list_page(
        self,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
    ) -> ObjectList:
        """List one page of a collection (everything when `limit` is 0).

        Raises:
            ResourceExpiredError: The continue token (or an exact resourceVersion) is compacted away.
            KubeError: Any other failure.
        """
        params = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": str(limit) if limit else "",
            "continue": continue_token,
            "resourceVersion": resource_version,
        }
        async with self._exchange(resource.collection_path(namespace=namespace), params) as response:
            body = await response.json()
        metadata = body.get("metadata") or {}
        items = body.get("items")
        if not isinstance(items, list):
            raise ApiProtocolError(
                response.path, problem=f"a list has an 'items' array (got {type(items).__name__})"
            )
        return ObjectList(
            items=tuple(_with_kind(item, resource) for item in items),
            resource_version=str(metadata.get("resourceVersion") or ""),
            continue_token=str(metadata.get("continue") or ""),
        )

    async def list_all(
        self,
        resource: ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> ObjectList:
        """List a whole collection page by page, as one consistent snapshot at one resourceVersion.

        If the history behind a continue token is compacted mid-way (410 Gone), the list starts over: a
        consistent list is what a watch can safely resume from.

        Returns:
            Every object, sorted by `<namespace>/<name>`, at the first page's resourceVersion.
        """
        while True:
            items: list[JsonObject] = []
            token = ""
            version = ""
            try:
                while True:
                    page = await self.list_page(
                        resource,
                        namespace=namespace,
                        label_selector=label_selector,
                        field_selector=field_selector,
                        limit=page_size,
                        continue_token=token,
                    )
                    items.extend(page.items)
                    version = version or page.resource_version
                    token = page.continue_token
                    if not token:
                        break
            except ResourceExpiredError:
                if not token:
                    raise
                LOG.info("list of %s: continue token expired; listing again from the start", resource)
                continue
            return ObjectList(items=tuple(sorted(items, key=object_key)), resource_version=version)

    @asynccontextmanager
    async def open_watch(
        self,
        resource: ResourceType,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        timeout_seconds: int = 0,
        allow_bookmarks: bool = True,
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        """Open a watch from `resource_version`; iterate the block's value for its events, until the server ends it.

        Args:
            resource: The collection.
            resource_version: Where to start (every change after it). Empty or `0` asks for the current state
                as synthetic ADDED events first.
            namespace: One namespace, or all (None).
            label_selector: Only objects whose labels match.
            field_selector: Only objects whose fields match.
            timeout_seconds: Ask the server to end the stream after this long (0: the server's choice).
            allow_bookmarks: Ask for BOOKMARK events, which advance the version without changes.

        Raises:
            ResourceExpiredError: `resource_version` is compacted away (a 410 response, or an ERROR event).
            KubeError: Any other failure, at the start or while iterating.
        """
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "timeoutSeconds": str(timeout_seconds) if timeout_seconds else "",
            "allowWatchBookmarks": "true" if allow_bookmarks else "",
        }
        async with self._exchange(resource.collection_path(namespace=namespace), params) as response:
            yield self._events(response, resource)

    async def _events(self, response: _Response, resource: ResourceType) -> AsyncIterator[WatchEvent]:
        async for line in response.lines():
            try:
                event = json.loads(line)
            except ValueError as error:
                raise ApiProtocolError(response.path, problem=f"watch event is not JSON: {error}") from error
            if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
                raise ApiProtocolError(
                    response.path, problem=f"watch event without an object: {line[:200]!r}"
                )
            self._watch_events += 1
            kind = event.get("type")
            if kind == "ERROR":
                raise status_error(response.path, code=500, status=event["object"])
            if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
                raise ApiProtocolError(response.path, problem=f"unknown watch event type {kind!r}")
            yield WatchEvent(type=kind, object=_with_kind(event["object"], resource))

    @asynccontextmanager
    async def _exchange(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        method: str = "GET",
        body: JsonObject | None = None,
        content_type: str = "application/json",
    ) -> AsyncIterator[_Response]:
        """Send a request; yield the response once its head says 2xx (other codes raise with the server's Status)."""
        query = urllib.parse.urlencode({key: value for key, value in params.items() if value})
        target = f"{path}?{query}" if query else path
        host, port = self.config.host_and_port
        headers = [
            ("Host", f"{host}:{port}"),
            ("Accept", "application/json"),
            ("User-Agent", "aether"),
        ]
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        if body is not None:
            headers += [("Content-Type", content_type), ("Content-Length", str(len(payload)))]
        bearer = await self.config.bearer()
        if bearer is not None:
            headers.append(("Authorization", f"Bearer {bearer}"))
        self._requests += 1
        with _map_errors(self.config.server):
            stream = await self._connect(host, port)
        try:
            with _map_errors(self.config.server):
                connection = HttpConnection(stream, client=True, peer=self.config.server)
                await connection.send_request(method, target, headers=headers, body=payload)
                response = _Response(connection, path=path, server=self.config.server)
                code = await response.read_head()
            if not 200 <= code < 300:
                refusal = await response.body()
                try:
                    status: Any = json.loads(refusal)
                except ValueError:
                    status = refusal.decode("utf-8", "replace")
                raise status_error(path, code=code, status=status)
            # Not inside _map_errors: the caller's own failures pass through untranslated.
            yield response
        finally:
            await trio.aclose_forcefully(stream)

    async def _connect(self, host: str, port: int) -> trio.abc.Stream:
        with trio.fail_after(CONNECT_TIMEOUT):
            socket_stream = await trio.open_tcp_stream(host, port)
            if not self.config.tls:
                return socket_stream
            assert self.config.ssl_context is not None, (
                "an https ClusterConfig always has a TLS context (a bug)"
            )
            tls = trio.SSLStream(socket_stream, self.config.ssl_context, server_hostname=host)
            try:
                await tls.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(socket_stream)
                raise
            return tls


class _Response:
    """The response side of one exchange: its head, then its body whole or line by line."""

    def __init__(self, connection: HttpConnection, *, path: str, server: str) -> None:
        self._connection = connection
        self.path = path
        self._server = server

    async def _next(self) -> Any:
        return await self._connection.next_event()

    async def read_head(self) -> int:
        event = await self._next()
        while isinstance(event, h11.InformationalResponse):
            event = await self._next()
        if not isinstance(event, h11.Response):
            raise ApiProtocolError(
                self.path, problem=f"expected a response head (got {type(event).__name__})"
            )
        return int(event.status_code)

    async def body(self) -> bytes:
        chunks = bytearray()
        with _map_errors(self._server):
            while isinstance(event := await self._next(), h11.Data):
                chunks += event.data
        if not isinstance(event, h11.EndOfMessage):
            raise ApiConnectionError(self._server, reason=f"response to {self.path!r} ended early")
        return bytes(chunks)

    async def json(self) -> JsonObject:
        body = await self.body()
        try:
            value = json.loads(body)
        except ValueError as error:
            raise ApiProtocolError(self.path, problem=f"response is not JSON: {error}") from error
        if not isinstance(value, dict):
            raise ApiProtocolError(
                self.path, problem=f"response is not a JSON object (got {type(value).__name__})"
            )
        return value

    async def lines(self) -> AsyncIterator[bytes]:
        """Yield each newline-terminated line of the body; return when the server ends the body cleanly."""
        pending = bytearray()
        while True:
            with _map_errors(self._server):
                event = await self._next()
            if isinstance(event, h11.EndOfMessage):
                return
            if not isinstance(event, h11.Data):
                raise ApiConnectionError(self._server, reason=f"watch {self.path!r} ended early")
            pending += event.data
            *complete, rest = bytes(pending).split(b"\n")
            pending = bytearray(rest)
            if len(pending) > _MAX_LINE:
                raise ApiProtocolError(self.path, problem=f"watch event longer than {_MAX_LINE} bytes")
            for line in complete:
                if line.strip():
                    yield line


def _with_kind(obj: JsonObject, resource: ResourceType) -> JsonObject:
    """Fill in `kind` and `apiVersion`: built-in kinds' list items come without them."""
    if not obj.get("kind"):
        obj["kind"] = resource.kind
    if not obj.get("apiVersion"):
        obj["apiVersion"] = resource.api_version
    return obj


@contextmanager
def _map_errors(server: str) -> Iterator[None]:
    """Translate transport failures into `ApiConnectionError` at this one edge (STYLE E8)."""
    try:
        yield
    except KubeError:
        raise
    except trio.TooSlowError as error:
        raise ApiConnectionError(server, reason=f"no connection within {CONNECT_TIMEOUT} s") from error
    except (OSError, ssl.SSLError, trio.BrokenResourceError, trio.ClosedResourceError) as error:
        # trio wraps TLS and socket failures in BrokenResourceError with an empty message: the cause says what.
        detail = str(error) or str(error.__cause__ or "") or type(error).__name__
        raise ApiConnectionError(server, reason=f"connection failed: {detail}") from error
    except HttpProtocolError as error:
        raise ApiConnectionError(server, reason=f"connection broke: {error.problem}") from error
    except h11.ProtocolError as error:
        raise ApiConnectionError(server, reason=f"connection broke: {error}") from error
