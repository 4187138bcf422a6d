"""What the xDS server tells the telemetry: pushes, their ACK or NACK (latency and trace), on-demand requests, and
how many proxies stand in each sync state.

One `StreamTelemetry` per stream remembers the responses it sent by nonce (at most `_PENDING` of them: a response
never answered is forgotten, and its span ended as unanswered), so each ACK or NACK finds its push.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from typing import Any

from aether.core.events import Event
from aether.core.events.xds import OnDemandClusterRequested, ResourceAcked, ResourceNacked
from aether.core.snapshot import SHORT_NAMES
from aether.telemetry import ChangeTracer, PushTrace, Telemetry, XdsMetrics, change_tracer, observe
from aether.xds.protocol import StreamMachine, TypeStatus

__all__ = ["StreamTelemetry", "XdsTelemetry"]

_PENDING = 64
"""Responses awaiting an answer remembered per stream (a stream has at most one per type in flight)."""

_WORST_FIRST = (TypeStatus.NACKED, TypeStatus.STALE, TypeStatus.NOT_SENT, TypeStatus.SYNCED)


def _short(type_url: str) -> str:
    return SHORT_NAMES.get(type_url, type_url)


class XdsTelemetry:
    """The server's instruments and tracer; `stream()` makes the recorder of one stream."""

    def __init__(self, telemetry: Telemetry, *, machines: Callable[[], Iterable[StreamMachine]]) -> None:
        self.metrics = XdsMetrics.of(telemetry)
        self.tracer: ChangeTracer | None = change_tracer(telemetry)
        self.enabled = self.metrics.recording or self.tracer is not None
        self._machines = machines
        observe(
            telemetry,
            "aether.xds.proxies",
            self._proxies,
            unit="{proxy}",
            description="Connected xDS streams by sync state (their least synced type)",
        )

    def _proxies(self) -> list[tuple[int, dict[str, str]]]:
        # Runs on the metric reader's thread while trio's owns the machines: read a copy, skip a torn read.
        try:
            rows = [machine.sync_states() for machine in list(self._machines())]
        except RuntimeError:
            return []
        counts = collections.Counter(
            next((state for state in _WORST_FIRST if state in states), TypeStatus.NOT_SENT) for states in rows
        )
        return [(counts.get(state, 0), {"aether.xds.sync_state": state.value}) for state in _WORST_FIRST]

    def stream(self) -> StreamTelemetry:
        return StreamTelemetry(self)


class StreamTelemetry:
    """Records one stream's pushes and the feedback that answers them."""

    def __init__(self, owner: XdsTelemetry) -> None:
        self._metrics = owner.metrics
        self._tracer = owner.tracer
        self._pending: collections.OrderedDict[str, tuple[float, str, PushTrace | None]] = (
            collections.OrderedDict()
        )
        self.seq = 0
        """The seq of the last snapshot the stream was given: the change its pushes belong to."""

    def sent(self, response: Any, *, node_id: str) -> None:
        type_name = _short(response.type_url)
        self._metrics.pushes.add(1, {"aether.xds.type": type_name})
        trace = None
        if self._tracer is not None:
            version = getattr(response, "version_info", "") or getattr(response, "system_version_info", "")
            trace = self._tracer.start_push(
                seq=self.seq, node_id=node_id, type_name=type_name, version=version, nonce=response.nonce
            )
        self._pending[response.nonce] = (time.perf_counter(), type_name, trace)
        while len(self._pending) > _PENDING:
            _, (_, _, forgotten) = self._pending.popitem(last=False)
            if forgotten is not None:
                forgotten.superseded()

    def feedback(self, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, ResourceAcked | ResourceNacked):
                self._answered(event)
            elif isinstance(event, OnDemandClusterRequested):
                self._metrics.on_demand.add(1)

    def _answered(self, event: ResourceAcked | ResourceNacked) -> None:
        pending = self._pending.pop(event.nonce, None)
        acked = isinstance(event, ResourceAcked)
        type_name = _short(event.type_url)
        if not acked:
            self._metrics.nacks.add(1, {"aether.xds.type": type_name})
        if pending is None:
            return
        sent_at, _, trace = pending
        self._metrics.push_ack_duration.record(
            time.perf_counter() - sent_at,
            {"aether.xds.type": type_name, "aether.xds.outcome": "ack" if acked else "nack"},
        )
        if trace is not None:
            trace.answered(
                acked=acked, error=event.error_message if isinstance(event, ResourceNacked) else ""
            )

    def ended(self) -> None:
        for _, _, trace in self._pending.values():
            if trace is not None:
                trace.superseded()
        self._pending.clear()
