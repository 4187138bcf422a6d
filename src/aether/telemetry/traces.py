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

With tracing off, adapters hold None instead of a `ChangeTracer` and pay one `is None` test. With it on, spans are
our light tracer's tuples (`aether.telemetry.spans`); a change left out by the sampler is remembered as such, so its
pushes are left out too (parent-based sampling).
"""

from __future__ import annotations

import collections
import contextlib
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from aether.telemetry.runtime import Telemetry

if TYPE_CHECKING:  # the tracer's module loads the exporter (and the SDK): only when tracing is on
    from aether.telemetry.spans import Tracer

__all__ = [
    "TRACEPARENT",
    "ChangeTrace",
    "ChangeTracer",
    "PushTrace",
    "RemoteParent",
    "change_tracer",
    "client_span",
    "parse_traceparent",
    "record_remote",
    "record_span",
]

TRACEPARENT = "traceparent"
"""W3C Trace Context's header, carried in gRPC metadata: `00-<trace id, 32 hex>-<parent id, 16 hex>-<flags>`."""

_REMEMBERED = 256
"""Changes and pushes remembered for their children: plenty for the pushes that follow one change."""

_UNSAMPLED = (0, 0)
"""The parent remembered for a change the sampler left out."""


def change_tracer(telemetry: Telemetry) -> ChangeTracer | None:
    """The tracer of `telemetry`'s changes (one per telemetry: the journal and the xDS server meet in it), or None
    when traces are off."""
    if telemetry.tracer is None:
        return None
    if telemetry.changes is None:
        telemetry.changes = ChangeTracer(telemetry.tracer)
    tracer: ChangeTracer = telemetry.changes
    return tracer


def record_span(
    tracer: Tracer,
    name: str,
    *,
    start: int,
    end: int,
    attributes: dict[str, Any] | None = None,
    error: str | None = None,
    parent: tuple[int, int] | None = None,
) -> tuple[int, int] | None:
    """Record one finished span: a root (sampled by ratio) or, with `parent` (`(trace_id, span_id)`), its child.
    Return its `(trace_id, span_id)` for children of its own, or None when the sampler left the root out."""
    if parent is None:
        trace_id, parent_id = tracer.new_trace() or 0, 0
        if not trace_id:
            return None
    else:
        trace_id, parent_id = parent
    span_id = tracer.new_id()
    tracer.emit((trace_id, span_id, parent_id, name, start, end, attributes, error))
    return trace_id, span_id


_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


@attrs.frozen
class RemoteParent:
    """A caller's span, from its `traceparent`: the parent of what we do for it (nothing when not sampled)."""

    trace_id: int
    span_id: int
    sampled: bool


def parse_traceparent(metadata: Iterable[tuple[str, Any]]) -> RemoteParent | None:
    """The caller's span in gRPC `metadata`, or None without a valid `traceparent` (a malformed one is ignored,
    as Trace Context says: the call goes on, traced as a root of its own)."""
    for key, value in metadata:
        if key != TRACEPARENT:
            continue
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
        match = _TRACEPARENT.fullmatch(text.strip())
        if match is None:
            return None
        trace_id, span_id = int(match.group(1), 16), int(match.group(2), 16)
        if not trace_id or not span_id:
            return None
        return RemoteParent(trace_id=trace_id, span_id=span_id, sampled=bool(int(match.group(3), 16) & 1))
    return None


@contextlib.contextmanager
def client_span(
    tracer: Tracer | None, name: str, attributes: dict[str, Any] | None = None
) -> Iterator[tuple[tuple[str, str], ...]]:
    """Time the block as one root span (a call we make) and yield the gRPC metadata that carries it to the
    callee (`traceparent`; an unsampled call carries its flags too, so the callee leaves it out as well). An
    exception out of the block fails the span with its text."""
    if tracer is None:
        yield ()
        return
    trace_id = tracer.new_trace()
    span_id = tracer.new_id()
    if trace_id is None:
        unsampled = (tracer.new_id() << 64) | tracer.new_id()
        yield ((TRACEPARENT, f"00-{unsampled:032x}-{span_id:016x}-00"),)
        return
    start = time.time_ns()
    error = None
    try:
        yield ((TRACEPARENT, f"00-{trace_id:032x}-{span_id:016x}-01"),)
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        tracer.emit((trace_id, span_id, 0, name, start, time.time_ns(), attributes, error))


def record_remote(
    tracer: Tracer,
    parent: RemoteParent | None,
    name: str,
    *,
    start: int,
    end: int,
    attributes: dict[str, Any] | None = None,
    error: str | None = None,
) -> tuple[int, int] | None:
    """Record the span of work done for a caller: a child of its `parent` span (left out when the caller's was
    not sampled), or a root (sampled by ratio) without one. Return its ids for children of its own."""
    if parent is not None and not parent.sampled:
        return None
    return record_span(
        tracer,
        name,
        start=start,
        end=end,
        attributes=attributes,
        error=error,
        parent=None if parent is None else (parent.trace_id, parent.span_id),
    )


