"""The etcd backend: the registry in etcd, shared by registrar replicas (active/active), over aetcd's gRPC stubs.

aetcd's client is asyncio (grpc.aio); it runs here through trio-asyncio. grpc.aio binds to one asyncio loop per
process, so every etcd backend of a process shares the one loop its caller opened with `trio_asyncio.open_loop()`.

The store numbers the versions: a write returns its etcd revision, and every change (this replica's and the
others') reaches the registrar through one watch on the partition, which resumes from the last revision after a
broken stream and re-lists when that revision was compacted away.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import logging
import math
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import attrs
import trio
import trio.lowlevel
import trio_asyncio
from aetcd import rpc
from grpc.aio import EOF

from aether.core.events.registry import Endpoint, EndpointKey, Protocol
from aether.registrar.backends.base import BackendFeed, StoreAvailability
from aether.registrar.backends.etcd_layout import (
    EPOCH_BITS,
    Partition,
    epoch_of,
    prefix_end,
    value_of,
    version_of,
)
from aether.registrar.errors import InvalidRequestError, StoreError, StoreUnavailableError
from aether.registrar.snapshot import (
    HISTORY_LIMIT,
    Change,
    EndpointRegistered,
    EndpointsReplaced,
    EndpointsUnregistered,
    EndpointsUpdated,
    Mutation,
    RegistrySnapshot,
    apply_update,
    snapshot_of,
)
from aether.rpc.backoff import Backoff

__all__ = ["EtcdBackend", "EtcdStatistics", "open_etcd_backend", "parse_etcd_endpoints"]

LOG = logging.getLogger("aether.registrar.etcd")
_T = TypeVar("_T")

DEFAULT_PARTITION = Partition()
"""`/aether/v1/regions/local/clusters/local`: one cluster, one region."""

LOAD_REPLAY = 10_000
"""Revisions replayed at load to rebuild the history (see `EtcdBackend.load`).

