"""One trace per change through the engine, hop by hop:

    aether.change (a journal batch: seqs first..last)
    ├── aether.event <Kind>     one per event, with its log seq, source and subject
    ├── aether.log.commit       append + fsync
    ├── aether.fold
    ├── aether.project          the projection and publication of the snapshot at the batch's last seq
    └── aether.xds.push <TYPE>  one per response sent from that snapshot, until its ACK or NACK
        └── aether.xds.ack | aether.xds.nack

A batch made only of ACKs starts no trace (its ACKs already end the pushes' spans); a NACK's batch does (it
changes what the node is told, e.g. a status).

The journal's batch and the xDS server's pushes run in different tasks; they meet at the snapshot's seq: the change
registers its context under the seq it folded to (`ChangeTracer.context_at`), and a push made from a snapshot at
that seq becomes its child. Both maps are bounded (the oldest entries are forgotten): a trace may lose its tail,
memory never grows.

With tracing off, adapters hold None instead of a `ChangeTracer` and pay one `is None` test.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from typing import Any

from aether.telemetry.runtime import Telemetry

__all__ = ["ChangeTrace", "ChangeTracer", "PushTrace", "change_tracer"]

_REMEMBERED = 256
"""Changes and pushes remembered for their children: plenty for the pushes that follow one change."""


def change_tracer(telemetry: Telemetry) -> ChangeTracer | None:
    """The tracer of `telemetry`'s changes (one per telemetry: the journal and the xDS server meet in it), or None
    when traces are off."""
    if telemetry.tracer is None:
        return None
    if telemetry.changes is None:
        telemetry.changes = ChangeTracer(telemetry.tracer)
    tracer: ChangeTracer = telemetry.changes
    return tracer


class ChangeTrace:
    """The root span of one journal batch; its hops are added as timed children."""

    def __init__(self, tracer: Any, root: Any, context: Any) -> None:
        self._tracer = tracer
        self.root = root
        self.context = context

    def hop(self, name: str, *, start: int, end: int, attributes: dict[str, Any] | None = None) -> None:
        """Record a finished child span from `start` to `end` (ns since the epoch)."""
        span = self._tracer.start_span(name, context=self.context, start_time=start, attributes=attributes)
        span.end(end_time=end)

    def end(self) -> None:
        self.root.end()


class PushTrace:
    """An xDS response sent, waiting for its ACK or NACK."""

    def __init__(self, tracer: Any, span: Any) -> None:
        self._tracer = tracer
        self.span = span

    def answered(self, *, acked: bool, error: str = "") -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        context = trace.set_span_in_context(self.span)
        name = "aether.xds.ack" if acked else "aether.xds.nack"
        child = self._tracer.start_span(
            name, context=context, attributes={"aether.xds.error": error} if error else None
        )
        if not acked:
            child.set_status(Status(StatusCode.ERROR, error))
            self.span.set_status(Status(StatusCode.ERROR, error))
        child.end()
        self.span.set_attribute("aether.xds.outcome", "ack" if acked else "nack")
        self.span.end()

    def superseded(self) -> None:
        self.span.set_attribute("aether.xds.outcome", "unanswered")
        self.span.end()


class ChangeTracer:
    """Starts change traces (the journal) and push spans (the xDS server) and links them by seq."""

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer
        self._by_seq: collections.OrderedDict[int, Any] = collections.OrderedDict()

    def start_change(
        self, *, first_seq: int, last_seq: int, events: Sequence[tuple[int, Any]], start: int
    ) -> ChangeTrace:
        """Start the root of the batch that appended `events` (`(seq, event)`), with one span per event."""
        from opentelemetry import trace

        root = self._tracer.start_span(
            "aether.change",
            context=None,
            start_time=start,
            attributes={
                "aether.log.seq.first": first_seq,
                "aether.log.seq.last": last_seq,
                "aether.events": len(events),
            },
        )
        context = trace.set_span_in_context(root)
        change = ChangeTrace(self._tracer, root, context)
        if root.is_recording():
            for seq, event in events:
                change.hop(
                    f"aether.event {type(event).__name__}",
                    start=event.observed_at,
                    end=start,
                    attributes={
                        "aether.log.seq": seq,
                        "aether.event.kind": type(event).__name__,
                        "aether.event.source": event.source,
                        "aether.event.subject": event.subject,
                    },
                )
        self._by_seq[last_seq] = context
        while len(self._by_seq) > _REMEMBERED:
            self._by_seq.popitem(last=False)
        return change

    def start_push(self, *, seq: int, node_id: str, type_name: str, version: str, nonce: str) -> PushTrace:
        """Start the span of one response sent from the snapshot at `seq` (a child of its change, if remembered)."""
        span = self._tracer.start_span(
            f"aether.xds.push {type_name}",
            context=self._by_seq.get(seq),
            start_time=time.time_ns(),
            attributes={
                "aether.log.seq": seq,
                "aether.xds.node": node_id,
                "aether.xds.type": type_name,
                "aether.xds.version": version,
                "aether.xds.nonce": nonce,
            },
        )
        return PushTrace(self._tracer, span)
