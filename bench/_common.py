"""Shared helpers of the benchmarks: timing, workload builders, and writing results under bench/results/."""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aether.core.events import Endpoint, EndpointsSnapshotReceived, EndpointUpdated, Record
from aether.core.reduce import fold
from aether.core.state import EMPTY_STATE, State

RESULTS = Path(__file__).resolve().parent / "results"


def best_of(runs: int, action: Callable[[], float]) -> float:
    """Return the smallest of `runs` measurements: the least disturbed by a noisy machine."""
    return min(action() for _ in range(runs))


def service_names(count: int) -> list[str]:
    """Return `count` mesh service keys spread over 50 namespaces."""
    return [f"ns{index % 50}/svc{index}" for index in range(count)]


def endpoint_ip(service_index: int, replica: int) -> str:
    """Return a distinct IPv4 address for one replica of one service."""
    return f"10.{service_index // 250 % 250}.{service_index % 250}.{replica + 1}"


def registry_state(*, services: int, endpoints_per_service: int) -> State:
    """Return a state holding `services` x `endpoints_per_service` endpoints (one snapshot folded)."""
    names = service_names(services)
    endpoints = [
        Endpoint(service=name, ip=endpoint_ip(index, replica))
        for index, name in enumerate(names)
        for replica in range(endpoints_per_service)
    ]
    snapshot = EndpointsSnapshotReceived(
        observed_at=0, source="bench", version="1", endpoints=endpoints, services=names
    )
    return fold(EMPTY_STATE, Record(seq=1, event=snapshot))


def churn_records(*, services: int, endpoints_per_service: int, count: int, first_seq: int) -> list[Record]:
    """Return `count` EndpointUpdated records (weight changes) spread pseudo-randomly over existing endpoints: every
    endpoint once before any again (a fold that keeps only the last change of each endpoint gains nothing here)."""
    names = service_names(services)
    records = []
    for seq in range(first_seq, first_seq + count):  # by seq: batches of one log continue the pattern
        index = (seq * 7919) % services  # a prime stride: every service, in a cache-unfriendly order
        endpoint = Endpoint(
            service=names[index],
            ip=endpoint_ip(index, (seq + seq // services) % endpoints_per_service),
            weight=1 + seq % 100,
        )
        event = EndpointUpdated(observed_at=seq, source="bench", version=str(seq), endpoint=endpoint)
        records.append(Record(seq=seq, event=event))
    return records


def write_results(name: str, figures: dict[str, Any]) -> None:
    """Write `figures` to bench/results/<name>.json (with the machine they were measured on)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": name,
        "machine": platform.machine(),
        "python": platform.python_version(),
        **figures,
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


def timed(action: Callable[[], object]) -> float:
    """Return how long `action` took, in seconds."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start
