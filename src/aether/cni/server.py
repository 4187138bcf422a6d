"""The agent's CNI service (`aether.cni.v1.CNIService`) over purerpc on `/run/aether/cni.sock`, and `serve_cni`.

What the plugin sends is what the runtime knows: the pod's name, namespace and UID (CNI_ARGS), its sandbox, network
namespace and IPs (the previous plugin's result), and its annotations when the runtime passes them. Labels and the
service account come from the agent's own view of the node's pods (a `PodLookup`, such as
`aether.agent.pod_lookup.StatePodLookup` over the pods a Kubernetes watch put in the log); a pod the lookup should
know but does not yet (it raises `PodNotKnown`) is answered UNAVAILABLE, so the runtime retries instead of starting the pod outside the mesh.
Without a lookup, or when it returns None, the request's own metadata is used. The agent then decides, with the core's rules, whether the pod
is managed: a managed pod is appended to the log as `PodAdded`, and the answer waits (at most `ack_wait` seconds)
until the node's proxy has ACKed the pod's listeners. The answer carries the capture settings of the pod's
`capture.aether.io/*` annotations, so the plugin programs exactly what the agent decided.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import purerpc
import trio
from google.protobuf.message import Message

from aether.cni.api import METHODS, SERVICE_NAME
from aether.cni.capture import settings_from_annotations
from aether.core.events.base import Event
from aether.core.events.pods import Pod, PodAdded, PodRemoved
from aether.core.listener_acks import ListenersStatus, listeners_verdict
from aether.core.reduce.admission import PodVerdict, admit_pod
from aether.core.snapshot import LISTENER_TYPE
from aether.core.state import State
from aether.core.values import EMPTY_STR_MAP, StrMap, freeze_str_map
from aether.plane.journal import Journal
from aether.proto.cni.v1 import cni_pb2
from aether.rpc.listen import ListenAddress, serve_grpc
from aether.sync import LatestValue
from aether.xds.cache import SnapshotCache

__all__ = [
    "ACK_WAIT",
    "FOLD_WAIT",
    "SOURCE",
    "CniServer",
    "CniServerStatistics",
    "PodLookup",
    "PodMetadata",
    "PodNotKnown",
]

LOG = logging.getLogger("aether.cni")

SOURCE = "cni"
"""The `source` of the events this service appends."""

ACK_WAIT = 2.0
"""Seconds AddPod waits for the proxy to ACK the pod's listeners. A local Envoy ACKs in milliseconds; past this the
pod starts anyway (its rules are programmed, and the listeners follow), as a stuck proxy must not block pod starts."""

FOLD_WAIT = 10.0
"""Seconds a handler waits for its event to be folded: an fsync takes milliseconds; a log that takes longer is
stuck, and the plugin is told to retry rather than left hanging."""


@attrs.frozen(kw_only=True)
class PodMetadata:
    """What the agent knows of a pod from the Kubernetes API: the metadata the CNI runtime cannot pass."""

    uid: str = ""
    service_account: str = "default"
    labels: StrMap = attrs.field(default=EMPTY_STR_MAP, converter=freeze_str_map)
    annotations: StrMap = attrs.field(default=EMPTY_STR_MAP, converter=freeze_str_map)


PodLookup = Callable[[str, str], PodMetadata | None]
"""`(namespace, name)` to the pod's metadata; None: no opinion (the request's metadata is used). It raises
`PodNotKnown` for a pod it should know but does not yet. It must not block (it reads a cache)."""


class PodNotKnown(Exception):
    """A `PodLookup` does not know the pod yet (its watch trails the runtime): the plugin is told to retry."""

    def __init__(self, namespace: str, name: str, *, reason: str) -> None:
        super().__init__(namespace, name, reason)
        self.namespace = namespace
        self.name = name
        self.reason = reason

    def __str__(self) -> str:
        return f"pod '{self.namespace}/{self.name}' is not known to the agent yet ({self.reason}); retry"


@attrs.frozen(kw_only=True)
class CniServerStatistics:
    """Counters of a `CniServer`."""

    added: int
    """AddPod calls that registered (or re-confirmed) a managed pod."""
    ignored: int
    refused: int
    removed: int
    acked: int
    """AddPod answers given after the proxy's ACK."""
    ack_timeouts: int
    """AddPod answers given when `ack_wait` ran out first."""


class _Refused(Exception):
    """The request is about a pod the agent cannot take: answered RESULT_ERROR with the message."""


