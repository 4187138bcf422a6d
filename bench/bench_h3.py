"""HTTP/3 against HTTP/2 between two local proxies: requests/s and p99 latency at a fixed concurrency.

Two real Envoys run the projected configs of two nodes (static renders of `project_node`, as `aether render
--format bootstrap` prints them): node-a holds the caller pod `web-1`, node-b the callee pods `db-0` and `db2-0`,
whose app is a third Envoy answering 200 at once. `h2load` (HTTP/1.1, one connection per client, `-c` clients)
drives the caller's outbound 18081:

* HTTP/3: `Host: db.bench.aether.internal`, through the caller's own `quic:web.bench@db...` cluster (rendered as if
  Envoy had asked for it on demand) to db-0's QUIC inbound;
* the reference, HTTP/2 in the same run: `Host: db2.bench.aether.internal`, whose endpoint is marked behind the
  east/west waypoint, so it stays on the mesh's HTTP/2 cluster (mTLS over TCP, the same SVIDs) to db2-0.

Each is measured `--rounds` times, alternating; the best round of each is reported. The Envoys' stats are checked
to prove which codec carried the requests.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import trio
from _common import write_results

from aether.core.events import Event
from aether.core.project import project_node
from aether.envoy.process import Envoy, open_envoy
from aether.identity.mint import TestCA
from aether.testing import (
    AT,
    endpoints_snapshot_received,
    fold_events,
    make_endpoint,
    make_pod,
    make_trust_bundle,
    mesh_config_updated,
    on_demand_cluster_requested,
    pod_added,
    svid_rotated,
    trust_bundle_rotated,
)
from aether.testing.envoy import direct_response_bootstrap, snapshot_bootstrap

CALLER_IP = "127.0.30.1"
CALLEES = {"db": "127.0.30.11", "db2": "127.0.30.12"}
DOMAIN = "aether.internal"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        port: int = probe.getsockname()[1]
        return port


def _events(app_port: int) -> list[Event]:
    ca = TestCA(DOMAIN)
    events: list[Event] = [
        mesh_config_updated(),
        trust_bundle_rotated(make_trust_bundle(bundle_pem=ca.bundle_pem)),
        pod_added(
            make_pod(
                "web-1",
                namespace="bench",
                service_account="web",
                ips=(CALLER_IP,),
                node_name="node-a",
                annotations={"config.aether.io/upstreams": "bench/db, bench/db2"},
            )
        ),
    ]
    for account, ip in CALLEES.items():
        events.append(
            pod_added(
                make_pod(
                    f"{account}-0",
                    namespace="bench",
                    service_account=account,
                    ips=(ip,),
                    node_name="node-b",
                    annotations={"endpoint.aether.io/port": str(app_port)},
                )
            )
        )
    for account in ("web", *CALLEES):
        minted = ca.issue(f"spiffe://{DOMAIN}/ns/bench/sa/{account}")
        events.append(svid_rotated(minted.svid()))
    events.append(
        endpoints_snapshot_received(
            make_endpoint(CALLEES["db"], service="bench/db", port=app_port, node_name="node-b"),
            # Behind the east/west waypoint: the HTTP/2 reference.
            make_endpoint(
                CALLEES["db2"], service="bench/db2", port=app_port, node_name="node-b", cluster_name="west"
            ),
        )
    )
    events.append(on_demand_cluster_requested(f"quic:web.bench@db.bench.{DOMAIN}", node_id="node-a", at=AT))
    return events


def _h2load(host: str, *, requests: int, concurrency: int, log: Path) -> dict[str, float]:
    """Run h2load against the caller's outbound with `Host: host`; return requests/s and latency percentiles."""
    command = [
        "h2load",
        "--h1",
        f"-n{requests}",
        f"-c{concurrency}",
        "-m1",
        f"-H:authority: {host}",
        f"--log-file={log}",
        f"http://{CALLER_IP}:18081/",
    ]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    rate = next(line for line in output.splitlines() if line.startswith("finished in"))
    per_second = float(rate.split(",")[1].split()[0])
    statuses = [line.split("\t") for line in log.read_text().splitlines() if line.strip()]
    latencies = sorted(int(fields[2]) for fields in statuses)
    failed = sum(1 for fields in statuses if fields[1] != "200")
    cut = statistics.quantiles(latencies, n=100)
    return {
        "requests_per_second": per_second,
        "p50_ms": cut[49] / 1000,
        "p99_ms": cut[98] / 1000,
        "failed": failed,
        "requests": len(latencies),
    }


