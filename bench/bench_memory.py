"""Agent memory at 10,000 services x 10 endpoints: RSS of the state and of the node snapshot an agent serves.

Each figure comes from a fresh interpreter (a subprocess), so nothing of an earlier measurement stays resident:

1. the reference: the interpreter with every module the agent's projection and xDS serving import, nothing built;
2. the state: the registry of 10,000 services x 10 endpoints plus the node's 8 pods of 4 identities (the workload
   of `bench_projection.py`), folded through the reducers;
3. the snapshot: that state projected by a `NodeProjector` (as the plane's publisher does), and every resource
   packed as an xDS push packs it.

Printed: RSS at each step (after a collection and, where the plane sets one, a trim of the allocator, as the plane's
memory policy does) against the reference, the state's encoded size (`encode_state`, the checkpoint's bytes) and
the snapshot's serialized bytes (the sum of its resources' bodies), all from the same run.

Aim (issue 21, target 8): <= 120 MB RSS for the state and its snapshot together.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from _common import write_results

SERVICES = 10_000
AIM_MB = 120.0

_CHILD = r"""
import gc, json, sys
sys.path.insert(0, {bench!r})
from pathlib import Path

def rss():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0

try:
    from aether.plane.memory import release_memory, tune_allocator
except ImportError:  # a tree from before the plane's memory policy (to compare with)
    release_memory = tune_allocator = lambda: False
tune_allocator()
import bench_projection
from aether.core.project import NodeProjector
from aether.core.state.codec import encode_state
import aether.xds.delta, aether.xds.sotw  # what serving imports
def settle():
    gc.collect()
    release_memory()
    return rss()

figures = {{"reference_mb": settle()}}
if {steps} >= 1:
    state = bench_projection.node_state({services})
    figures["state_mb"] = settle()
    figures["state_bytes"] = len(encode_state(state))
    figures["state_mb"] = settle()
if {steps} >= 2:
    snapshot = NodeProjector(node_name=bench_projection.NODE).project(state, now=bench_projection.NOW)
    for held in snapshot.resources.values():
        for item in held.values():
            item.packed  # as a push does (a tree that cached the packed Any keeps it)
    figures["snapshot_mb"] = settle()
    figures["snapshot_bytes"] = sum(len(item.body) for held in snapshot.resources.values() for item in held.values())
    figures["resources"] = sum(len(held) for held in snapshot.resources.values())
print(json.dumps(figures))
"""


def _run(steps: int) -> dict[str, float]:
    bench = str(Path(__file__).resolve().parent)
    code = _CHILD.format(bench=bench, services=SERVICES, steps=steps)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    figures: dict[str, float] = json.loads(out.splitlines()[-1])
    return figures


def main() -> None:
    print(
        f"agent memory: {SERVICES:,} services x 10 endpoints, 8 pods of 4 identities, each step a fresh process"
    )
    figures = _run(2)
    reference = figures["reference_mb"]
    state = figures["state_mb"] - reference
    snapshot = figures["snapshot_mb"] - figures["state_mb"]
    total = figures["snapshot_mb"]
    print(f"  reference (modules imported, nothing built): {reference:7.1f} MB RSS")
    print(
        f"  state:    +{state:6.1f} MB RSS   encoded {figures['state_bytes'] / 1e6:6.2f} MB"
        f"   ({state / (figures['state_bytes'] / 2**20):.1f}x its bytes)"
    )
    print(
        f"  snapshot: +{snapshot:6.1f} MB RSS   serialized {figures['snapshot_bytes'] / 1e6:6.2f} MB"
        f" in {int(figures['resources']):,} resources ({snapshot / (figures['snapshot_bytes'] / 2**20):.2f}x its bytes)"
    )
    print(f"  total RSS: {total:.1f} MB ({total / reference:.2f}x the reference)")
    print(f"  aim: <= {AIM_MB:.0f} MB RSS: {'met' if total <= AIM_MB else 'NOT met'}")
    write_results(
        "memory",
        {
            "services": SERVICES,
            "reference_rss_mb": round(reference, 1),
            "state_rss_mb": round(state, 1),
            "snapshot_rss_mb": round(snapshot, 1),
            "total_rss_mb": round(total, 1),
            "state_bytes": int(figures["state_bytes"]),
            "snapshot_bytes": int(figures["snapshot_bytes"]),
            "resources": int(figures["resources"]),
        },
    )


if __name__ == "__main__":
    sys.exit(main())
