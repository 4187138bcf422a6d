"""`aether controller`'s wiring: list/watch of the mesh's objects folded in memory by the core's reducers, the
leader election, and (while leading) the Gateway API status the core computes written back.

The fold is in memory, not a journal: the controller's only output is status, which the API server stores, and a
restarted controller recomputes it from a fresh list; a log would only replay what the list gives again.
One owner task holds the state and the objects as last seen (STYLE C9); the reflectors and the election send to it.
"""

from __future__ import annotations

import datetime
import functools
import logging
import time
from collections.abc import Callable

import attrs
import trio

from aether.controller.election import DEFAULT_TIMING, ElectionTiming
from aether.controller.instrumentation import SampledStatistics, observe_controller
from aether.controller.leader import (
    DEFAULT_LEASE,
    Leadership,
    LeadershipStatistics,
    LeaseName,
    serve_leader_election,
)
from aether.controller.status_diff import gateway_addresses
from aether.controller.status_queue import StatusQueue
from aether.controller.status_writer import write_status
from aether.core.events import Event
from aether.core.gateway import EDGE_CONTROLLER, GatewayProjector, ObjectStatus
from aether.core.reduce import fold_event
from aether.core.state import EMPTY_STATE, State
from aether.kube.access import CONTROLLER_QUERIES, STATUS_RESOURCES
from aether.kube.api import KubeClient
from aether.kube.convert import ObjectError, deletion_events, object_events, object_meta
from aether.kube.errors import KubeError
from aether.kube.resources import GATEWAY_CLASSES, GATEWAYS, SERVICES, JsonObject, ResourceType
from aether.kube.watch import (
    Deleted,
    Reflector,
    Resumed,
    Synced,
    Update,
    Upserted,
    WatchInterrupted,
    WatchQuery,
    serve_reflectors,
)
from aether.plane.collector import collector_deferred
from aether.telemetry import current_telemetry

__all__ = [
    "DEFAULT_RESYNC",
    "ControllerConfig",
    "ControllerStatistics",
    "RunningController",
    "serve_controller",
]

LOG = logging.getLogger("aether.controller")

SOURCE = "kubernetes"

DEFAULT_RESYNC = 300.0
"""Seconds between full reconciles without any change: a write that failed (or was refused) is tried again within
this, as controller-runtime's periodic resync does."""


DEFAULT_EDGE_SERVICE = ("aether-system", "aether-edge")
"""The edge's Service in `manifests/` (every Gateway of class `aether` is served behind it)."""


@attrs.frozen(kw_only=True)
class ControllerConfig:
    """How one replica runs."""

    identity: str
    """The Lease's `holderIdentity`: the pod name."""
    lease: LeaseName = DEFAULT_LEASE
    timing: ElectionTiming = DEFAULT_TIMING
    resync: float = DEFAULT_RESYNC
    edge_service: tuple[str, str] = DEFAULT_EDGE_SERVICE
    """`(namespace, name)` of the edge's LoadBalancer Service: its ingress addresses are our Gateways'."""


@attrs.frozen(kw_only=True)
class ControllerStatistics:
    """Counters of one replica."""

    leading: bool
    election: LeadershipStatistics
    reconciles: int
    """Passes over every object completed (after changes, each resync, each election)."""
    status_writes: int
    """Status writes issued (conflicted ones included)."""
    status_conflicts: int
    status_failures: int
    """Writes refused otherwise, or lost with the API."""
    objects: int
    """Gateway API objects known."""
    synced: bool
    """Every watch has listed once (status is written only from then on)."""


