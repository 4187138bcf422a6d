"""The instruments of each adapter, by name and unit: OTel semantic conventions where one exists, `aether.*` else.

An adapter takes its set when it is made (`JournalMetrics.of(current_telemetry())`); with telemetry off every
instrument is `NOOP`, whose methods do nothing, and observable gauges are never registered.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import attrs

from aether.telemetry.runtime import Telemetry

__all__ = [
    "NOOP",
    "CniMetrics",
    "ControllerMetrics",
    "Counter",
    "DnsMetrics",
    "Histogram",
    "HistogramPoint",
    "JournalMetrics",
    "LightCounter",
    "LightHistogram",
    "RegistrarMetrics",
    "XdsMetrics",
    "observe",
]

Attributes = Mapping[str, str | int | bool]

LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Seconds: 100 µs to 10 s (the SDK's default buckets start at 5 ms, too coarse for a fold or a commit)."""


class Counter(Protocol):
    def add(self, amount: int | float, attributes: Attributes | None = None) -> None: ...


class Histogram(Protocol):
    def record(self, amount: int | float, attributes: Attributes | None = None) -> None: ...


class _Noop:
    """An instrument that records nothing (telemetry off)."""

    def add(self, amount: int | float, attributes: Attributes | None = None) -> None:
        pass

    def record(self, amount: int | float, attributes: Attributes | None = None) -> None:
        pass


NOOP = _Noop()


class LightCounter:
    """A monotonic counter summed in a dict on the role's path (the SDK's `Counter.add` costs several µs a call:
    views, locks, a frozen set of the attributes), reported at each collection as an observable counter."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: dict[tuple[tuple[str, str | int | bool], ...], int | float] = {}

    def add(self, amount: int | float, attributes: Attributes | None = None) -> None:
        key = tuple(attributes.items()) if attributes else ()
        values = self._values
        values[key] = values.get(key, 0) + amount

    def read(self) -> list[tuple[int | float, Attributes]]:
        return [(value, dict(key)) for key, value in list(self._values.items())]


@attrs.frozen(kw_only=True)
class HistogramPoint:
    """One cumulative explicit-bucket histogram point, shaped as the SDK's (what `aether.telemetry.otlp` encodes)."""

    attributes: Attributes
    start_time_unix_nano: int
    time_unix_nano: int
    count: int
    sum: float
    bucket_counts: tuple[int, ...]
    explicit_bounds: tuple[float, ...]
    min: float
    max: float


class LightHistogram:
    """A histogram aggregated in place on the role's path (a bisect and three updates) and read by our metric
    exporter at each export (`points`), which adds it to the SDK's data: the SDK has no observable histogram."""

    def __init__(self, name: str, *, unit: str, description: str, started: int) -> None:
        self.name = name
        self.unit = unit
        self.description = description
        self._started = started
        self._points: dict[tuple[tuple[str, str | int | bool], ...], list[Any]] = {}

    def record(self, amount: int | float, attributes: Attributes | None = None) -> None:
        key = tuple(attributes.items()) if attributes else ()
        point = self._points.get(key)
        if point is None:
            point = self._points[key] = [[0] * (len(LATENCY_BUCKETS) + 1), 0.0, amount, amount]
        point[0][bisect.bisect_left(LATENCY_BUCKETS, amount)] += 1
        point[1] += amount
        if amount < point[2]:
            point[2] = amount
        if amount > point[3]:
            point[3] = amount

    def points(self, now: int) -> list[HistogramPoint]:
        """The cumulative points (read on the exporter's thread: each point's count is the sum of the bucket
        counts copied, so a record landing meanwhile never makes a point inconsistent)."""
        read = []
        for key, (buckets, total, smallest, largest) in list(self._points.items()):
            counts = tuple(buckets)
            read.append(
                HistogramPoint(
                    attributes=dict(key),
                    start_time_unix_nano=self._started,
                    time_unix_nano=now,
                    count=sum(counts),
                    sum=total,
                    bucket_counts=counts,
                    explicit_bounds=LATENCY_BUCKETS,
                    min=smallest,
                    max=largest,
                )
            )
        return read


def _counter(telemetry: Telemetry, name: str, *, unit: str, description: str) -> Counter:
    """The counter `name` of `telemetry` (made once: adapters that take the same set share its instruments)."""
    if telemetry.meter is None:
        return NOOP
    counter = telemetry.instruments.get(name)
    if counter is None:
        counter = telemetry.instruments[name] = LightCounter()
        observe(telemetry, name, counter.read, unit=unit, description=description, counter=True)
    assert isinstance(counter, LightCounter), f"{name} is not a counter"
    return counter


def _histogram(telemetry: Telemetry, name: str, *, unit: str, description: str) -> Histogram:
    """The histogram `name` of `telemetry` (made once, as counters are)."""
    if telemetry.meter is None:
        return NOOP
    histogram = telemetry.instruments.get(name)
    if histogram is None:
        histogram = telemetry.instruments[name] = LightHistogram(
            name, unit=unit, description=description, started=time.time_ns()
        )
        telemetry.histograms.append(histogram)
    assert isinstance(histogram, LightHistogram), f"{name} is not a histogram"
    return histogram


