"""The registrar's gRPC service (`aether.registrar.v1.RegistrarService`) over purerpc, and `serve_registrar`.

One owner task holds the registry snapshot: it applies each mutation (pure), makes it durable in the backend,
then publishes the changes to the watchers. Handlers convert requests, hand mutations to the owner, and stream.
Publishing is a group commit: the inputs that wait while the owner takes one join its publication, so under load
one fan-out pass (one message per watcher) carries many changes, and an idle registrar publishes each at once.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Generic, TypeVar

import attrs
import purerpc
import trio
from google.protobuf.message import DecodeError, Message

from aether.proto.registrar.v1 import registrar_pb2
from aether.registrar.authorization import authorize, spiffe_id_of_certificate
from aether.registrar.backends.base import Backend, BackendFeed, StoreAvailability
from aether.registrar.broadcaster import (
    DEFAULT_WATCHER_BUFFER,
    Broadcaster,
    BroadcasterStatistics,
    WatcherEnd,
)
from aether.registrar.convert import (
    change_to_proto,
    endpoint_to_proto,
    filter_from_proto,
    list_protocol_from_proto,
    registration_from_proto,
    unregistration_from_proto,
    version_from_proto,
)
from aether.registrar.errors import (
    InvalidRequestError,
    PermissionRefusedError,
    StoreError,
    StoreUnavailableError,
)
from aether.registrar.snapshot import (
    HISTORY_LIMIT,
    Change,
    ChangeKind,
    EndpointRegistered,
    Mutation,
    RegistrySnapshot,
    StoreUpdate,
    apply,
    apply_update,
    resync,
)
from aether.rpc.direct import EncodedMessage, StreamSender, current_server_stream
from aether.rpc.listen import ListenAddress, current_peer_certificate, serve_grpc
from aether.sync import LatestValue
from aether.telemetry import (
    RegistrarMetrics,
    current_telemetry,
    observe,
    parse_traceparent,
    record_remote,
    record_span,
)

__all__ = ["SERVICE_NAME", "WRITE_WAIT", "Registrar", "RegistrarStatistics", "serve_registrar"]

SERVICE_NAME = "aether.registrar.v1.RegistrarService"
LOG = logging.getLogger("aether.registrar")


WRITE_WAIT = 5.0
"""Seconds a RegisterEndpoint/UnregisterEndpoint waits for an unavailable store to return, and for a write to come
back through the store's feed, before answering.

Long enough to ride out an etcd leader election or restart (1 to 2 s here); short enough that the agent's call,
which retries on UNAVAILABLE, is not stuck behind a store that stays down.
"""


@attrs.frozen(kw_only=True)
class RegistrarStatistics:
    """Counters of a `Registrar`."""

    version: int
    endpoints: int
    services: int
    ready: bool
    """Whether the store is reachable (writes go through); the snapshot is served either way."""
    unavailable_reason: str
    """Why the store is unreachable ("" while ready)."""
    mutations_applied: int
    """Mutations that changed the registry (each made one version)."""
    mutations_unchanged: int
    """Mutations that changed nothing (re-registering an equal endpoint, unregistering unknown IPs)."""
    updates_folded: int
    """Changes the store made underneath (another replica, Kubernetes) folded into the snapshot."""
    writes_waiting: int
    """Writes waiting for an unavailable store to return."""
    broadcaster: BroadcasterStatistics


@attrs.define(kw_only=True)
class _Submission:
    mutation: Mutation
    caller: str | None = None
    """The caller's SPIFFE ID (None: it showed none); checked only when the registrar has a trust domain."""
    refused: PermissionRefusedError | None = None
    done: trio.Event = attrs.Factory(trio.Event)
    failed: bool = False
    unavailable: StoreUnavailableError | None = None
    """Set when the store could not be reached: nothing was written."""
    visible_at: int | None = None
    """Set when the store numbers versions: the version at which the write reaches the snapshot."""
    hops: list[tuple[str, int, int]] | None = None
    """With tracing on: the owner's timed steps for this submission (name, start and end ns), for its spans."""


