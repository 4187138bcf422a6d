"""The registration sink: keeps the registrar's record of this node's endpoints equal to the node's pods.

The intents are pure (`aether.core.project.registrations.local_endpoints`); this module only does the calls.
After each fold the journal hands the sink its new state; the sink computes the intents and, when they differ from
what it last registered, wakes its task, which sends the difference: `RegisterEndpoint` for a new or changed
endpoint, `UnregisterEndpoint` for one that left.

On every (re)connect the sink first asks the registrar what it holds for this node (`ListAllEndpoints`) and
unregisters what the intents no longer contain: endpoints registered before an agent restart, for pods that left
while the agent was down, would otherwise stay in the mesh forever. Then it registers every intent again (an equal
registration changes nothing on the registrar), so a registrar that lost its store is refilled.

A failed call is logged and retried after a jittered backoff; the intents are recomputed from the latest state,
so nothing queued goes stale and no registration is lost while the registrar is away.
"""

from __future__ import annotations

import logging
import random
import ssl
from typing import Any

import attrs
import trio

from aether.core.events.registry import Endpoint, EndpointKey
from aether.core.project.registrations import local_endpoints, registration_diff, unwanted_ips
from aether.core.state import State
from aether.proto.registrar.v1 import registrar_pb2
from aether.registrar.convert import registration_to_proto
from aether.registrar.server import SERVICE_NAME
from aether.rpc.backoff import DEFAULT_BACKOFF, Backoff
from aether.rpc.calls import CONNECTION_ERRORS, open_grpc_socket, unary_call
from aether.rpc.listen import ListenAddress
from aether.sync import LatestValue
from aether.telemetry import client_span, current_telemetry

__all__ = ["RegistrationStatistics", "Registrations", "serve_registrations"]

LOG = logging.getLogger("aether.agent.registration")

_RESPONSES: dict[str, type[Any]] = {
    "RegisterEndpoint": registrar_pb2.RegisterEndpointResponse,
    "UnregisterEndpoint": registrar_pb2.UnregisterEndpointResponse,
    "ListAllEndpoints": registrar_pb2.ListAllEndpointsResponse,
}


@attrs.frozen(kw_only=True)
class RegistrationStatistics:
    """What the sink has done."""

    wanted: int
    """Endpoints the node's state says it should have registered."""
    registered: int
    """Endpoints the registrar confirmed (as of the last successful call)."""
    in_sync: bool
    """True when the registrar holds exactly the wanted endpoints (as far as this agent knows)."""
    calls: int
    failures: int