class _Controller:
    """The owner task's state: the folded State, the objects as last seen, and the leadership."""

    def __init__(
        self, client: KubeClient, config: ControllerConfig, *, queries: tuple[WatchQuery, ...]
    ) -> None:
        self._client = client
        self._config = config
        self._queries = queries
        self._unsynced = set(queries)
        self._state: State = EMPTY_STATE
        self._seq = 0
        self._projector = GatewayProjector()
        self._queue = StatusQueue()
        self._objects: dict[WatchQuery, dict[str, JsonObject]] = {query: {} for query in queries}
        self._resources = {query: query.resource for query in queries if query.resource in STATUS_RESOURCES}
        self._leading_until = float("-inf")
        self._dirty = False
        self._counts = {"reconciles": 0, "status_writes": 0, "status_conflicts": 0, "status_failures": 0}
        self.election: Callable[[], LeadershipStatistics] | None = None

    def statistics(self) -> ControllerStatistics:
        assert self.election is not None, "statistics before the election started (a bug)"
        return ControllerStatistics(
            leading=self._leading(),
            election=self.election(),
            objects=sum(len(self._objects[query]) for query in self._resources),
            synced=not self._unsynced,
            **self._counts,
        )

    def _leading(self) -> bool:
        return trio.current_time() < self._leading_until

    def owns_gateway(self, namespace: str, name: str) -> bool:
        """Whether the Gateway `namespace/name`, as this replica last saw it, is of a GatewayClass whose controllerName
        is ours (`gateway.aether.io/edge`); False for one it has not seen. Until every watch has listed once, every
        Gateway is claimed: with no view yet, the route webhook judges every route rather than let ours through."""
        if self._unsynced:
            return True
        gateway = self._seen(GATEWAYS, f"Gateway/{namespace}/{name}")
        class_name = ((gateway or {}).get("spec") or {}).get("gatewayClassName")
        gateway_class = self._seen(GATEWAY_CLASSES, f"GatewayClass//{class_name}") if class_name else None
        return ((gateway_class or {}).get("spec") or {}).get("controllerName") == EDGE_CONTROLLER

    def _gateway_addresses(self) -> list[dict[str, str]]:
        namespace, name = self._config.edge_service
        return gateway_addresses(self._seen(SERVICES, f"Service/{namespace}/{name}"))

    def _seen(self, resource: ResourceType, key: str) -> JsonObject | None:
        for query, objects in self._objects.items():
            if query.resource == resource and key in objects:
                return objects[key]
        return None

    def lead(self, leadership: Leadership) -> None:
        was = self._leading()
        self._leading_until = leadership.until if leadership.leading else float("-inf")
        if self._leading() and not was:
            self._dirty = True  # a new leader writes whatever the last one left behind
            self._queue.everything()

    def fold(self, query: WatchQuery, update: Update) -> None:
        """Fold one reflector update: the objects as seen, and the events into the state."""
        now = time.time_ns()
        objects = self._objects[query]
        events: list[Event] = []
        match update:
            case Synced(objects=listed):
                self._unsynced.discard(query)
                fresh = {key: obj for obj in listed if (key := self._key(obj)) is not None}
                for key in sorted(set(objects) - set(fresh)):
                    events += self._events(deletion_events, objects.pop(key), at=now)
                    self._queue.observed(key)
                for key, obj in fresh.items():
                    events += self._events(object_events, obj, at=now, known=key in objects)
                    objects[key] = obj
                    self._queue.observed(key)
            case Upserted(object=obj):
                key = self._key(obj)
                if key is not None:
                    events += self._events(object_events, obj, at=now, known=key in objects)
                    objects[key] = obj
                    self._queue.observed(key)
            case Deleted(object=obj):
                key = self._key(obj)
                if key is not None and objects.pop(key, None) is not None:
                    events += self._events(deletion_events, obj, at=now)
                    self._queue.observed(key)
            case WatchInterrupted() | Resumed():
                return
            case _:  # pragma: no cover - the type checker proves this unreachable
                raise AssertionError(f"reflector update {update!r}: unknown type (a bug)")
        for event in events:
            self._seq += 1
            self._state = fold_event(self._state, event, seq=self._seq)
        self._dirty = True

    def _key(self, obj: JsonObject) -> str | None:
        try:
            return object_meta(obj).key
        except ObjectError as error:
            LOG.warning("kubernetes object skipped: %s", error)
            return None

    def _events(
        self, convert: Callable[..., tuple[Event, ...]], obj: JsonObject, **options: object
    ) -> list[Event]:
        at = options.pop("at")
        try:
            return list(convert(obj, source=SOURCE, observed_at=at, **options))
        except ObjectError as error:
            LOG.warning("kubernetes object skipped: %s", error)
            return []

    async def reconcile(self, *, force: bool = False) -> None:
        """While leading and synced, write every status of ours that differs from the computed one: of the objects
        observed changed and those whose computed status changed (`StatusQueue`), of every object when forced."""
        if not (self._dirty or force) or self._unsynced or not self._leading():
            return
        self._dirty = False
        with collector_deferred():
            view = self._projector.view(self._state)
        if force:
            self._queue.everything()
        wanted = self._queue.take(view.status, self._projector.status_changes())
        for query, resource in self._resources.items():
            objects = self._objects[query]
            keys = objects if wanted is None else wanted.intersection(objects)
            for key in sorted(keys):
                await self._write(resource, objects, key, view.status.get(key))
        self._counts["reconciles"] += 1

    async def _write(
        self, resource: ResourceType, objects: dict[str, JsonObject], key: str, computed: ObjectStatus | None
    ) -> None:
        try:
            outcome = await write_status(
                self._client,
                resource,
                objects[key],
                computed,
                now=_now,
                may_write=self._leading,
                addresses=self._gateway_addresses() if resource == GATEWAYS else (),
            )
        except KubeError as error:
            self._counts["status_failures"] += 1
            self._queue.observed(key)
            LOG.warning("status of %s %s not written: %s", resource.kind, key, error)
            return
        self._counts["status_writes"] += outcome.writes
        self._counts["status_conflicts"] += outcome.conflicts
        objects[key] = outcome.latest