_OwnerInput = _Submission | BackendFeed


@attrs.define(kw_only=True)
class _Publication:
    """What the owner publishes in one go: the registry after the inputs it took, their changes in order, and the
    submissions answered once it is published."""

    snapshot: RegistrySnapshot | None = None
    """The registry to publish (None: the inputs changed nothing)."""
    changes: list[Change] = attrs.Factory(list)
    submissions: list[_Submission] = attrs.Factory(list)
    traced: list[list[tuple[str, int, int]]] = attrs.Factory(list)
    """The timed steps (see `_Submission.hops`) of the traced submissions whose changes it publishes."""


class Registrar:
    """The registry's single owner, and the purerpc service that serves it.

    The owner task takes, one at a time, mutations from the RPC handlers and updates from the backend's feed
    (`Backend.serve_updates`). It takes one input, then the inputs that waited meanwhile (a group commit), and
    publishes the snapshot after them with all their changes in one fan-out (`Broadcaster.publish`) before it
    answers their callers and takes the next input. Idle, that is one input a publication, at once; under load a
    publication carries what arrived during the last one, so the fan-out costs per publication and watcher, not
    per change and watcher.

    Writes and an unavailable store: a write waits up to `write_wait` seconds for the store to return, then fails
    with UNAVAILABLE; nothing is queued in memory, so an OK always means the store holds the write, and a refused
    one is the caller's to retry (the agent retries). The snapshot keeps being served meanwhile.

    Args:
        backend: Where the registry is stored; loaded once by `serve`.
        watcher_buffer: Changes a watcher may fall behind by before it is disconnected.
        history_limit: Changes kept to answer resumes (`aether.registrar.snapshot.HISTORY_LIMIT`).
        write_wait: See `WRITE_WAIT`.
        trust_domain: When set, a write is accepted only from the agent of the node of every endpoint it changes,
            known by its client certificate (`aether.registrar.authorization`); serve it with TLS.
    """

    def __init__(
        self,
        *,
        backend: Backend,
        watcher_buffer: int = DEFAULT_WATCHER_BUFFER,
        history_limit: int = HISTORY_LIMIT,
        write_wait: float = WRITE_WAIT,
        trust_domain: str | None = None,
    ) -> None:
        self._backend = backend
        self._trust_domain = trust_domain
        self._history_limit = history_limit
        self._write_wait = write_wait
        self._broadcaster = Broadcaster(capacity=watcher_buffer, encode=_encoded)
        self._snapshot: LatestValue[RegistrySnapshot | None] = LatestValue(None)
        """The published registry: what readers and new watches see, and what the watchers were sent."""
        self._head: RegistrySnapshot | None = None
        """The owner's registry: the published one, or ahead of it while the owner takes a publication's inputs."""
        self._shared: dict[tuple[ChangeKind, str, int], bytes] = {}
        self._shared_version = -1
        self._send: trio.MemorySendChannel[_OwnerInput] | None = None
        self._availability = LatestValue(StoreAvailability(available=True))
        self._applied = 0
        self._unchanged = 0
        self._folded = 0
        self._waiting = 0
        telemetry = current_telemetry()
        self._metrics = RegistrarMetrics.of(telemetry)
        self._tracer = telemetry.tracer
        self._hops: list[tuple[str, int, int]] | None = None
        observe(
            telemetry,
            "aether.registrar.watchers",
            lambda: [(self._broadcaster.statistics().watchers, {})],
            unit="{watcher}",
            description="WatchEndpoints streams connected",
        )
        observe(
            telemetry,
            "aether.registrar.store.available",
            lambda: [(int(self._availability.value.available), {})],
            unit="1",
            description="1 while the registry store is reachable (writes go through), else 0",
        )

    @property
    def snapshot(self) -> RegistrySnapshot:
        """The registry now (as durable as the backend makes it)."""
        snapshot = self._snapshot.value
        assert snapshot is not None, "Registrar.serve() must run first; this is a bug"
        return snapshot

    @property
    def ready(self) -> bool:
        """Whether the store is reachable: False while it is down (the snapshot is still served)."""
        return self._availability.value.available

    def statistics(self) -> RegistrarStatistics:
        """Return the registrar's counters."""
        snapshot = self.snapshot
        availability = self._availability.value
        return RegistrarStatistics(
            version=snapshot.version,
            endpoints=len(snapshot.endpoints),
            services=len(snapshot.services),
            ready=availability.available,
            unavailable_reason="" if availability.available else availability.reason,
            mutations_applied=self._applied,
            mutations_unchanged=self._unchanged,
            updates_folded=self._folded,
            writes_waiting=self._waiting,
            broadcaster=self._broadcaster.statistics(),
        )

    async def wait_version(self, version: int) -> None:
        """Wait until the snapshot's version is at least `version`."""
        await self._snapshot.wait_value(lambda _snapshot: self.snapshot.version >= version)

    async def wait_ready(self, *, ready: bool = True) -> None:
        """Wait until `ready` equals the argument (the store came back, or went away)."""
        await self._availability.wait_value(lambda availability: availability.available is ready)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the registry, follow the backend's feed, and apply submitted mutations one at a time until cancelled.

        Serve `service()` only after this started: handlers need the loaded registry.

        Raises:
            StoreError: The backend could not load or store, or its feed broke the feed's rules; the registry
                stops (it must not diverge from the store).
        """
        self._head = await self._backend.load()
        self._snapshot.set(self._head)
        LOG.info(
            "registry loaded from %s at version %d: %d endpoints of %d services",
            self._backend.description,
            self.snapshot.version,
            len(self.snapshot.endpoints),
            len(self.snapshot.services),
        )
        send, receive = trio.open_memory_channel[_OwnerInput](0)
        self._send = send
        async with send, receive, trio.open_nursery() as nursery:
            await nursery.start(self._follow, send.clone())
            task_status.started()
            async for first in receive:
                publication = _Publication()
                try:
                    await self._handle(first, publication)
                    # The inputs that waited while `first` was taken (a bounded batch: those that arrive meanwhile
                    # wait for the next publication) join its publication.
                    for _ in range(receive.statistics().tasks_waiting_send):
                        try:
                            item = receive.receive_nowait()
                        except trio.WouldBlock:
                            break
                        await self._handle(item, publication)
                finally:  # also when an input failed: what was made durable is published, every caller answered
                    self._publish(publication)

    async def _handle(self, item: _OwnerInput, publication: _Publication) -> None:
        match item:
            case _Submission():
                await self._take(item, publication)
            case StoreAvailability():
                self._set_availability(item)
            case _:
                self._fold(item, publication)

    async def _follow(
        self, updates: trio.MemorySendChannel[_OwnerInput], *, task_status: trio.TaskStatus[None]
    ) -> None:
        async with updates:
            await self._backend.serve_updates(updates, task_status=task_status)

    @property
    def _current(self) -> RegistrySnapshot:
        assert self._head is not None, "Registrar.serve() must run first; this is a bug"
        return self._head

    async def _take(self, submission: _Submission, publication: _Publication) -> None:
        # Failed until proven otherwise: if applying raises (or is cancelled), the caller is told (its `done` is
        # set once the publication is published).
        submission.failed = True
        publication.submissions.append(submission)
        self._hops = submission.hops
        try:
            if self._trust_domain is not None:
                authorize(
                    submission.mutation,
                    caller=submission.caller,
                    trust_domain=self._trust_domain,
                    snapshot=self._current,
                )
            submission.visible_at = await self._apply(submission.mutation, publication)
            submission.failed = False
        except PermissionRefusedError as exc:
            submission.refused = exc
            submission.failed = False
        except StoreUnavailableError as exc:
            submission.unavailable = exc
            submission.failed = False
        finally:
            self._hops = None

    async def _apply(self, mutation: Mutation, publication: _Publication) -> int | None:
        current = self._current
        snapshot, changes = apply(current, mutation, history_limit=self._history_limit)
        if not changes:
            self._unchanged += 1
            await trio.lowlevel.checkpoint()
            return None
        started, started_ns = time.perf_counter(), time.time_ns()
        visible_at = await self._backend.apply(mutation, snapshot=snapshot, changes=changes)
        self._metrics.store_write_duration.record(time.perf_counter() - started)
        if self._hops is not None:
            self._hops.append(("aether.registrar.store.write", started_ns, time.time_ns()))
        self._applied += 1
        if visible_at is None:
            self._advance(snapshot, changes, publication)
            if self._hops is not None:
                publication.traced.append(self._hops)
        return visible_at

    def _fold(self, update: StoreUpdate, publication: _Publication) -> None:
        try:
            snapshot, changes = apply_update(self._current, update, history_limit=self._history_limit)
        except ValueError as exc:
            raise StoreError(self._backend.description, reason=f"its feed is out of order: {exc}") from exc
        self._folded += 1
        self._advance(snapshot, changes, publication)

    def _advance(
        self, snapshot: RegistrySnapshot, changes: tuple[Change, ...], publication: _Publication
    ) -> None:
        """The owner's registry is now `snapshot`, `changes` after the last; published with `publication`."""
        self._head = publication.snapshot = snapshot
        publication.changes.extend(changes)

    def _publish(self, publication: _Publication) -> None:
        """Publish the registry after a publication's inputs, broadcast their changes, then answer their callers."""
        snapshot = publication.snapshot
        if snapshot is not None:
            self._broadcast(snapshot, tuple(publication.changes), publication.traced)
        for submission in publication.submissions:
            submission.done.set()

    def _broadcast(
        self,
        snapshot: RegistrySnapshot,
        changes: tuple[Change, ...],
        traced: list[list[tuple[str, int, int]]],
    ) -> None:
        # Invariant: nothing awaits between publishing the snapshot and broadcasting its changes, so a watch
        # that reads the snapshot and subscribes (without awaiting either) misses and repeats nothing.
        self._snapshot.set(snapshot)
        started, started_ns = time.perf_counter(), time.time_ns()
        fell_behind = self._broadcaster.publish(changes)
        self._metrics.fan_out_duration.record(time.perf_counter() - started)
        ended_ns = time.time_ns()
        for hops in traced:
            hops.append(("aether.registrar.fan_out", started_ns, ended_ns))
        for watcher in fell_behind:
            LOG.warning(
                "watcher %r fell behind by %d changes; disconnected", watcher.name, watcher.fell_behind_by
            )

    def _set_availability(self, availability: StoreAvailability) -> None:
        if availability.available != self._availability.value.available:
            if availability.available:
                LOG.warning("registry store %s is available again", self._backend.description)
            else:
                LOG.warning(
                    "registry store %s is unavailable (%s): serving the last snapshot, writes wait",
                    self._backend.description,
                    availability.reason,
                )
        self._availability.set(availability)

    async def _submit_traced(self, mutation: Mutation, *, method: str, request: Any) -> None:
        """`_submit`, traced as one span (a child of the caller's `traceparent`) with the store write and the
        fan-out to the watchers as its children."""
        if self._tracer is None:
            await self._submit(mutation, method=method)
            return
        parent = parse_traceparent(getattr(request, "custom_metadata", ()))
        hops: list[tuple[str, int, int]] = []
        start, error = time.time_ns(), None
        try:
            await self._submit(mutation, method=method, hops=hops)
        except purerpc.RpcFailedError as exc:
            error = str(exc)
            raise
        finally:
            ids = record_remote(
                self._tracer,
                parent,
                f"aether.registrar.{method}",
                start=start,
                end=time.time_ns(),
                attributes={
                    "aether.registrar.service": mutation.endpoint.service
                    if isinstance(mutation, EndpointRegistered)
                    else mutation.service
                },
                error=error,
            )
            if ids is not None:
                for name, hop_start, hop_end in hops:
                    record_span(self._tracer, name, start=hop_start, end=hop_end, parent=ids)

    async def _submit(
        self, mutation: Mutation, *, method: str, hops: list[tuple[str, int, int]] | None = None
    ) -> None:
        assert self._send is not None, "Registrar.serve() must run first; this is a bug"
        if not self._backend.writable:
            raise purerpc.FailedPreconditionError(
                f"{method}: the registry backend {self._backend.description!r} is read-only (endpoints come from"
                " the store itself); register through the store, or run the registrar with a writable backend"
            )
        self._waiting += 1
        try:
            with trio.move_on_after(self._write_wait):
                await self.wait_ready()
        finally:
            self._waiting -= 1
        if not self.ready:
            raise purerpc.UnavailableError(
                f"{method}: the registry store {self._backend.description!r} is unavailable"
                f" ({self._availability.value.reason}); nothing was stored, retry"
            )
        submission = _Submission(mutation=mutation, caller=_caller(), hops=hops)
        try:
            await self._send.send(submission)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise purerpc.UnavailableError("the registrar is shutting down; retry") from None
        await submission.done.wait()
        if submission.failed:
            raise purerpc.UnavailableError("the registry store failed; the registrar is stopping")
        if submission.refused is not None:
            LOG.warning("%s refused: %s", method, submission.refused)
            raise purerpc.PermissionDeniedError(f"{method}: {submission.refused}")
        if submission.unavailable is not None:
            raise purerpc.UnavailableError(f"{method}: {submission.unavailable}; nothing was stored, retry")
        if submission.visible_at is not None:
            # The write is durable; waiting lets the caller read it back from this registrar right away.
            with trio.move_on_after(self._write_wait):
                await self.wait_version(submission.visible_at)

    def _encoded_sync(self, changes: tuple[Change, ...]) -> list[bytes]:
        """The bytes of a first sync's changes. Those without an endpoint (the opening, the catalog, the completion)
        are the same for every watcher of a version: encoded once per version, not once per watcher."""
        version = self.snapshot.version
        if self._shared_version != version:
            self._shared_version = version
            self._shared.clear()
        shared = self._shared
        encoded = []
        for change in changes:
            if change.endpoint is not None or change.ip:
                encoded.append(_encoded(change))
                continue
            key = (change.kind, change.service, change.version)
            data = shared.get(key)
            if data is None:
                data = shared[key] = _encoded(change)
            encoded.append(data)
        return encoded

    def service(self) -> purerpc.Service:
        """Return the purerpc service definition (all four methods)."""
        service = purerpc.Service(SERVICE_NAME)
        unary = purerpc.Cardinality.UNARY_UNARY
        service.add_method(
            "RegisterEndpoint",
            self._register,
            purerpc.RPCSignature(
                unary,
                _request_type(registrar_pb2.RegisterEndpointRequest, method="RegisterEndpoint"),
                registrar_pb2.RegisterEndpointResponse,
            ),
        )
        service.add_method(
            "UnregisterEndpoint",
            self._unregister,
            purerpc.RPCSignature(
                unary,
                _request_type(registrar_pb2.UnregisterEndpointRequest, method="UnregisterEndpoint"),
                registrar_pb2.UnregisterEndpointResponse,
            ),
        )
        service.add_method(
            "WatchEndpoints",
            self._watch,
            purerpc.RPCSignature(
                purerpc.Cardinality.UNARY_STREAM,
                _request_type(registrar_pb2.WatchEndpointsRequest, method="WatchEndpoints"),
                registrar_pb2.WatchEndpointsResponse,
            ),
        )
        service.add_method(
            "ListAllEndpoints",
            self._list_all,
            purerpc.RPCSignature(
                unary,
                _request_type(registrar_pb2.ListAllEndpointsRequest, method="ListAllEndpoints"),
                registrar_pb2.ListAllEndpointsResponse,
            ),
        )
        return service

    async def _register(
        self, received: _Request[registrar_pb2.RegisterEndpointRequest], request: Any
    ) -> registrar_pb2.RegisterEndpointResponse:
        # `request`: purerpc's name for the call's headers (`custom_metadata` carries the caller's traceparent).
        with _invalid_argument("RegisterEndpoint"):
            mutation = registration_from_proto(received.message)
        await self._submit_traced(mutation, method="RegisterEndpoint", request=request)
        return registrar_pb2.RegisterEndpointResponse()

    async def _unregister(
        self, received: _Request[registrar_pb2.UnregisterEndpointRequest], request: Any
    ) -> registrar_pb2.UnregisterEndpointResponse:
        with _invalid_argument("UnregisterEndpoint"):
            mutation = unregistration_from_proto(received.message)
        await self._submit_traced(mutation, method="UnregisterEndpoint", request=request)
        return registrar_pb2.UnregisterEndpointResponse()

    async def _list_all(
        self, received: _Request[registrar_pb2.ListAllEndpointsRequest]
    ) -> registrar_pb2.ListAllEndpointsResponse:
        await trio.lowlevel.checkpoint()
        with _invalid_argument("ListAllEndpoints"):
            wanted = list_protocol_from_proto(received.message.protocol)
        snapshot = self.snapshot
        response = registrar_pb2.ListAllEndpointsResponse(version=str(snapshot.version))
        for endpoint in snapshot.sorted_endpoints():
            if wanted is None or endpoint.protocol == wanted:
                response.services[endpoint.service].endpoints.append(endpoint_to_proto(endpoint))
        return response

    async def _watch(
        self, received: _Request[registrar_pb2.WatchEndpointsRequest]
    ) -> AsyncIterator[EncodedMessage]:
        request = received.message
        with _invalid_argument("WatchEndpoints"):
            service_filter = filter_from_proto(request)
            last_version = version_from_proto(request.last_version)
        name = f"{request.cluster_name}/{request.node_name}" if request.node_name else ""
        rings: LatestValue[object] = LatestValue(object())
        """A new token each time the broadcaster wakes this watch: a ring while the watch yields is not lost."""
        # No checkpoint between reading the snapshot and subscribing: see the invariant in `_apply`.
        initial = resync(self.snapshot, last_version=last_version, service_filter=service_filter)
        if initial[0].kind is ChangeKind.FULL_SNAPSHOT:
            self._metrics.resyncs.add(1, {"aether.registrar.side": "registrar"})
        stream = current_server_stream()
        sender = None if stream is None else StreamSender(stream)
        watcher = self._broadcaster.subscribe(
            name=name,
            service_filter=service_filter,
            wake=lambda: rings.set(object()),
            deliver=None if sender is None else sender.send_nowait,
        )
        try:
            # The first sync as one write when the stream's window takes it (a resync of a filtered watcher
            # does), else message by message as the window opens.
            first = self._encoded_sync(initial)
            if sender is None or not sender.send_nowait(first):
                for data in first:
                    yield EncodedMessage(data)
            while True:
                seen = rings.value
                for change in watcher.take():
                    yield EncodedMessage(_encoded(change))
                if watcher.end is WatcherEnd.FELL_BEHIND:
                    raise purerpc.ResourceExhaustedError(
                        f"watcher fell behind by {watcher.fell_behind_by} changes; reconnect to resync"
                    )
                if watcher.end is WatcherEnd.REPLACED:
                    raise purerpc.AbortedError(
                        f"watch {name!r} was replaced by a newer watch from the same node"
                    )
                if (
                    watcher.idle()
                ):  # from now on, `publish` sends new changes itself while the stream takes them
                    await rings.wait_changed(seen)
        finally:
            self._broadcaster.unsubscribe(watcher)