class CniServer:
    """The CNI service of one agent: decides, appends pod events, waits for the proxy.

    Args:
        journal: The node's journal (events go in through its sender; state is read from it).
        cache: The node's snapshot cache (to know which listener version holds the pod).
        node_name: The node id of the node's proxy.
        pods: The agent's pod metadata; None: trust the request's.
        ack_wait: Seconds to wait for the proxy's ACK of a new pod's listeners.
        clock: Nanoseconds since the epoch, for `observed_at`.
    """

    def __init__(
        self,
        *,
        journal: Journal,
        cache: SnapshotCache,
        node_name: str,
        pods: PodLookup | None = None,
        ack_wait: float = ACK_WAIT,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._journal = journal
        self._cache = cache
        self._node_name = node_name
        self._pods = pods
        self._ack_wait = ack_wait
        self._clock = clock
        self._folded: LatestValue[tuple[State, int]] = LatestValue((journal.state, 0))
        """`(state, now)` of the journal's latest fold, a new tuple each fold (even one that left the state as it
        was: the projection may still change): requests wait on it for their change to be folded and ACKed."""
        self._send: trio.MemorySendChannel[Event] | None = None
        self._added = self._ignored = self._refused = self._removed = self._acked = self._ack_timeouts = 0
        journal.subscribe(self._state_changed)

    def statistics(self) -> CniServerStatistics:
        """Return the service's counters."""
        return CniServerStatistics(
            added=self._added,
            ignored=self._ignored,
            refused=self._refused,
            removed=self._removed,
            acked=self._acked,
            ack_timeouts=self._ack_timeouts,
        )

    def _state_changed(self, state: State, now: int) -> None:
        self._folded.set((state, now))

    async def _wait_until(self, condition: Callable[[], bool]) -> None:
        with trio.move_on_after(FOLD_WAIT) as scope:
            await self._folded.wait_value(lambda _fold: condition())
        if scope.cancelled_caught:
            raise purerpc.UnavailableError(
                f"the agent's log did not fold the change within {FOLD_WAIT} s; retry"
            )

    async def _append(self, event: Event) -> None:
        if self._send is None:
            raise purerpc.UnavailableError("the agent's CNI service is not started yet; retry")
        try:
            await self._send.send(event)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise purerpc.UnavailableError("the agent is shutting down; retry") from None

    def _pod(self, message: cni_pb2.CNIPod) -> Pod:
        """Merge the request with the agent's metadata of the pod; raise `_Refused` when it names no pod."""
        if not message.namespace or not message.name or not message.container_id:
            raise _Refused(
                "the pod must have a namespace, a name and a container id"
                f" (got {message.namespace!r}, {message.name!r}, {message.container_id!r})"
            )
        try:
            known = self._pods(message.namespace, message.name) if self._pods is not None else None
        except PodNotKnown as exc:
            raise purerpc.UnavailableError(str(exc)) from exc
        metadata = known or PodMetadata(
            uid=message.uid,
            service_account=message.service_account or "default",
            labels=dict(message.labels),
            annotations=dict(message.annotations),
        )
        return Pod(
            namespace=message.namespace,
            name=message.name,
            uid=message.uid or metadata.uid,
            node_name=self._node_name,
            service_account=metadata.service_account,
            labels=metadata.labels,
            annotations={**message.annotations, **metadata.annotations},
            ips=tuple(message.ips),
            netns=message.network_namespace,
            container_id=message.container_id,
        )

    async def _add(self, request: cni_pb2.AddPodRequest) -> cni_pb2.AddPodResponse:
        try:
            pod = self._pod(request.pod)
            admission = admit_pod(pod)  # the reducer's own verdict: what it will fold
            if admission.verdict is PodVerdict.NOT_MANAGED:
                self._ignored += 1
                return cni_pb2.AddPodResponse(result=cni_pb2.RESULT_IGNORED, message=admission.message)
            if admission.verdict is not PodVerdict.ADMITTED:
                raise _Refused(admission.message)
        except _Refused as exc:
            self._refused += 1
            return cni_pb2.AddPodResponse(result=cni_pb2.RESULT_ERROR, message=str(exc))
        record = self._journal.state.pods.get(pod.key)
        if record is None or record.pod != pod:  # an equal re-ADD appends nothing: ADD is idempotent
            await self._append(PodAdded(observed_at=self._clock(), source=SOURCE, pod=pod))
        settings, warnings = settings_from_annotations(pod.annotations)
        self._added += 1
        acked = False
        nacked = ""
        with trio.move_on_after(self._ack_wait):
            await self._wait_until(lambda: self._journal.state.pods.get(pod.key, None) is not None)
            nacked = await self._wait_listeners(pod)
            acked = not nacked
        if nacked:
            self._refused += 1
            return cni_pb2.AddPodResponse(
                result=cni_pb2.RESULT_ERROR,
                message=f"pod {pod.key!r}: the node's proxy rejected its listeners: {nacked}",
            )
        if acked:
            self._acked += 1
        else:
            self._ack_timeouts += 1
            LOG.warning("pod %r: the proxy did not ACK its listeners within %s s", pod.key, self._ack_wait)
        return cni_pb2.AddPodResponse(
            result=cni_pb2.RESULT_SUCCESS,
            capture=settings.to_proto(),
            listeners_acked=acked,
            warnings=list(warnings),
        )

    async def _wait_listeners(self, pod: Pod) -> str:
        """Wait until the proxy ACKed a listener version holding all of `pod`'s listeners; return a NACK's error."""
        key = (self._node_name, LISTENER_TYPE)
        while True:
            folded = self._folded.value
            snapshot = self._cache.get(self._node_name)
            feedback = self._journal.state.feedback.streams.get(key)
            verdict = listeners_verdict(pod, snapshot=snapshot, feedback=feedback)
            if verdict.status is not ListenersStatus.WAITING:
                return verdict.error
            await self._folded.wait_changed(folded)

    async def _remove(self, request: cni_pb2.RemovePodRequest) -> cni_pb2.RemovePodResponse:
        key = f"{request.namespace}/{request.name}"
        record = self._journal.state.pods.get(key)
        if record is None or (request.container_id and record.pod.container_id != request.container_id):
            # DEL is idempotent, and a DEL of an older sandbox must not remove the pod's newer one.
            return cni_pb2.RemovePodResponse(result=cni_pb2.RESULT_SUCCESS, message="not registered")
        await self._append(
            PodRemoved(
                observed_at=self._clock(),
                source=SOURCE,
                namespace=request.namespace,
                name=request.name,
                uid=record.pod.uid,
            )
        )
        await self._wait_until(lambda: self._journal.state.pods.get(key) is not record)
        self._removed += 1
        return cni_pb2.RemovePodResponse(result=cni_pb2.RESULT_SUCCESS)

    async def _check(self, request: cni_pb2.CheckPodRequest) -> cni_pb2.CheckPodResponse:
        await trio.lowlevel.checkpoint()
        try:
            pod = self._pod(request.pod)
        except _Refused as exc:
            return cni_pb2.CheckPodResponse(result=cni_pb2.RESULT_ERROR, message=str(exc))
        admission = admit_pod(pod)
        if admission.verdict is PodVerdict.NOT_MANAGED:
            return cni_pb2.CheckPodResponse(result=cni_pb2.RESULT_IGNORED, message=admission.message)
        record = self._journal.state.pods.get(pod.key)
        if record is None or record.pod.container_id != pod.container_id:
            registered = "nothing" if record is None else f"container {record.pod.container_id!r}"
            return cni_pb2.CheckPodResponse(
                result=cni_pb2.RESULT_ERROR,
                message=f"pod {pod.key!r}: not registered for container {pod.container_id!r}"
                f" (the agent has {registered})",
            )
        settings, _warnings = settings_from_annotations(pod.annotations)
        return cni_pb2.CheckPodResponse(result=cni_pb2.RESULT_SUCCESS, capture=settings.to_proto())

    async def _collect(self, request: cni_pb2.CollectGarbageRequest) -> cni_pb2.CollectGarbageResponse:
        valid = set(request.valid_container_ids)
        stale = sorted(
            (key, record.pod.uid)
            for key, record in self._journal.state.pods.items()
            if record.pod.container_id and record.pod.container_id not in valid
        )
        for key, uid in stale:
            namespace, name = key.split("/", 1)
            await self._append(
                PodRemoved(observed_at=self._clock(), source=SOURCE, namespace=namespace, name=name, uid=uid)
            )
        keys = [key for key, _uid in stale]
        await self._wait_until(lambda: not any(key in self._journal.state.pods for key in keys))
        self._removed += len(keys)
        return cni_pb2.CollectGarbageResponse(removed_pods=keys)

    async def _status(self, request: cni_pb2.StatusRequest) -> cni_pb2.StatusResponse:
        await trio.lowlevel.checkpoint()
        if self._send is None:
            raise purerpc.UnavailableError("the agent's CNI service is not started yet; retry")
        state = self._journal.state
        return cni_pb2.StatusResponse(seq=state.seq, pods=len(state.pods))

    def _handlers(self) -> dict[str, Callable[[Any], Awaitable[Message]]]:
        return {
            "AddPod": self._add,
            "RemovePod": self._remove,
            "CheckPod": self._check,
            "CollectGarbage": self._collect,
            "Status": self._status,
        }

    def service(self) -> purerpc.Service:
        """Return the purerpc service definition (every method unary)."""
        service = purerpc.Service(SERVICE_NAME)
        handlers = self._handlers()
        for method, (request_type, response_type) in METHODS.items():
            signature = purerpc.RPCSignature(purerpc.Cardinality.UNARY_UNARY, request_type, response_type)
            service.add_method(method, handlers[method], signature)
        return service

    async def handle(self, method: str, request: Message) -> Message:
        """Answer one call in-process, as the gRPC service would (`aether.cni.plugin.LocalChannel`).

        Raises:
            purerpc.GRPCError: what the gRPC service answers with a status (UNAVAILABLE: retry).
        """
        request_type, _response_type = METHODS[method]
        assert isinstance(request, request_type), f"{method} takes {request_type.__name__}; this is a bug"
        return await self._handlers()[method](request)

    async def serve(
        self, *, socket: Path, task_status: trio.TaskStatus[ListenAddress] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve the service on the Unix socket `socket` until cancelled (see `aether.rpc.listen.serve_grpc`)."""
        async with self._journal.sender() as send:
            self._send = send
            try:
                await serve_grpc([self.service()], listen=ListenAddress.unix(socket), task_status=task_status)
            finally:
                self._send = None