@attrs.frozen(kw_only=True)
class RunningController:
    """A started controller: its statistics."""

    statistics: Callable[[], ControllerStatistics]
    owns_gateway: Callable[[str, str], bool]
    """Whether a Gateway `(namespace, name)` is ours, by this replica's view (what the route webhook judges)."""


async def serve_controller(
    client: KubeClient,
    config: ControllerConfig,
    *,
    queries: tuple[WatchQuery, ...] = CONTROLLER_QUERIES,
    task_status: trio.TaskStatus[RunningController] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one controller replica until cancelled: watch, fold, take part in the election, write status when leading.

    Error handling: the reflectors retry lists and watches with backoff; a status write that fails is logged and
    tried again on the next change or resync; the election retries its Lease every retry period.
    """
    controller = _Controller(client, config, queries=queries)
    send, receive = trio.open_memory_channel[_Message](0)
    async with trio.open_nursery() as nursery:
        controller.election = await nursery.start(
            functools.partial(
                serve_leader_election,
                client,
                send.clone(),
                identity=config.identity,
                lease=config.lease,
                timing=config.timing,
            )
        )
        telemetry = current_telemetry()
        if telemetry.meter is not None:
            sampled = SampledStatistics(controller.statistics)
            nursery.start_soon(functools.partial(sampled.run))
            observe_controller(telemetry, sampled)
        reflectors = [Reflector(client, query) for query in queries]
        await nursery.start(serve_reflectors, reflectors, send)
        task_status.started(
            RunningController(statistics=controller.statistics, owns_gateway=controller.owns_gateway)
        )
        async with receive:
            await _own(controller, receive, resync=config.resync)


_Message = tuple[WatchQuery, Update] | Leadership
"""What the owner task receives: a reflector's update, or news of the election."""


async def _own(
    controller: _Controller, receive: trio.MemoryReceiveChannel[_Message], *, resync: float
) -> None:
    """The owner loop: take everything that arrived (updates, leadership), then reconcile once for all of it."""
    next_resync = trio.current_time() + resync
    while True:
        messages: list[_Message] = []
        with trio.move_on_at(next_resync):
            messages.append(await receive.receive())
        while True:
            try:
                messages.append(receive.receive_nowait())
            except trio.WouldBlock:
                break
        for message in messages:
            if isinstance(message, Leadership):
                controller.lead(message)
            else:
                controller.fold(*message)
        force = trio.current_time() >= next_resync
        if force:
            next_resync = trio.current_time() + resync
        await controller.reconcile(force=force)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
