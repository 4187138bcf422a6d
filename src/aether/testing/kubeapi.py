"""A minimal Kubernetes API server for tests: real HTTP/1.1 list and watch over `aether.testing.kubestore`.

No kube-apiserver can run here, so the Kubernetes sources are tested against this one. It speaks the protocol
the real server documents for what the mesh reads: list with `resourceVersion`, selectors and `limit`/`continue`
paging; watch streams of JSON lines (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR) from a resourceVersion;
410 Gone (reason Expired) once that version is compacted; bearer tokens; and test controls to cut watches,
force bookmarks, compact history and restart. Objects are written by tests through the store, or over HTTP
(`aether.testing.kubewrites`: create, replace, merge-patch, delete, the status subresource). It answers the
legacy discovery documents kubectl reads (`aether.testing.kubediscovery`), calls the admission webhooks the stored
webhook configurations declare (`aether.testing.kubeadmission`), and runs on its own for kubectl:

    python -m aether.testing.kubeapi --listen 127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import bisect
import json
import ssl
import sys
import urllib.parse
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import h11
import trio

from aether.http1 import HttpConnection, HttpProtocolError, HttpRequest
from aether.kube.resources import BUILTIN_RESOURCES, JsonObject, ResourceType
from aether.testing.kubeadmission import AdmittedWrite, WebhookCaller, admit_write
from aether.testing.kubediscovery import api_versions, group_list, resource_list, served_resources
from aether.testing.kubequery import (
    Query,
    bookmark,
    continue_token,
    field_selector,
    int_param,
    label_selector,
    parse_continue_token,
    render,
    status_object,
    version_number,
    watch_event,
)
from aether.testing.kubestore import (
    DEFAULT_HISTORY_LIMIT,
    ObjectStore,
    TooOldError,
    WatchSubscription,
    storage_of,
)
from aether.testing.kubewrites import Rejected, write

__all__ = ["DEFAULT_WATCH_TIMEOUT", "KubeApi", "KubeApiStatistics", "main", "open_kube_api"]

DEFAULT_WATCH_TIMEOUT = 1800.0
"""Seconds a watch without `timeoutSeconds` lasts: the real server picks 30 to 60 minutes at random."""


@attrs.frozen(kw_only=True)
class KubeApiStatistics:
    """Counters of a `KubeApi`."""

    requests: int
    """HTTP requests answered (any path, any outcome)."""
    lists: int
    """List requests answered with 200."""
    watches: int
    """Watch streams started (with 200)."""
    open_watches: int
    """Watch streams open now."""
    expired: int
    """Requests answered with 410 Gone (a list's continue token, or a watch's ERROR event)."""


class KubeApi:
    """A running test API server: its URL, its `store`, and the controls tests use.

    Create it with `open_kube_api`. Mutate objects through `store` (`create`, `update`, `put`, `delete`);
    every open watch sees each write.
    """

    def __init__(
        self,
        *,
        store: ObjectStore,
        host: str,
        token: str | None,
        bookmark_interval: float | None,
        ssl_context: ssl.SSLContext | None,
        webhook_addresses: Mapping[str, str],
    ) -> None:
        self.store = store
        self.webhooks = WebhookCaller(store, service_addresses=webhook_addresses)
        """Calls the admission webhooks of the stored webhook configurations on every create and update."""
        self.host = host
        self.port = 0
        self.token = token
        """The bearer token every request must present; None accepts any request."""
        self.bookmark_interval = bookmark_interval
        """Seconds between the bookmarks of a watch that allows them; None sends them only on request."""
        self._ssl_context = ssl_context
        self._by_path: dict[tuple[str, str, str], ResourceType] = {
            (resource.group, resource.version, resource.plural): resource
            for resource in store_resources(store)
        }
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()
        self._counts = {"requests": 0, "lists": 0, "watches": 0, "expired": 0}
        self._failures: list[int] = []

    @property
    def url(self) -> str:
        """The server's base URL, as a kubeconfig's `server` field would hold it."""
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def statistics(self) -> KubeApiStatistics:
        """Return the server's counters."""
        return KubeApiStatistics(open_watches=self.store.open_watches, **self._counts)

    async def wait_watches(self, *, open_count: int = 1, started: int = 0) -> None:
        """Block until at least `open_count` watches are open and `started` were ever opened (use `fail_after`)."""
        await self.store.wait_watches(open_count=open_count, started=started)

    def drop_watches(self) -> int:
        """Abort every open watch connection mid-stream; return how many there were."""
        return self.store.drop_watches()

    def fail_next(self, count: int, *, code: int = 429) -> None:
        """Refuse the next `count` API requests: 429 TooManyRequests (with Retry-After, as API priority and
        fairness throttles) or 500 InternalError, as an overloaded or failing server would."""
        self._failures.extend([code] * count)

    def send_bookmarks(self) -> None:
        """Make every open watch that allows bookmarks send one now."""
        self.store.request_bookmarks()

    def compact(self, *, revision: int | None = None) -> None:
        """Forget history up to `revision` (all of it by default): older watches and continue tokens get 410."""
        self.store.compact(revision=revision)

    async def stop(self) -> None:
        """Close the listener and every connection, as a crashed API server would; the store is kept."""
        if self._scope is not None:
            self._scope.cancel()
            await self._stopped.wait()
            self._scope = None

    async def restart(self, *, nursery: trio.Nursery, keep_history: bool = False) -> None:
        """Stop, then serve again on the same port (in `nursery`, which must outlive the server).

        Args:
            nursery: Where the new listener runs.
            keep_history: Keep the watch history; by default it is compacted, as a restarted API server's
                watch cache starts at the current revision and answers older watches with 410 Gone.
        """
        await self.stop()
        if not keep_history:
            self.store.compact()
        await nursery.start(self._serve)

    async def _serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._stopped = trio.Event()
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                listeners = await trio.open_tcp_listeners(self.port, host=self.host)
                self.port = listeners[0].socket.getsockname()[1]
                # Listening already: connections made from here on wait in the backlog until served.
                task_status.started()
                await trio.serve_listeners(self._connection, listeners)
        finally:
            self._stopped.set()

    async def _connection(self, stream: trio.SocketStream) -> None:
        transport: trio.abc.Stream = stream
        try:
            if self._ssl_context is not None:
                transport = trio.SSLStream(stream, self._ssl_context, server_side=True)
                await transport.do_handshake()
            connection = HttpConnection(transport, client=False, peer="client")
            while (request := await connection.receive_request()) is not None:
                self._counts["requests"] += 1
                if not await self._respond(connection, request):
                    return
                if not connection.next_cycle():
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, HttpProtocolError, h11.ProtocolError):
            # The client went away or spoke broken HTTP: end this connection only.
            return
        finally:
            await trio.aclose_forcefully(transport)

    async def _respond(self, connection: HttpConnection, request: HttpRequest) -> bool:
        """Answer one request; return False when the connection must be cut without finishing the response."""
        target = urllib.parse.urlsplit(request.target)
        params = {key: values[-1] for key, values in urllib.parse.parse_qs(target.query).items()}
        try:
            self._authorize(request.headers)
            if self._failures and target.path.startswith(("/api/", "/apis/")):
                code = self._failures.pop(0)
                if code == 429:
                    raise Rejected(429, "TooManyRequests", "too many requests, please try again later")
                raise Rejected(code, "InternalError", "an error on the server prevented the request")
            if target.path in ("/healthz", "/readyz", "/livez"):
                await _send(connection, 200, b"ok", content_type="text/plain")
                return True
            if target.path == "/version":
                version = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-aether-test"}
                await _send(connection, 200, _encode(version))
                return True
            discovery = self._discovery(target.path)
            if discovery is not None:
                await _send(connection, 200, _encode(discovery))
                return True
            resource, namespace, name, subresource = self._route(target.path)
            method = request.method
            if method != "GET":
                content_type = request.headers.get("content-type", "").partition(";")[0].strip()
                admitted = AdmittedWrite(method=method, body=request.body, content_type=content_type)
                if not subresource:
                    admitted = await admit_write(
                        self.webhooks,
                        resource,
                        method=method,
                        namespace=namespace,
                        name=name,
                        body=request.body,
                        content_type=content_type,
                    )
                code, written = write(
                    self.store,
                    resource,
                    method=admitted.method,
                    namespace=namespace,
                    name=name,
                    subresource=subresource,
                    body=admitted.body,
                    content_type=admitted.content_type,
                )
                warnings = [("Warning", f'299 - "{text}"') for text in admitted.warnings]
                await _send(
                    connection, code, _encode(render(written, resource, in_list=False)), headers=warnings
                )
                return True
            query = Query(
                resource=resource,
                namespace=namespace,
                labels=label_selector(params.get("labelSelector", "")),
                fields=field_selector(resource, params.get("fieldSelector", "")),
            )
            if name is not None:
                await _send(connection, 200, _encode(self._get(query, name)))
                return True
            if params.get("watch", "") in ("1", "true"):
                return await self._watch(connection, query, params)
            listed = self._list(query, params)
        except Rejected as rejected:
            self._counts["expired"] += rejected.code == 410
            status = status_object(
                rejected.code, rejected.reason, rejected.message, continue_token=rejected.continue_token
            )
            retry = [("Retry-After", "1")] if rejected.code == 429 else []
            await _send(connection, rejected.code, _encode(status), headers=retry)
            return True
        self._counts["lists"] += 1
        await _send(connection, 200, _encode(listed))
        return True

    def _authorize(self, headers: Mapping[str, str]) -> None:
        if self.token is None:
            return
        if headers.get("authorization", "") != f"Bearer {self.token}":
            raise Rejected(401, "Unauthorized", "Unauthorized")

    def _discovery(self, path: str) -> JsonObject | None:
        """The discovery document at `path` (`/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`), else None."""
        parts = [part for part in path.split("/") if part]
        served = self._by_path.values()
        if parts == ["api"]:
            return api_versions(address=f"{self.host}:{self.port}")
        if parts == ["apis"]:
            return group_list(served)
        if len(parts) == 2 and parts[0] == "api":
            found = resource_list(served, group="", version=parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            found = resource_list(served, group=parts[1], version=parts[2])
        else:
            return None
        if found is None:
            raise Rejected(404, "NotFound", "the server could not find the requested resource")
        return found

    def _route(self, path: str) -> tuple[ResourceType, str | None, str | None, str]:
        """Return the resource, namespace, object name and subresource (`status` or empty) a path names."""
        parts = [part for part in path.split("/") if part]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise Rejected(404, "NotFound", "the server could not find the requested resource")
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        resource = self._by_path.get((group, version, rest[0])) if rest else None
        subresource = rest[2] if len(rest) == 3 else ""
        if (
            resource is None
            or len(rest) > 3
            or subresource not in ("", "status")
            or (namespace is not None and not resource.namespaced)
        ):
            raise Rejected(404, "NotFound", "the server could not find the requested resource")
        return resource, namespace, rest[1] if len(rest) >= 2 else None, subresource

    def _get(self, query: Query, name: str) -> JsonObject:
        key = f"{query.namespace}/{name}" if query.resource.namespaced else name
        found = self.store.objects_at(storage_of(query.resource), revision=self.store.revision).get(key)
        if found is None or (not query.resource.namespaced and query.namespace is not None):
            raise Rejected(404, "NotFound", f'{query.resource.plural} "{name}" not found')
        return render(found, query.resource, in_list=False)

    def _list(self, query: Query, params: Mapping[str, str]) -> JsonObject:
        revision, start = self._list_revision(params)
        try:
            objects = self.store.objects_at(storage_of(query.resource), revision=revision)
        except TooOldError as error:
            # Expired paging: a token that continues from now (inconsistent), as the real server offers.
            fresh = continue_token(self.store.revision, start) if start else ""
            raise Rejected(
                410, "Expired", f"{error}: list again without 'continue'", continue_token=fresh
            ) from None
        keys = sorted(objects)
        after = keys[bisect.bisect_right(keys, start) :]
        limit = int_param(params, "limit")
        page: list[tuple[str, JsonObject]] = []
        more = False
        # Stop at the first match past a full page: a page costs what it returns, not the whole collection.
        for key in after:
            if query.selects(objects[key]):
                if 0 < limit == len(page):
                    more = True
                    break
                page.append((key, objects[key]))
        metadata: JsonObject = {"resourceVersion": str(revision)}
        if more:
            metadata["continue"] = continue_token(revision, page[-1][0])
            if not query.labels.requirements and not query.fields.requirements:
                metadata["remainingItemCount"] = len(after) - len(page)
        return {
            "kind": f"{query.resource.kind}List",
            "apiVersion": query.resource.api_version,
            "metadata": metadata,
            "items": [render(obj, query.resource, in_list=True) for _, obj in page],
        }

    def _list_revision(self, params: Mapping[str, str]) -> tuple[int, str]:
        """Return the revision a list is served at and the key it starts after (resourceVersion semantics)."""
        token = params.get("continue", "")
        version = params.get("resourceVersion", "")
        if token:
            if version:
                raise Rejected(400, "BadRequest", "specifying resourceVersion is not allowed with continue")
            return parse_continue_token(token)
        if version in ("", "0"):
            # Most recent, or Any: this store is always current.
            return self.store.revision, ""
        number = version_number(version)
        match_mode = params.get("resourceVersionMatch", "")
        exact = match_mode == "Exact" or (not match_mode and int_param(params, "limit") > 0)
        if number > self.store.revision:
            raise Rejected(
                504, "Timeout", f"too large resource version: {number}, current: {self.store.revision}"
            )
        if not exact:
            return self.store.revision, ""
        if number < self.store.floor:
            raise Rejected(410, "Expired", str(TooOldError(number, floor=self.store.floor)))
        return number, ""

    async def _watch(self, connection: HttpConnection, query: Query, params: Mapping[str, str]) -> bool:
        version = params.get("resourceVersion", "")
        storage = storage_of(query.resource)
        initial: list[JsonObject] = []
        try:
            if version in ("", "0"):
                # Start at the current state: synthetic ADDED events for what exists, then changes.
                after = self.store.revision
                objects = self.store.objects_at(storage, revision=after)
                initial = [obj for _, obj in sorted(objects.items()) if query.selects(obj)]
            else:
                after = version_number(version)
            subscription = self.store.subscribe(storage, after=after)
        except TooOldError as error:
            self._counts["expired"] += 1
            await _start_stream(connection)
            await _send_event(connection, "ERROR", status_object(410, "Expired", str(error)))
            await connection.send(h11.EndOfMessage())
            return True
        self._counts["watches"] += 1
        timeout = float(params.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
        bookmarks = params.get("allowWatchBookmarks", "") in ("1", "true")
        try:
            await _start_stream(connection)
            for obj in initial:
                await _send_event(connection, "ADDED", render(obj, query.resource, in_list=False))
            return await self._stream_changes(
                connection,
                query,
                subscription,
                deadline=trio.current_time() + timeout,
                bookmarks=bookmarks,
            )
        finally:
            self.store.unsubscribe(subscription)

    async def _stream_changes(
        self,
        connection: HttpConnection,
        query: Query,
        subscription: WatchSubscription,
        *,
        deadline: float,
        bookmarks: bool,
    ) -> bool:
        next_bookmark = _next_bookmark(self.bookmark_interval)
        while True:
            if subscription.dropped:
                return False
            while subscription.pending:
                event = watch_event(query, subscription.pending.popleft())
                if event is not None:
                    await _send_event(connection, *event)
                if subscription.dropped:
                    return False
            now = trio.current_time()
            if bookmarks and (subscription.bookmark_requested or now >= next_bookmark or now >= deadline):
                # Invariant: nothing is pending, so every change up to this revision has been sent.
                subscription.bookmark_requested = False
                next_bookmark = now + (self.bookmark_interval or float("inf"))
                await _send_event(connection, "BOOKMARK", bookmark(query.resource, self.store.revision))
            if now >= deadline:
                await connection.send(h11.EndOfMessage())
                return True
            with trio.move_on_at(min(deadline, next_bookmark) if bookmarks else deadline):
                await subscription.wait()


def store_resources(store: ObjectStore) -> tuple[ResourceType, ...]:
    """Return every served version of the store's kinds (the builtin table, limited to its storages)."""
    return tuple(resource for resource in BUILTIN_RESOURCES if storage_of(resource) in store.kinds) + tuple(
        resource for resource in store.kinds.values() if resource not in BUILTIN_RESOURCES
    )


@asynccontextmanager
async def open_kube_api(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    bookmark_interval: float | None = None,
    resources: Iterable[ResourceType] = BUILTIN_RESOURCES,
    ssl_context: ssl.SSLContext | None = None,
    webhook_addresses: Mapping[str, str] | None = None,
) -> AsyncIterator[KubeApi]:
    """Serve a test Kubernetes API on `host` (an ephemeral port) until the block exits.

    Args:
        host: The address to listen on (loopback by default).
        port: The port; 0 (the default) takes a free one (`KubeApi.port` says which).
        token: A bearer token every request must present; None accepts any request.
        history_limit: How many changes the store keeps for watches and paging.
        bookmark_interval: Seconds between bookmarks of the watches that allow them; None sends them only
            when the test calls `send_bookmarks`, and before a watch's timeout ends it.
        resources: The kinds served (the mesh's builtin table by default).
        ssl_context: Serve HTTPS with this server context instead of plain HTTP.
        webhook_addresses: Where a webhook's `clientConfig.service` is reached: `namespace/name:port` →
            `host:port` (`aether.testing.kubeadmission`).
    """
    store = ObjectStore(resources=resources, history_limit=history_limit)
    api = KubeApi(
        store=store,
        host=host,
        token=token,
        bookmark_interval=bookmark_interval,
        ssl_context=ssl_context,
        webhook_addresses=webhook_addresses or {},
    )
    api.port = port
    async with trio.open_nursery() as nursery:
        await nursery.start(api._serve)
        try:
            yield api
        finally:
            nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m aether.testing.kubeapi --listen HOST:PORT`: serve the mesh's kinds and those an install of
    `manifests/` creates, print the URL, and run until interrupted (for kubectl and the roles, by hand or in tests)."""
    parser = argparse.ArgumentParser(prog="python -m aether.testing.kubeapi", description=main.__doc__)
    parser.add_argument(
        "--listen", default="127.0.0.1:0", metavar="HOST:PORT", help="default 127.0.0.1:0 (a free port)"
    )
    parser.add_argument("--token", help="the bearer token every request must present (default: none needed)")
    parser.add_argument(
        "--webhook-service",
        action="append",
        default=[],
        metavar="NS/NAME:PORT=HOST:PORT",
        help="where a webhook configuration's clientConfig.service is reached (repeatable)",
    )
    arguments = parser.parse_args(argv)
    addresses = dict(item.partition("=")[::2] for item in arguments.webhook_service)
    if any(not key or not value for key, value in addresses.items()):
        parser.error(
            f"--webhook-service: expected NS/NAME:PORT=HOST:PORT (got {arguments.webhook_service!r})"
        )
    host, _, port = arguments.listen.rpartition(":")
    if not host or not port.isdigit():
        parser.error(f"--listen: expected HOST:PORT such as 127.0.0.1:6443 (got {arguments.listen!r})")

    async def serve() -> None:
        async with open_kube_api(
            host=host,
            port=int(port),
            token=arguments.token,
            resources=served_resources(),
            webhook_addresses=addresses,
        ) as api:
            print(api.url, flush=True)
            await trio.sleep_forever()

    try:
        trio.run(serve)
    except KeyboardInterrupt:
        return 0
    return 0


async def _send(
    connection: HttpConnection,
    code: int,
    body: bytes,
    *,
    content_type: str = "application/json",
    headers: list[tuple[str, str]] | None = None,
) -> None:
    await connection.send_response(
        code, headers=[("Content-Type", content_type), *(headers or [])], body=body
    )


async def _start_stream(connection: HttpConnection) -> None:
    # No Content-Length: h11 frames the body with chunked transfer coding, as the real server streams watches.
    head = h11.Response(status_code=200, headers=[("Content-Type", "application/json")])
    await connection.send(head)


async def _send_event(connection: HttpConnection, kind: str, obj: JsonObject) -> None:
    await connection.send(h11.Data(data=_encode({"type": kind, "object": obj}) + b"\n"))


def _next_bookmark(interval: float | None) -> float:
    return trio.current_time() + interval if interval is not None else float("inf")


def _encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


if __name__ == "__main__":
    sys.exit(main())