class Registrations:
    """Registers the node's endpoints with the registrar; `update(state)` after each fold, `serve()` in a task."""

    def __init__(
        self,
        *,
        target: ListenAddress,
        node_name: str,
        cluster_name: str,
        backoff: Backoff = DEFAULT_BACKOFF,
        rng: random.Random | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._target = target
        self._tls = tls
        self._node_name = node_name
        self._cluster_name = cluster_name
        self._backoff = backoff
        self._rng = random.Random() if rng is None else rng
        self._intents: LatestValue[dict[EndpointKey, Endpoint]] = LatestValue({})
        """The endpoints the node's state wants registered, replaced (never changed in place) when they change."""
        self._inputs: tuple[object, object] | None = None
        """The `state.pods` and `state.captured_nodes` the intents were last computed from (compared by
        identity)."""
        self._registered: dict[EndpointKey, Endpoint] = {}
        self._calls = 0
        self._tracer = current_telemetry().tracer
        self._failures = 0
        self._restart = trio.CancelScope()
        """The current session's scope: `reconnect` cancels it."""

    def update(self, state: State, now: int = 0) -> None:
        """Take the intents of `state` (a journal subscriber: `now` is unused).

        The intents depend on the pods and the node's capture alone: a batch that left both the same objects
        (ACKs, registry changes, most of what the journal folds) costs two identity checks.
        """
        inputs = self._inputs
        if inputs is not None and state.pods is inputs[0] and state.captured_nodes is inputs[1]:
            return
        self._inputs = (state.pods, state.captured_nodes)
        wanted = local_endpoints(state, node_name=self._node_name, cluster_name=self._cluster_name)
        if wanted != self._wanted:
            self._intents.set(wanted)

    @property
    def _wanted(self) -> dict[EndpointKey, Endpoint]:
        return self._intents.value

    def statistics(self) -> RegistrationStatistics:
        """Return the sink's counters."""
        return RegistrationStatistics(
            wanted=len(self._wanted),
            registered=len(self._registered),
            in_sync=self._registered == self._wanted,
            calls=self._calls,
            failures=self._failures,
        )

    def reconnect(self) -> None:
        """Drop the connection and dial again at once (the TLS context's trust changed: the open connection was
        verified with the old one); the new session reconciles from a fresh listing, as every session does."""
        self._restart.cancel()

    async def serve(self) -> None:
        """Reconcile until cancelled, reconnecting after failures."""
        failures = 0
        while True:
            with trio.CancelScope() as self._restart:
                try:
                    await self._session()
                except CONNECTION_ERRORS as exc:
                    failures += 1
                    self._failures += 1
                    delay = self._backoff.delay(failures, rng=self._rng)
                    LOG.warning(
                        "registration with the registrar at %s failed (%s); retrying in %.1f s",
                        self._target,
                        exc,
                        delay,
                    )
                    await trio.sleep(delay)

    async def _session(self) -> None:
        """One connection: drop what the registrar holds for this node beyond the intents, then follow them."""
        async with open_grpc_socket(self._target, tls=self._tls) as grpc_socket:
            scheme = "http" if self._tls is None else "https"

            async def call(method: str, request: Any) -> Any:
                self._calls += 1
                with client_span(self._tracer, f"aether.registrar.call {method}") as metadata:
                    return await unary_call(
                        grpc_socket,
                        service=SERVICE_NAME,
                        method=method,
                        request=request,
                        response_type=_RESPONSES[method],
                        scheme=scheme,
                        authority=str(self._target),
                        metadata=metadata,
                    )

            listing = await call("ListAllEndpoints", registrar_pb2.ListAllEndpointsRequest())
            self._registered = {}
            stale: dict[str, list[str]] = {}
            for service, group in sorted(listing.services.items()):
                for endpoint in group.endpoints:
                    if endpoint.kubernetes_metadata.node_name == self._node_name:
                        stale.setdefault(service, []).append(endpoint.ip)
            for service, ips in sorted(stale.items()):
                gone = unwanted_ips(service, ips, wanted=self._wanted)
                if gone:
                    await call(
                        "UnregisterEndpoint",
                        registrar_pb2.UnregisterEndpointRequest(service_name=service, ips=gone),
                    )
            while True:
                reconciled = self._wanted
                await self._reconcile(call)
                await self._intents.wait_changed(reconciled)

    async def _reconcile(self, call: Any) -> None:
        wanted = self._wanted
        diff = registration_diff(self._registered, wanted)
        # Each call is recorded as it succeeds: a failure leaves `_registered` true to what the registrar holds.
        for key in diff.unregister:
            request = registrar_pb2.UnregisterEndpointRequest(service_name=key[0], ips=[key[2]])
            await call("UnregisterEndpoint", request)
            del self._registered[key]
        for endpoint in diff.register:
            await call("RegisterEndpoint", registration_to_proto(endpoint))
            self._registered[endpoint.key] = endpoint


async def serve_registrations(
    *,
    target: ListenAddress,
    node_name: str,
    cluster_name: str,
    backoff: Backoff = DEFAULT_BACKOFF,
    tls: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[Registrations] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a `Registrations` sink until cancelled; `task_status.started` receives it (subscribe its `update`).

    With `tls`, it connects over mTLS (the registrar accepts a node's endpoints only from that node's agent).
    """
    sink = Registrations(
        target=target, node_name=node_name, cluster_name=cluster_name, backoff=backoff, tls=tls
    )
    task_status.started(sink)
    await sink.serve()