def observe(
    telemetry: Telemetry,
    name: str,
    read: Callable[[], Iterable[tuple[int | float, Attributes]]],
    *,
    unit: str,
    description: str,
    counter: bool = False,
) -> None:
    """Register a gauge (a monotonic counter with `counter`) whose values `read()` returns at each collection
    (nothing when metrics are off): for counters an adapter keeps anyway, the hot path pays nothing.

    `read` runs on the metric reader's thread: it must only read values the adapter already holds.
    """
    if telemetry.meter is None:
        return
    from opentelemetry.metrics import CallbackOptions, Observation

    def callback(options: CallbackOptions) -> list[Observation]:
        return [Observation(value, dict(attributes)) for value, attributes in read()]

    create = telemetry.meter.create_observable_counter if counter else telemetry.meter.create_observable_gauge
    create(name, callbacks=[callback], unit=unit, description=description)


@attrs.frozen(kw_only=True)
class JournalMetrics:
    """The journal (agent, edge): the log and the fold, and the projection that follows each batch."""

    recording: bool
    """False when metrics are off: the journal then skips even counting events by kind."""
    appended: Counter
    folded: Counter
    commit_duration: Histogram
    projection_duration: Histogram

    @classmethod
    def of(cls, telemetry: Telemetry) -> JournalMetrics:
        return cls(
            recording=telemetry.meter is not None,
            appended=_counter(
                telemetry,
                "aether.journal.events.appended",
                unit="{event}",
                description="Events appended, by kind",
            ),
            folded=_counter(
                telemetry,
                "aether.journal.events.folded",
                unit="{event}",
                description="Events folded, by kind",
            ),
            commit_duration=_histogram(
                telemetry,
                "aether.log.commit.duration",
                unit="s",
                description="Time to append and fsync one batch of events",
            ),
            projection_duration=_histogram(
                telemetry,
                "aether.projection.duration",
                unit="s",
                description="Time to project one folded state",
            ),
        )


@attrs.frozen(kw_only=True)
class XdsMetrics:
    """The xDS server: pushes, their ACKs and NACKs, on-demand requests."""

    recording: bool
    pushes: Counter
    push_ack_duration: Histogram
    nacks: Counter
    on_demand: Counter

    @classmethod
    def of(cls, telemetry: Telemetry) -> XdsMetrics:
        return cls(
            recording=telemetry.meter is not None,
            pushes=_counter(
                telemetry, "aether.xds.pushes", unit="{response}", description="xDS responses sent"
            ),
            push_ack_duration=_histogram(
                telemetry,
                "aether.xds.push.duration",
                unit="s",
                description="From sending an xDS response to its ACK or NACK, by type and outcome",
            ),
            nacks=_counter(
                telemetry, "aether.xds.nacks", unit="{response}", description="xDS responses rejected"
            ),
            on_demand=_counter(
                telemetry,
                "aether.xds.on_demand.requests",
                unit="{request}",
                description="Clusters asked for on demand (ODCDS)",
            ),
        )


@attrs.frozen(kw_only=True)
class RegistrarMetrics:
    """The registrar server and the agent's watch client."""

    store_write_duration: Histogram
    fan_out_duration: Histogram
    resyncs: Counter
    """Full resyncs: served (registrar) or received (agent), by `aether.registrar.side`."""

    @classmethod
    def of(cls, telemetry: Telemetry) -> RegistrarMetrics:
        return cls(
            store_write_duration=_histogram(
                telemetry,
                "aether.registrar.store.write.duration",
                unit="s",
                description="Time to write one registration change to the store",
            ),
            fan_out_duration=_histogram(
                telemetry,
                "aether.registrar.fan_out.duration",
                unit="s",
                description="Time to hand one change to the buffer of every watcher that wants it",
            ),
            resyncs=_counter(
                telemetry,
                "aether.registrar.watch.resyncs",
                unit="{resync}",
                description="Full endpoint resyncs",
            ),
        )


@attrs.frozen(kw_only=True)
class DnsMetrics:
    """mesh-dns's upstream latency (its query and cache counters are observed from its statistics)."""

    forward_duration: Histogram

    @classmethod
    def of(cls, telemetry: Telemetry) -> DnsMetrics:
        return cls(
            forward_duration=_histogram(
                telemetry,
                "dns.lookup.duration",
                unit="s",
                description="Time of one question forwarded upstream (semantic conventions' DNS lookup duration)",
            ),
        )


@attrs.frozen(kw_only=True)
class ControllerMetrics:
    """The controller's admission webhooks' latency (its other metrics are observed from its statistics)."""

    review_duration: Histogram

    @classmethod
    def of(cls, telemetry: Telemetry) -> ControllerMetrics:
        return cls(
            review_duration=_histogram(
                telemetry,
                "aether.controller.webhook.review.duration",
                unit="s",
                description="Time to judge and answer one admission request once read, by webhook path and result",
            ),
        )


@attrs.frozen(kw_only=True)
class CniMetrics:
    """The CNI commands the agent runs for the host's `aether-cni` (the plugin exports nothing itself)."""

    recording: bool
    command_duration: Histogram

    @classmethod
    def of(cls, telemetry: Telemetry) -> CniMetrics:
        return cls(
            recording=telemetry.meter is not None,
            command_duration=_histogram(
                telemetry,
                "aether.cni.command.duration",
                unit="s",
                description="Time to run one CNI command forwarded by aether-cni, by command and result"
                " (the count of result=failed is the failures)",
            ),
        )