_Message = TypeVar("_Message", bound=Message)


class _Request(Generic[_Message]):
    """A request as purerpc parses it (it calls `ParseFromString` on what the signature's request type makes):
    `message`, or INVALID_ARGUMENT naming the method for bytes that are no such message. Without it purerpc ends
    the call CANCELLED with the repr of a traceback as the message."""

    def __init__(self, message_type: type[_Message], *, method: str) -> None:
        self.message = message_type()
        self._method = method

    def ParseFromString(self, data: bytes) -> int:  # the protobuf method purerpc calls
        try:
            return self.message.ParseFromString(data)
        except DecodeError as exc:
            name = self.message.DESCRIPTOR.full_name
            LOG.info("%s refused: %d request bytes are not a %s", self._method, len(data), name)
            raise purerpc.InvalidArgumentError(
                f"{self._method}: the request ({len(data)} bytes) is not a valid {name} message"
            ) from exc


def _request_type(message_type: type[_Message], *, method: str) -> Callable[[], _Request[_Message]]:
    return functools.partial(_Request, message_type, method=method)


def _encoded(change: Change) -> bytes:
    """The bytes of `change`'s watch event: the same on every stream, so encoded once per change published."""
    return change_to_proto(change).SerializeToString()


def _caller() -> str | None:
    """The SPIFFE ID of the client certificate of the request being handled (None without one)."""
    certificate = current_peer_certificate()
    return None if certificate is None else spiffe_id_of_certificate(certificate)