Of the order of `HISTORY_LIMIT` changes: a restarted registrar answers resumes as far back as a running one would.
Replaying is one watch read of at most this many events, a fraction of a second.
"""

REQUEST_TIMEOUT = 2.0
"""Seconds for one etcd request: a healthy etcd answers in milliseconds, a leader election takes about a second."""

BACKOFF = Backoff(base=0.05, cap=2.0)
"""Re-watch and reload backoff: an etcd restart (about 2 s) is noticed within a couple of tries, and a
registrar never retries slower than every 2 s, so writes are taken again soon after the store returns."""

_KEEPALIVE = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)
# HTTP/2 PINGs every 10 s, so a vanished etcd (host down, partition) breaks the watch within about 15 s;
# etcd's own minimum (--grpc-keepalive-min-time) is 5 s, so it never answers these with GOAWAY.

_TRANSIENT = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "ABORTED", "RESOURCE_EXHAUSTED", "UNKNOWN"}
)
# The gRPC codes a restarting, electing or overloaded etcd answers with: the store may work on the next try.
# Anything else (PERMISSION_DENIED, INVALID_ARGUMENT...) is a misconfiguration that retrying cannot fix.


def parse_etcd_endpoints(text: str) -> tuple[str, ...]:
    """Return the `host:port` gRPC targets of `--etcd-endpoints` (`http://10.0.0.1:2379,http://10.0.0.2:2379`).

    Raises:
        ValueError: An entry is not an `http://host:port` URL (TLS to etcd is not supported yet).
    """
    targets = []
    for entry in (part.strip() for part in text.split(",")):
        parsed = urlsplit(entry)
        if (
            parsed.scheme != "http"
            or not parsed.hostname
            or parsed.port is None
            or parsed.path not in ("", "/")
        ):
            raise ValueError(f"--etcd-endpoints: each entry must be http://HOST:PORT (got {entry!r})")
        host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
        targets.append(f"{host}:{parsed.port}")
    return tuple(targets)


@attrs.frozen(kw_only=True)
class EtcdStatistics:
    """Counters of an `EtcdBackend`."""

    epoch: int
    revision: int
    """The last etcd revision folded into the registry."""
    watches: int
    """Watch streams opened (1 plus one per resume)."""
    relists: int
    """Re-lists after the resume revision was compacted away."""
    ignored_keys: int
    """Keys under the partition that hold no valid endpoint (logged, left out of the registry)."""


class EtcdBackend:
    """The registry in one etcd partition. Get one from `open_etcd_backend`."""

    def __init__(
        self,
        *,
        loop: Any,
        channel: Any,
        targets: tuple[str, ...],
        partition: Partition,
        backoff: Backoff,
        rng: random.Random,
        replay: int,
        history_limit: int,
    ) -> None:
        self._loop = loop
        self._kv = rpc.KVStub(channel)
        self._watch_stub = rpc.WatchStub(channel)
        self._targets = targets
        self._partition = partition
        self._backoff = backoff
        self._rng = rng
        self._replay = replay
        self._history_limit = history_limit
        self._epoch = 0
        self._revision = 0
        # Identifies this backend's writes of the sync key (a replica's marker; the value is never read).
        self._token = f"{rng.getrandbits(64):016x}".encode()
        self._watches = 0
        self._relists = 0
        self._ignored = 0

    @property
    def description(self) -> str:
        """`etcd <targets> <partition>`."""
        return f"etcd {','.join(self._targets)} {self._partition.path}"

    @property
    def writable(self) -> bool:
        """Always True: registrars write their registrations into the partition."""
        return True

    def statistics(self) -> EtcdStatistics:
        """Return the backend's counters."""
        return EtcdStatistics(
            epoch=self._epoch,
            revision=self._revision,
            watches=self._watches,
            relists=self._relists,
            ignored_keys=self._ignored,
        )

    async def load(self) -> RegistrySnapshot:
        """List the partition as it was `replay` revisions ago, then replay the changes since, retrying with
        backoff until etcd answers (creating the partition's epoch if it has none).

        The replay rebuilds the history a registrar started afresh would lack, so agents that reconnect after a
        registrar restart (or move from another replica) resume with what they missed instead of a full resync.
        When those revisions were compacted away, the history starts at the current revision.

        Raises:
            StoreError: etcd refuses for good (permissions), or the epoch key is damaged.
        """
        failures = 0
        while True:
            try:
                return await self._load()
            except StoreUnavailableError as exc:
                failures += 1
                LOG.warning("%s; retrying the first list", exc)
                await trio.sleep(self._backoff.delay(failures, rng=self._rng))

    async def _load(self) -> RegistrySnapshot:
        self._epoch = await self._read_epoch(create=True)
        _, current = await self._list(count_only=True)
        try:
            endpoints, _ = await self._list(revision=max(current - self._replay, 1))
            self._revision = max(current - self._replay, 1)
        except StoreError as exc:
            if (
                not isinstance(exc.__cause__, rpc.AioRpcError)
                or exc.__cause__.code() != rpc.StatusCode.OUT_OF_RANGE
            ):
                raise
            endpoints, self._revision = await self._list()  # compacted: no history before now
        snapshot = snapshot_of(endpoints, version=version_of(self._revision, epoch=self._epoch))
        replayed, receive = trio.open_memory_channel[BackendFeed](math.inf)
        caught_up = False
        while not caught_up:
            async with contextlib.aclosing(self._watch(replayed)) as watch:
                async for caught_up in watch:
                    if caught_up:
                        break
        replayed.close()
        async for item in receive:
            assert not isinstance(item, StoreAvailability), "the watch reports no availability; this is a bug"
            snapshot, _ = apply_update(snapshot, item, history_limit=self._history_limit)
        return snapshot

    async def apply(
        self, mutation: Mutation, *, snapshot: RegistrySnapshot, changes: tuple[Change, ...]
    ) -> int:
        """Write `mutation` into the partition; return the version at which the watch brings it back.

        A registration is one put; an unregistration one transaction deleting the IPs' keys of both protocols.
        Both are idempotent, so a write whose answer was lost is safe to repeat.

        Raises:
            StoreUnavailableError: etcd did not answer (the write may or may not have happened).
            StoreError: etcd refused the write for good.
        """
        del snapshot, changes
        match mutation:
            case EndpointRegistered(endpoint=endpoint):
                request = rpc.PutRequest(key=self._partition.key(endpoint.key), value=value_of(endpoint))
                response = await self._call(self._kv.Put, request)
            case EndpointsUnregistered(service=service, ips=ips):
                deletes = [
                    rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=self._partition.key(key)))
                    for ip in sorted(set(ips))
                    for key in ((service, Protocol.HTTP, ip), (service, Protocol.TCP, ip))
                ]
                response = await self._call(self._kv.Txn, rpc.TxnRequest(success=deletes))
            case _:  # pragma: no cover - the type checker proves this unreachable
                raise TypeError(f"mutation: unknown type {type(mutation).__name__!r}")
        return version_of(response.header.revision, epoch=self._epoch)

    async def serve_updates(
        self,
        updates: trio.abc.SendChannel[BackendFeed],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Watch the partition from the loaded revision on, until cancelled; see `Backend.serve_updates`.

        A broken stream (etcd restarting, a cut connection) reports the store unavailable, then resumes from the
        last revision with backoff; a compacted resume revision re-lists the partition as one `EndpointsReplaced`.
        The store is reported available again once the watch caught up (etcd's progress notification).

        Raises:
            StoreError: The store was replaced underneath (another epoch, or its revision went backwards).
        """
        task_status.started()  # the watch resumes from the loaded revision, so nothing is missed meanwhile
        available = True
        failures = 0
        while True:
            try:
                async with contextlib.aclosing(self._watch(updates)) as watch:
                    async for caught_up in watch:
                        if caught_up and not available:
                            await updates.send(StoreAvailability(available=True))
                            available = True
                        failures = 0
            except StoreUnavailableError as exc:
                if available:
                    await updates.send(StoreAvailability(available=False, reason=exc.reason))
                    available = False
                failures += 1
                LOG.warning("%s; watching again", exc)
                await trio.sleep(self._backoff.delay(failures, rng=self._rng))

    async def _watch(self, updates: trio.abc.SendChannel[BackendFeed]) -> AsyncGenerator[bool, None]:
        """Open one watch on the partition from the next revision and send what it reports.

        Yields False once the watch is created, then True once it has caught up: right after creating it, the
        backend writes the partition's sync key, and the watch has delivered every earlier revision when that
        write comes back through it. (etcd's own progress request cannot serve: before 3.5.8 it may answer
        ahead of the events of an unsynced watch, etcd issue 15220.)
        """
        if await self._read_epoch(create=False) != self._epoch:
            raise StoreError(self.description, reason="the store was replaced (its epoch changed); restart")
        prefix = self._partition.prefix
        create = rpc.WatchCreateRequest(
            key=prefix, range_end=prefix_end(prefix), start_revision=self._revision + 1
        )

        async def open_stream() -> Any:
            stream = self._watch_stub.Watch()
            await stream.write(rpc.WatchRequest(create_request=create))
            return stream

        with self._unavailable_on_rpc_errors():
            stream = await self._loop.run_aio_coroutine(open_stream())
        self._watches += 1
        synced_at: int | None = None
        try:
            while True:
                with self._unavailable_on_rpc_errors():
                    response = await self._loop.run_aio_coroutine(stream.read())
                if response is EOF:
                    raise StoreUnavailableError(self.description, reason="the watch stream ended")
                if response.canceled:
                    if response.compact_revision:
                        await self._relist(updates, compacted=response.compact_revision)
                        return
                    raise StoreUnavailableError(
                        self.description, reason=f"etcd cancelled the watch: {response.cancel_reason!r}"
                    )
                if response.created:
                    yield False
                    sync = rpc.PutRequest(key=self._partition.sync_key, value=self._token)
                    synced_at = int((await self._call(self._kv.Put, sync)).header.revision)
                    continue
                for update in self._updates(response.events):
                    await updates.send(update)
                if synced_at is not None and self._revision >= synced_at:
                    synced_at = None
                    yield True
        finally:
            stream.cancel()

    def _updates(self, events: Sequence[Any]) -> Iterator[EndpointsUpdated]:
        """Group a watch response's events by revision: one update per revision, in order.

        Events of keys that are not endpoints (the sync and epoch keys) still move the version to their revision.
        """
        by_revision: dict[int, tuple[list[Endpoint], list[EndpointKey]]] = {}
        endpoints = self._partition.endpoints_prefix
        for event in events:
            revision = event.kv.mod_revision
            if revision <= self._revision:
                raise StoreError(
                    self.description,
                    reason=f"its revision went backwards ({revision} after {self._revision}); restart",
                )
            upserted, removed = by_revision.setdefault(revision, ([], []))
            if not event.kv.key.startswith(endpoints):
                continue
            try:
                key = self._partition.endpoint_key(event.kv.key)
                if event.type == rpc.Event.EventType.DELETE:
                    removed.append(key)
                else:
                    upserted.append(self._partition.endpoint(event.kv.key, event.kv.value))
            except InvalidRequestError as exc:
                self._ignore(exc)
                with contextlib.suppress(InvalidRequestError):
                    removed.append(self._partition.endpoint_key(event.kv.key))
        for revision in sorted(by_revision):
            upserted, removed = by_revision[revision]
            self._revision = revision
            yield EndpointsUpdated(
                upserted=tuple(upserted),
                removed=tuple(removed),
                version=version_of(revision, epoch=self._epoch),
            )

    async def _relist(self, updates: trio.abc.SendChannel[BackendFeed], *, compacted: int) -> None:
        LOG.warning(
            "%s: revision %d was compacted (compact revision %d); listing the partition again",
            self.description,
            self._revision + 1,
            compacted,
        )
        endpoints, revision = await self._list()
        self._relists += 1
        if revision > self._revision:
            self._revision = revision
            version = version_of(revision, epoch=self._epoch)
            await updates.send(EndpointsReplaced(endpoints=tuple(endpoints), version=version))

    async def _list(self, *, revision: int = 0, count_only: bool = False) -> tuple[list[Endpoint], int]:
        """Return the partition's endpoints at `revision` (0: now), and the revision read."""
        prefix = self._partition.endpoints_prefix
        request = rpc.RangeRequest(
            key=prefix, range_end=prefix_end(prefix), revision=revision, count_only=count_only
        )
        response = await self._call(self._kv.Range, request)
        endpoints = []
        for kv in response.kvs:
            try:
                endpoints.append(self._partition.endpoint(kv.key, kv.value))
            except InvalidRequestError as exc:
                self._ignore(exc)
        return endpoints, revision or int(response.header.revision)

    async def _read_epoch(self, *, create: bool) -> int:
        """Return the partition's epoch; with `create`, make one first if it has none (a new store)."""
        key = self._partition.epoch_key
        if create:
            fresh = str(self._rng.randrange(1, 1 << EPOCH_BITS)).encode()
            request = rpc.TxnRequest(
                compare=[
                    rpc.Compare(
                        key=key,
                        target=rpc.Compare.CompareTarget.CREATE,
                        result=rpc.Compare.CompareResult.EQUAL,
                    )
                ],
                success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=fresh))],
            )
            await self._call(self._kv.Txn, request)
        response = await self._call(self._kv.Range, rpc.RangeRequest(key=key))
        if not response.kvs:
            return 0
        try:
            return epoch_of(response.kvs[0].value)
        except ValueError as exc:
            raise StoreError(self.description, reason=f"its epoch key does not parse: {exc}") from exc

    def _ignore(self, exc: InvalidRequestError) -> None:
        self._ignored += 1
        LOG.warning("%s: ignoring a key that holds no valid endpoint: %s", self.description, exc)

    async def _call(self, method: Callable[..., Awaitable[_T]], request: Any) -> Any:
        """Run one unary etcd request on the asyncio loop, with the request timeout."""

        async def call() -> Any:
            return await method(request, timeout=REQUEST_TIMEOUT)

        with self._unavailable_on_rpc_errors():
            return await self._loop.run_aio_coroutine(call())

    @contextlib.contextmanager
    def _unavailable_on_rpc_errors(self) -> Iterator[None]:
        """Translate grpc.aio errors: transient codes into `StoreUnavailableError`, the rest into `StoreError`."""
        try:
            yield
        except rpc.AioRpcError as exc:
            reason = f"{exc.code().name}: {exc.details()}"
            if exc.code().name in _TRANSIENT:
                raise StoreUnavailableError(self.description, reason=reason) from exc
            raise StoreError(self.description, reason=reason) from exc


