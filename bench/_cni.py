"""What the CNI benchmarks share: a pod's CNI_* environment and network config, and latency quantiles."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path


def latency_ms(samples: list[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds (p99 of 100 samples is the 99th), and the maximum."""
    ordered = sorted(samples)
    cut = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 99
    return {
        "p50_ms": round(cut[49] * 1000, 2),
        "p99_ms": round(cut[98] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def cni_environment(command: str, index: int, netns: Path) -> dict[str, str]:
    """The CNI_* variables (and PATH) of pod `index`'s `command`."""
    return {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": f"bench{index}",
        "CNI_NETNS": str(netns),
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": f"K8S_POD_NAMESPACE=bench;K8S_POD_NAME=pod-{index};K8S_POD_UID=uid-{index}",
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin"),
    }


def cni_config(socket: Path, index: int) -> bytes:
    """Pod `index`'s network config: chained after a plugin that gave it 10.x.y.2, mesh DNS, port 22 excluded."""
    prev = {"cniVersion": "1.1.0", "ips": [{"address": f"10.{index // 250}.{index % 250}.2/24"}]}
    document = {
        "cniVersion": "1.1.0",
        "name": "bench",
        "type": "aether-cni",
        "agentSocket": str(socket),
        "meshDNS": "10.255.0.1",
        "excludeOutboundPorts": [22],
        "prevResult": prev,
    }
    return json.dumps(document).encode()
