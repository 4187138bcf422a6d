"""The controller's metrics and the webhook reviews' spans.

Counters the controller keeps anyway (`ControllerStatistics`, `WebhookStatistics`) are observed at each collection:
status writes by result, leadership, reconciles, webhook reviews by result. Only a review's latency is recorded as
it happens (`aether.controller.webhook.review.duration`), and with tracing on each review is one span.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

from aether.controller.review import WEBHOOK_PATHS
from aether.telemetry import ControllerMetrics, Telemetry, observe, record_span

__all__ = ["ReviewRecorder", "SampledStatistics", "observe_controller", "observe_webhooks"]


class SampledStatistics:
    """The controller's statistics as last read on trio's thread (`run` reads them every `period` seconds): they
    read trio's clock, which the metric reader's thread cannot."""

    def __init__(self, read: Callable[[], Any]) -> None:
        self._read = read
        self.latest: Any = None

    async def run(self, *, period: float = 1.0) -> None:
        while True:
            self.latest = self._read()
            await trio.sleep(period)


def observe_controller(telemetry: Telemetry, sampled: SampledStatistics) -> None:
    """Register the controller's observed metrics, read from `sampled` (its `ControllerStatistics`)."""

    def statistics() -> Any:
        return sampled.latest

    def status_writes() -> list[tuple[int, dict[str, str]]]:
        current = statistics()
        if current is None:
            return []
        return [
            (
                max(current.status_writes - current.status_conflicts, 0),
                {"aether.controller.result": "written"},
            ),
            (current.status_conflicts, {"aether.controller.result": "conflict"}),
            (current.status_failures, {"aether.controller.result": "failed"}),
        ]

    def leading() -> list[tuple[int, dict[str, str]]]:
        current = statistics()
        return [] if current is None else [(int(current.leading), {})]

    def transitions() -> list[tuple[int, dict[str, str]]]:
        if statistics() is None:
            return []
        election = statistics().election
        return [
            (election.elections, {"aether.controller.transition": "elected"}),
            (election.depositions, {"aether.controller.transition": "deposed"}),
        ]

    def lease_writes() -> list[tuple[int, dict[str, str]]]:
        if statistics() is None:
            return []
        election = statistics().election
        return [
            (election.writes, {"aether.controller.result": "written"}),
            (election.conflicts, {"aether.controller.result": "conflict"}),
            (election.failures, {"aether.controller.result": "failed"}),
        ]

    def reconciles() -> list[tuple[int, dict[str, str]]]:
        current = statistics()
        return [] if current is None else [(current.reconciles, {})]

    observe(
        telemetry,
        "aether.controller.status.writes",
        status_writes,
        unit="{write}",
        description="Status writes by result: written, refused with a conflict, failed otherwise",
        counter=True,
    )
    observe(
        telemetry,
        "aether.controller.leader",
        leading,
        unit="1",
        description="1 while this replica leads (writes status), 0 otherwise",
    )
    observe(
        telemetry,
        "aether.controller.leader.transitions",
        transitions,
        unit="{transition}",
        description="Times this replica became the leader or lost it",
        counter=True,
    )
    observe(
        telemetry,
        "aether.controller.lease.writes",
        lease_writes,
        unit="{write}",
        description="Writes of the leader Lease by result",
        counter=True,
    )
    observe(
        telemetry,
        "aether.controller.reconciles",
        reconciles,
        unit="{reconcile}",
        description="Passes over every object completed",
        counter=True,
    )


def observe_webhooks(telemetry: Telemetry, statistics: Callable[[], Any]) -> None:
    """Register the webhook server's observed reviews; `statistics()` returns its `WebhookStatistics`."""

    def reviews() -> list[tuple[int, dict[str, str]]]:
        current = statistics()
        return [
            (
                max(current.reviews - current.denied - current.patched, 0),
                {"aether.webhook.result": "allowed"},
            ),
            (current.patched, {"aether.webhook.result": "patched"}),
            (current.denied, {"aether.webhook.result": "denied"}),
            (current.bad_requests, {"aether.webhook.result": "bad_request"}),
        ]

    observe(
        telemetry,
        "aether.controller.webhook.reviews",
        reviews,
        unit="{review}",
        description="Admission requests answered, by result (bad_request: not a review, unknown path or method)",
        counter=True,
    )


def review_result(status: int, answer: dict[str, Any]) -> str:
    """A review's result as the metrics name it: allowed, patched, denied, bad_request."""
    if status != 200:
        return "bad_request"
    response = answer["response"]
    if not response["allowed"]:
        return "denied"
    return "patched" if "patch" in response else "allowed"


class ReviewRecorder:
    """Times each review (histogram) and, with tracing on, records it as one span."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._duration = ControllerMetrics.of(telemetry).review_duration
        self._tracer = telemetry.tracer
        self.enabled = telemetry.meter is not None or self._tracer is not None

    def reviewed(self, path: str, status: int, answer: dict[str, Any], *, started: int) -> None:
        """Record the review POSTed to `path` and answered with `(status, answer)`, begun at `started` (ns)."""
        ended = time.time_ns()
        result = review_result(status, answer)
        known = path if path in WEBHOOK_PATHS else "other"  # a client's path is not a metric's attribute
        self._duration.record(
            (ended - started) / 1e9, {"aether.webhook.path": known, "aether.webhook.result": result}
        )
        if self._tracer is not None:
            attributes: dict[str, Any] = {"aether.webhook.path": known, "aether.webhook.result": result}
            error = None
            if status == 200:
                response = answer["response"]
                attributes["aether.webhook.uid"] = response.get("uid", "")
                if not response["allowed"]:
                    error = str((response.get("status") or {}).get("message", "denied"))
            else:
                error = str(answer.get("error", ""))
            record_span(
                self._tracer,
                "aether.webhook.review",
                start=started,
                end=ended,
                attributes=attributes,
                error=error,
            )