def _channel_target(targets: Sequence[str]) -> str:
    """One target, or several members as one channel that fails over between them (gRPC's `ipv4:` list)."""
    if len(targets) == 1:
        return targets[0]
    hosts = [target.rpartition(":")[0] for target in targets]
    if not all(_is_ipv4(host) for host in hosts):
        raise ValueError(f"etcd endpoints: several must all be IPv4 addresses (got {list(targets)!r})")
    return "ipv4:" + ",".join(targets)


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


@contextlib.asynccontextmanager
async def open_etcd_backend(
    targets: Sequence[str],
    *,
    partition: Partition = DEFAULT_PARTITION,
    backoff: Backoff = BACKOFF,
    rng: random.Random | None = None,
    loop: Any = None,
    replay: int = LOAD_REPLAY,
    history_limit: int = HISTORY_LIMIT,
) -> AsyncIterator[EtcdBackend]:
    """Connect to etcd at `targets` (`host:port`, see `parse_etcd_endpoints`) for the duration of the block.

    Must run inside `trio_asyncio.open_loop()`, or be given that `loop`: grpc.aio allows one asyncio loop per
    process, so the caller opens it once and every backend shares it.

    Raises:
        RuntimeError: No trio-asyncio loop is open.
        ValueError: No target, or several that are not all IPv4 addresses.

    Resource handling:
        The gRPC channel is closed when the block ends. Connecting is lazy: an etcd that is down makes `load`
        wait, not this call fail.
    """
    if loop is None:
        loop = trio_asyncio.current_loop.get(None)
    if loop is None:
        raise RuntimeError("open_etcd_backend: run it inside `async with trio_asyncio.open_loop():`")
    if not targets:
        raise ValueError("open_etcd_backend: targets must name at least one etcd (got none)")
    target = _channel_target(targets)

    async def connect() -> Any:
        return rpc.insecure_channel(target, options=_KEEPALIVE)

    channel = await loop.run_aio_coroutine(connect())
    backend = EtcdBackend(
        loop=loop,
        channel=channel,
        targets=tuple(targets),
        partition=partition,
        backoff=backoff,
        rng=random.Random() if rng is None else rng,
        replay=replay,
        history_limit=history_limit,
    )
    try:
        yield backend
    finally:
        # grpc.aio frees its per-process engine (bound to this loop) only once no channel object is left, and
        # until then its poller thread keeps scheduling callbacks on this loop. Close the channel, drop every
        # reference and collect now, while the loop is still open: freed later, the engine would call into a
        # closed loop ("Event loop is closed", raised inside whatever trio-asyncio loop is running then).
        backend._kv = backend._watch_stub = None
        with trio.CancelScope(shield=True), trio.move_on_after(REQUEST_TIMEOUT):
            await loop.run_aio_coroutine(channel.close())
        del channel, backend
        collect_frozen_too()
        with trio.CancelScope(shield=True):
            await trio.lowlevel.checkpoint()  # let callbacks already queued on the loop run while it is open


def collect_frozen_too() -> None:
    """Run a full collection that also reaches what was frozen (`gc.freeze`), then freeze the survivors again.

    A process that both runs projections and this backend (the test suite does) freezes what is alive after each
    projection (`aether.plane.collector`): a grpc.aio channel that was cyclic garbage then would never be
    collected, and grpc.aio's engine would stay bound to a loop that has closed. Where nothing is frozen (the
    registrar), this is `gc.collect()`.
    """
    frozen = gc.get_freeze_count() > 0
    if frozen:
        gc.unfreeze()
    gc.collect()
    if frozen:
        gc.freeze()