async def _stats(envoy: Envoy, prefix: str) -> dict[str, int]:
    return {name: value for name, value in (await envoy.stats()).items() if name.startswith(prefix)}


async def _run(*, requests: int, concurrency: int, rounds: int, work: Path) -> dict[str, Any]:
    app_port = _free_port()
    state = fold_events(*_events(app_port))
    caller = snapshot_bootstrap(project_node(state, node_name="node-a", now=AT), admin_port=0)
    callee = snapshot_bootstrap(project_node(state, node_name="node-b", now=AT), admin_port=0)
    app = direct_response_bootstrap(app_port, "ok\n", host="0.0.0.0")
    results: dict[str, list[dict[str, float]]] = {"http3": [], "http2": []}
    async with (
        open_envoy(app, work_dir=work / "app") as _,
        open_envoy(callee, work_dir=work / "callee") as _,
        open_envoy(caller, work_dir=work / "caller") as envoy,
    ):
        hosts = {"http3": f"db.bench.{DOMAIN}", "http2": f"db2.bench.{DOMAIN}"}
        for kind, host in hosts.items():  # warm-up: connections, the QUIC handshake
            await trio.to_thread.run_sync(
                lambda host=host, kind=kind: _h2load(
                    host, requests=200, concurrency=concurrency, log=work / f"warm-{kind}.log"
                )
            )
        for round_ in range(rounds):
            for kind, host in hosts.items():
                figures = await trio.to_thread.run_sync(
                    lambda host=host, kind=kind, round_=round_: _h2load(
                        host, requests=requests, concurrency=concurrency, log=work / f"{kind}-{round_}.log"
                    )
                )
                results[kind].append(figures)
        quic = await _stats(envoy, f"cluster.quic_web.bench@db.bench.{DOMAIN}.upstream_")
        reference = await _stats(envoy, f"cluster.db2.bench.{DOMAIN}.upstream_")
    codecs = {
        "http3_cluster_http3_connections": quic.get(
            f"cluster.quic_web.bench@db.bench.{DOMAIN}.upstream_cx_http3_total", 0
        ),
        "http3_cluster_http2_connections": quic.get(
            f"cluster.quic_web.bench@db.bench.{DOMAIN}.upstream_cx_http2_total", 0
        ),
        "http3_broken": quic.get(f"cluster.quic_web.bench@db.bench.{DOMAIN}.upstream_http3_broken", 0),
        "reference_http2_connections": reference.get(
            f"cluster.db2.bench.{DOMAIN}.upstream_cx_http2_total", 0
        ),
    }
    best = {kind: max(runs, key=lambda item: item["requests_per_second"]) for kind, runs in results.items()}
    return {"best": best, "rounds": results, "codecs": codecs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests per round and protocol")
    parser.add_argument("--concurrency", type=int, default=16, help="h2load clients (one connection each)")
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    if shutil.which("h2load") is None:
        print("bench_h3: skipped, h2load is not installed (Debian nghttp2-client)")
        return
    with tempfile.TemporaryDirectory() as raw:
        figures = trio.run(
            lambda: _run(
                requests=arguments.requests,
                concurrency=arguments.concurrency,
                rounds=arguments.rounds,
                work=Path(raw),
            )
        )
    h3, h2 = figures["best"]["http3"], figures["best"]["http2"]
    ratio_rate = h3["requests_per_second"] / h2["requests_per_second"]
    ratio_p99 = h3["p99_ms"] / h2["p99_ms"]
    print(
        f"HTTP/3 vs HTTP/2 between two local proxies ({arguments.requests} requests, c={arguments.concurrency})"
    )
    for kind, item in (("HTTP/3", h3), ("HTTP/2 (reference)", h2)):
        print(
            f"  {kind:<19} {item['requests_per_second']:9.0f} requests/s  p50 {item['p50_ms']:6.2f} ms"
            f"  p99 {item['p99_ms']:6.2f} ms  failed {item['failed']:.0f}"
        )
    print(f"  ratio HTTP/3 / HTTP/2: requests/s x{ratio_rate:.2f}, p99 x{ratio_p99:.2f}")
    print(f"  codecs (caller's stats): {figures['codecs']}")
    write_results(
        "h3",
        {
            "requests": arguments.requests,
            "concurrency": arguments.concurrency,
            "rounds": arguments.rounds,
            **figures,
            "ratio_requests_per_second": ratio_rate,
            "ratio_p99": ratio_p99,
        },
    )


if __name__ == "__main__":
    main()