@contextlib.contextmanager
def _invalid_argument(method: str) -> Iterator[None]:
    """Turn `InvalidRequestError` into the INVALID_ARGUMENT status, with the field, rule and value."""
    try:
        yield
    except InvalidRequestError as exc:
        LOG.info("%s refused: %s", method, exc)
        raise purerpc.InvalidArgumentError(str(exc)) from exc


async def serve_registrar(
    *,
    backend: Backend,
    listen: ListenAddress,
    watcher_buffer: int = DEFAULT_WATCHER_BUFFER,
    history_limit: int = HISTORY_LIMIT,
    write_wait: float = WRITE_WAIT,
    tls: ssl.SSLContext | None = None,
    trust_domain: str | None = None,
    task_status: trio.TaskStatus[ListenAddress] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Load the registry from `backend` and serve the registrar API on `listen` until cancelled.

    Args:
        backend: Where the registry is stored (`aether.registrar.open_embedded_backend`).
        listen: Where to listen (see `aether.rpc.listen.serve_grpc`).
        watcher_buffer: Changes a watcher may fall behind by before it is disconnected.
        history_limit: Changes kept to answer resumes.
        write_wait: Seconds a write waits for an unavailable store (see `WRITE_WAIT`).
        tls: Serve over TLS with this context (`aether.rpc.tls.server_tls_context`, client certificates
            required).
        trust_domain: Accept writes only from the agent of each endpoint's node (needs `tls`).
        task_status: Receives the address it listens on (for TCP port 0, with the port chosen).

    Raises:
        ValueError: `trust_domain` without `tls` (no caller could prove an identity).
        StoreError: The backend failed to load or store.
        ListenError: The address cannot be listened on.
    """
    if trust_domain is not None and tls is None:
        raise ValueError(f"trust_domain {trust_domain!r}: needs tls, so that callers show their identity")
    registrar = Registrar(
        backend=backend,
        watcher_buffer=watcher_buffer,
        history_limit=history_limit,
        write_wait=write_wait,
        trust_domain=trust_domain,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(registrar.serve)
        address = await nursery.start(
            functools.partial(serve_grpc, [registrar.service()], listen=listen, tls=tls)
        )
        task_status.started(address)
