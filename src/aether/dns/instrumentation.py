"""mesh-dns's metrics, observed from the counters the server keeps anyway (`MeshDnsStatistics`): the query path,
tuned to answer a cached query without an await, pays nothing for them. Only the upstream latency is recorded as it
happens (`dns.lookup.duration`, once per forwarded question)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aether.telemetry import Telemetry, observe

__all__ = ["observe_mesh_dns"]


def observe_mesh_dns(telemetry: Telemetry, statistics: Callable[[], Any]) -> None:
    """Register mesh-dns's observed metrics; `statistics()` returns the server's `MeshDnsStatistics`."""

    def queries() -> list[tuple[int, dict[str, str]]]:
        current = statistics()
        return [
            (current.udp_queries, {"network.transport": "udp"}),
            (current.tcp_queries, {"network.transport": "tcp"}),
        ]

    def outcomes() -> list[tuple[int, dict[str, str]]]:
        current = statistics()
        total = current.udp_queries + current.tcp_queries
        answered = max(total - current.forwarded - current.coalesced - current.malformed, 0)
        return [
            (answered, {"aether.dns.outcome": "answered"}),
            (current.forwarded, {"aether.dns.outcome": "forwarded"}),
            (current.coalesced, {"aether.dns.outcome": "coalesced"}),
            (current.upstream_failures, {"aether.dns.outcome": "upstream_failed"}),
            (current.malformed, {"aether.dns.outcome": "malformed"}),
        ]

    def lookups() -> list[tuple[int, dict[str, str]]]:
        resolver = statistics().resolver
        return [
            (resolver.cache_hits, {"aether.dns.cache": "answer", "aether.dns.cache.result": "hit"}),
            (resolver.cache_misses, {"aether.dns.cache": "answer", "aether.dns.cache.result": "miss"}),
            (resolver.forward_cache_hits, {"aether.dns.cache": "forward", "aether.dns.cache.result": "hit"}),
            (
                resolver.forward_cache_misses,
                {"aether.dns.cache": "forward", "aether.dns.cache.result": "miss"},
            ),
        ]

    def hit_ratio() -> list[tuple[float, dict[str, str]]]:
        resolver = statistics().resolver
        looked_up = resolver.cache_hits + resolver.cache_misses
        return [(resolver.cache_hits / looked_up, {"aether.dns.cache": "answer"})] if looked_up else []

    observe(
        telemetry, "aether.dns.queries", queries, unit="{query}", description="Queries received", counter=True
    )
    observe(
        telemetry,
        "aether.dns.query.outcomes",
        outcomes,
        unit="{query}",
        description="Queries by outcome: answered here, forwarded, coalesced with a forward, failed upstream, malformed",
        counter=True,
    )
    observe(
        telemetry,
        "aether.dns.cache.lookups",
        lookups,
        unit="{lookup}",
        description="Cache lookups",
        counter=True,
    )
    observe(
        telemetry,
        "aether.dns.cache.hit_ratio",
        hit_ratio,
        unit="1",
        description="Answer cache hits per lookup",
    )
