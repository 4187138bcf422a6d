"""The stream machines' publish for one endpoint change at 10,000 EDS clusters, without Envoy (sans-IO, exact).

Delta compares only what changed since the snapshot it last sent (`Snapshot.changed_since`); SotW must send every
selected load assignment but reuses its selection. The reference, measured in the same run, is the same publish of
the same content as a snapshot built whole (`Snapshot.build`: no lineage), which makes both machines compare or
select every resource: what every publish cost before.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from _common import write_results
from bench_xds import Workload, with_endpoint_moved
from envoy.service.discovery.v3 import discovery_pb2

from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, Snapshot
from aether.xds.delta import DeltaStream
from aether.xds.sotw import SotwStream

NODE = "bench"


def _subscribe(machine: DeltaStream | SotwStream, names: list[str]) -> None:
    """Subscribe CDS (wildcard) and EDS (every name), ACKing every response."""
    for type_url, subscribed in ((CLUSTER_TYPE, []), (ENDPOINT_TYPE, names)):
        if isinstance(machine, DeltaStream):
            request: Any = discovery_pb2.DeltaDiscoveryRequest(
                type_url=type_url, resource_names_subscribe=subscribed
            )
        else:
            request = discovery_pb2.DiscoveryRequest(type_url=type_url, resource_names=subscribed)
        request.node.id = NODE
        _ack(machine, machine.receive(request, now=0).responses, names)


def _ack(machine: DeltaStream | SotwStream, responses: Any, names: list[str]) -> None:
    for response in responses:
        if isinstance(machine, DeltaStream):
            ack: Any = discovery_pb2.DeltaDiscoveryRequest(
                type_url=response.type_url, response_nonce=response.nonce
            )
        else:
            ack = discovery_pb2.DiscoveryRequest(
                type_url=response.type_url, response_nonce=response.nonce, version_info=response.version_info
            )
            if response.type_url == ENDPOINT_TYPE:
                ack.resource_names.extend(names)
        ack.node.id = NODE
        machine.receive(ack, now=0)


def measure(mode: str, workload: Workload, *, clusters: int, pushes: int, whole: bool) -> list[float]:
    """Return the seconds of each publish of a one-endpoint change (ACKed before the next)."""
    names = [resource.name for resource in workload.assignments[:clusters]]
    machine: DeltaStream | SotwStream = DeltaStream() if mode == "delta" else SotwStream()
    current = workload.snapshot(clusters, seq=1)
    _ack(machine, machine.publish(current, now=0).responses, names)
    _subscribe(machine, names)
    seconds = []
    for step in range(pushes):
        current = with_endpoint_moved(current, index=step * 7919 % clusters, seq=step + 2)
        published = current
        if whole:
            held = [resource for items in current.resources.values() for resource in items.values()]
            published = Snapshot.build(node_id=NODE, seq=current.seq, resources=held)
        start = time.perf_counter()
        output = machine.publish(published, now=0)
        seconds.append(time.perf_counter() - start)
        assert len(output.responses) == 1, f"{mode}: one response per change, got {len(output.responses)}"
        _ack(machine, output.responses, names)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=10_000)
    parser.add_argument("--pushes", type=int, default=200)
    arguments = parser.parse_args()
    workload = Workload.build(arguments.clusters)
    figures: dict[str, Any] = {"clusters": arguments.clusters, "pushes": arguments.pushes}
    print(f"publish: 1 endpoint change at {arguments.clusters:,} EDS clusters, {arguments.pushes} publishes")
    print(f"  {'':8}{'p50 ms':>10}{'p99 ms':>10}{'whole p50':>11}{'whole p99':>11}{'whole / derived':>17}")
    for mode in ("delta", "sotw"):
        derived = measure(mode, workload, clusters=arguments.clusters, pushes=arguments.pushes, whole=False)
        built = measure(mode, workload, clusters=arguments.clusters, pushes=arguments.pushes, whole=True)
        row = {
            "p50_ms": statistics.median(derived) * 1000,
            "p99_ms": sorted(derived)[round(0.99 * (len(derived) - 1))] * 1000,
            "whole_p50_ms": statistics.median(built) * 1000,
            "whole_p99_ms": sorted(built)[round(0.99 * (len(built) - 1))] * 1000,
        }
        row["whole_over_derived_p50"] = row["whole_p50_ms"] / row["p50_ms"]
        figures[mode] = {key: round(value, 4) for key, value in row.items()}
        print(
            f"  {mode:<8}{row['p50_ms']:>10.3f}{row['p99_ms']:>10.3f}{row['whole_p50_ms']:>11.3f}"
            f"{row['whole_p99_ms']:>11.3f}{row['whole_over_derived_p50']:>16.1f}x"
        )
    write_results("publish", figures)


if __name__ == "__main__":
    sys.exit(main())
