"""SVIDs from the SPIFFE Broker API to a real Envoy: pod ADD → its SVID active in Envoy (p50/p99), and a rotation of
every pod's SVID → all active; the same ADDs and the same rotation through `--svid-dir` (the file source, its files
read before the ADDs) measured in the same run.

One agent per source, each with its own real Envoy over Delta ADS; the broker (`aether.testing.spiffe.FakeBroker`,
the faithful fake: no SPIRE runs here) answers at once. "Active in Envoy" is Envoy's own word: the secret of the
pod's SPIFFE ID in `/config_dump`'s dynamic active secrets holds the new certificate. Each pod has a service
account of its own, so each SVID is a secret of its own.

The file source polls its directory (1 s by default, `aether.identity.files.POLL_INTERVAL`): its rotation figure is
bounded below by that interval, which is the point of comparing.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
from _common import write_results

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.envoy.bootstrap import ads_bootstrap
from aether.envoy.process import Envoy, open_envoy
from aether.identity.mint import MintedSvid, TestCA, write_bundle, write_svid
from aether.rpc.listen import ListenAddress
from aether.testing import make_pod, pod_added
from aether.testing.envoy import wait_for
from aether.testing.spiffe import FakeBroker, FakeWorkloadApi

TD = "aether.internal"
TIMEOUT = 120.0
"""Bound on any one wait (each takes milliseconds to seconds)."""


def spiffe_id(index: int) -> str:
    return f"spiffe://{TD}/ns/bench/sa/sa{index}"


def pod(index: int) -> Any:
    return make_pod(
        f"pod-{index}",
        namespace="bench",
        service_account=f"sa{index}",
        ips=(f"127.0.{40 + index // 250}.{index % 250 + 1}",),
        node_name="bench",
    )


async def active_chains(envoy: Envoy) -> dict[str, bytes]:
    """The certificate chain of each dynamic active secret of `envoy`, by name."""
    _, body = await envoy.admin_get("/config_dump?resource=dynamic_active_secrets")
    chains: dict[str, bytes] = {}
    for item in json.loads(body).get("configs", []):
        chain = item.get("secret", {}).get("tls_certificate", {}).get("certificate_chain", {})
        if "inline_bytes" in chain:
            chains[item["name"]] = base64.b64decode(chain["inline_bytes"])
    return chains


async def wait_active(envoy: Envoy, wanted: dict[str, MintedSvid]) -> None:
    async def arrived() -> bool:
        chains = await active_chains(envoy)
        return all(chains.get(name) == svid.cert_chain_pem for name, svid in wanted.items())

    await wait_for(arrived, timeout=TIMEOUT, interval=0.02)


@asynccontextmanager
async def node(
    directory: Path, *, ca: TestCA, broker: bool, nursery: trio.Nursery
) -> AsyncIterator[tuple[RunningAgent, Envoy, FakeBroker | None, Path]]:
    svids = directory / "svids"
    fake: FakeBroker | None = None
    extra: dict[str, Any] = {}
    if broker:
        workload = FakeWorkloadApi(ca, svids=[ca.issue(f"spiffe://{TD}/spire/agent/bench")])
        fake = FakeBroker(ca, directory=directory / "broker")
        await nursery.start(workload.serve, directory / "workload.sock")
        await nursery.start(fake.serve, directory / "broker.sock")
        extra = {
            "spiffe_workload_socket": directory / "workload.sock",
            "spiffe_broker_socket": directory / "broker.sock",
        }
    else:
        svids.mkdir(parents=True)
        write_bundle(svids, ca.bundle_pem)
        extra = {"svid_dir": svids}
    config = AgentConfig(
        node_name="bench",
        log_dir=directory / "log",
        xds=ListenAddress.unix(directory / "xds.sock"),
        admin_socket=directory / "admin.sock",
        **extra,
    )
    agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
    bootstrap = ads_bootstrap(node_id="bench", xds_unix_socket=directory / "xds.sock", delta=True)
    async with open_envoy(
        bootstrap, work_dir=directory / "envoy", wait_live=False, log_level="error"
    ) as envoy:
        yield agent, envoy, fake, svids


async def timed_adds(
    agent: RunningAgent, envoy: Envoy, svids: dict[str, MintedSvid], adds: int
) -> list[float]:
    """ADD every pod (`svids`: the SVID each one's should be, in pod order), the first `adds` one at a time, each
    timed until its SVID is active in Envoy; return those times (seconds, sorted) once every SVID is active."""
    latencies: list[float] = []
    for index, (name, svid) in enumerate(svids.items()):
        start = time.perf_counter()
        async with agent.journal.sender() as send:
            await send.send(pod_added(pod(index)))
        if index < adds:
            await wait_active(envoy, {name: svid})
            latencies.append(time.perf_counter() - start)
    await wait_active(envoy, svids)
    return sorted(latencies)


def percentiles(prefix: str, latencies: list[float]) -> dict[str, float]:
    """p50 and p99 of sorted `latencies`, in ms, named `<prefix>_p50_ms` and `<prefix>_p99_ms`."""
    return {
        f"{prefix}_p50_ms": statistics.median(latencies) * 1e3,
        f"{prefix}_p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3,
    }


async def measure(pods: int, adds: int, directory: Path) -> dict[str, Any]:
    ca = TestCA(TD)
    figures: dict[str, Any] = {"pods": pods, "adds": adds}
    async with trio.open_nursery() as nursery:
        async with node(directory / "broker", ca=ca, broker=True, nursery=nursery) as (agent, envoy, fake, _):
            assert fake is not None
            current: dict[str, MintedSvid] = {}
            for index in range(pods):
                current[spiffe_id(index)] = ca.issue(spiffe_id(index))
                fake.set_svids(f"bench/pod-{index}", [current[spiffe_id(index)]])
            figures.update(percentiles("add_to_active", await timed_adds(agent, envoy, current, adds)))
            rotated = {name: ca.issue(name) for name in current}
            start = time.perf_counter()
            for index in range(pods):
                fake.set_svids(f"bench/pod-{index}", [rotated[spiffe_id(index)]])
            await wait_active(envoy, rotated)
            figures["broker_rotation_all_active_s"] = time.perf_counter() - start
        async with node(directory / "files", ca=ca, broker=False, nursery=nursery) as (
            agent,
            envoy,
            _,
            svids,
        ):
            current = {}
            for index in range(pods):
                current[spiffe_id(index)] = ca.issue(spiffe_id(index))
                write_svid(svids, owner=f"bench/sa{index}", content=current[spiffe_id(index)])

            async def read() -> (
                bool
            ):  # the ADDs are timed from files already read, as the broker answers at once
                return set(current) <= set(agent.journal.state.identity.svids)

            await wait_for(read, timeout=TIMEOUT, interval=0.02)
            figures.update(percentiles("files_add_to_active", await timed_adds(agent, envoy, current, adds)))
            rotated = {name: ca.issue(name) for name in current}
            start = time.perf_counter()
            for index in range(pods):
                write_svid(svids, owner=f"bench/sa{index}", content=rotated[spiffe_id(index)])
            await wait_active(envoy, rotated)
            figures["files_rotation_all_active_s"] = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    figures["add_p50_ratio_broker_vs_files"] = (
        figures["add_to_active_p50_ms"] / figures["files_add_to_active_p50_ms"]
    )
    figures["rotation_ratio_broker_vs_files"] = (
        figures["broker_rotation_all_active_s"] / figures["files_rotation_all_active_s"]
    )
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--adds", type=int, default=20, help="pod ADDs timed one at a time (the first ones)")
    arguments = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-spiffe-") as directory:
        figures: Callable[[], Any] = functools.partial(
            measure, arguments.pods, arguments.adds, Path(directory)
        )
        result = trio.run(figures)
    for name, value in sorted(result.items()):
        print(f"{name:36} {value:.3f}" if isinstance(value, float) else f"{name:36} {value}")
    write_results("spiffe", result)


if __name__ == "__main__":
    main()