class ChangeTrace:
    """The root span of one journal batch; its hops are added as timed children (nothing when not sampled)."""

    __slots__ = ("_attributes", "_emit", "_new_id", "_start", "span_id", "trace_id")

    def __init__(self, tracer: Tracer, trace_id: int, *, start: int, attributes: dict[str, Any]) -> None:
        self._emit = tracer.emit
        self._new_id = tracer.new_id
        self.trace_id = trace_id
        self.span_id = tracer.new_id() if trace_id else 0
        self._start = start
        self._attributes = attributes

    def hop(self, name: str, *, start: int, end: int, attributes: dict[str, Any] | None = None) -> None:
        """Record a finished child span from `start` to `end` (ns since the epoch)."""
        if self.trace_id:
            self._emit((self.trace_id, self._new_id(), self.span_id, name, start, end, attributes, None))

    def end(self) -> None:
        if self.trace_id:
            self._emit(
                (
                    self.trace_id,
                    self.span_id,
                    0,
                    "aether.change",
                    self._start,
                    time.time_ns(),
                    self._attributes,
                    None,
                )
            )


class PushTrace:
    """An xDS response sent, waiting for its ACK or NACK."""

    __slots__ = ("_attributes", "_parent", "_start", "_tracer", "span_id", "trace_id")

    def __init__(self, tracer: Tracer, trace_id: int, parent: int, attributes: dict[str, Any]) -> None:
        self._tracer = tracer
        self.trace_id = trace_id
        self.span_id = tracer.new_id()
        self._parent = parent
        self._start = time.time_ns()
        self._attributes = attributes

    def answered(self, *, acked: bool, error: str = "") -> None:
        now = time.time_ns()
        failed = None if acked else error
        self._tracer.emit(
            (
                self.trace_id,
                self._tracer.new_id(),
                self.span_id,
                "aether.xds.ack" if acked else "aether.xds.nack",
                now,
                now,
                {"aether.xds.error": error} if error else None,
                failed,
            )
        )
        self._end("ack" if acked else "nack", failed, now)

    def superseded(self) -> None:
        self._end("unanswered", None, time.time_ns())

    def _end(self, outcome: str, error: str | None, now: int) -> None:
        self._attributes["aether.xds.outcome"] = outcome
        name = f"aether.xds.push {self._attributes['aether.xds.type']}"
        self._tracer.emit(
            (self.trace_id, self.span_id, self._parent, name, self._start, now, self._attributes, error)
        )


class ChangeTracer:
    """Starts change traces (the journal) and push spans (the xDS server) and links them by seq."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._by_seq: collections.OrderedDict[int, tuple[int, int]] = collections.OrderedDict()

    def start_change(
        self, *, first_seq: int, last_seq: int, events: Sequence[tuple[int, Any]], start: int
    ) -> ChangeTrace:
        """Start the root of the batch that appended `events` (`(seq, event)`), with one span per event."""
        tracer = self._tracer
        trace_id = tracer.new_trace() or 0
        change = ChangeTrace(
            tracer,
            trace_id,
            start=start,
            attributes={
                "aether.log.seq.first": first_seq,
                "aether.log.seq.last": last_seq,
                "aether.events": len(events),
            },
        )
        if trace_id:
            emit, new_id, parent = tracer.emit, tracer.new_id, change.span_id
            for seq, event in events:
                kind = type(event).__name__
                emit(
                    (
                        trace_id,
                        new_id(),
                        parent,
                        f"aether.event {kind}",
                        event.observed_at,
                        start,
                        {
                            "aether.log.seq": seq,
                            "aether.event.kind": kind,
                            "aether.event.source": event.source,
                            "aether.event.subject": event.subject,
                        },
                        None,
                    )
                )
        by_seq = self._by_seq
        by_seq[last_seq] = (trace_id, change.span_id) if trace_id else _UNSAMPLED
        if len(by_seq) > _REMEMBERED:
            by_seq.popitem(last=False)
        return change

    def start_push(
        self, *, seq: int, node_id: str, type_name: str, version: str, nonce: str
    ) -> PushTrace | None:
        """Start the span of one response sent from the snapshot at `seq`: a child of its change if remembered
        (None when that change was not sampled), else a root of its own (sampled by ratio)."""
        parent = self._by_seq.get(seq)
        if parent is None:
            trace_id, parent_id = self._tracer.new_trace() or 0, 0
        else:
            trace_id, parent_id = parent
        if not trace_id:
            return None
        return PushTrace(
            self._tracer,
            trace_id,
            parent_id,
            {
                "aether.log.seq": seq,
                "aether.xds.node": node_id,
                "aether.xds.type": type_name,
                "aether.xds.version": version,
                "aether.xds.nonce": nonce,
            },
        )
