"""CNI ADD and DEL latency over N pods, each in its own real network namespace (root; needs nft and ip).

The agent is the real one (journal, log fsync, projection, CNI service) with no proxy to wait for: `ack_wait` is
0, so the figures exclude the proxy's ACK, as the issue asks. Three layers are timed per pod:

* `exec`: the real `aether-cni` executable (what kubelet pays): interpreter start, imports, agent call, netns;
* `in-process`: `run_plugin` in this process (the plugin's own work: config, agent call, netns programming);
* `netns`: `apply_capture` / `remove_capture` alone (pyroute2 + one `nft -f`).

    python bench/bench_cni.py [--pods 100]
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import trio
from _cni import cni_config, cni_environment, latency_ms
from _common import write_results

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.cni import CapturePlan, CaptureSettings, apply_capture, remove_capture, run_plugin
from aether.cni.server import PodMetadata
from aether.rpc.listen import ListenAddress

PLUGIN = Path(sys.executable).parent / "aether-cni"
MANAGED = PodMetadata(service_account="web", labels={"aether.io/managed": "true"})


async def _timed(action: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


async def _in_process(command: str, index: int, netns: Path, socket: Path) -> None:
    output, status = await trio.to_thread.run_sync(
        run_plugin, cni_environment(command, index, netns), cni_config(socket, index)
    )
    assert status == 0, output


async def _executable(command: str, index: int, netns: Path, socket: Path) -> None:
    done = await trio.run_process(
        [str(PLUGIN)],
        stdin=cni_config(socket, index),
        env=cni_environment(command, index, netns),
        capture_stdout=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout


async def _netns(command: str, index: int, netns: Path, socket: Path) -> None:
    if command == "ADD":
        plan = CapturePlan.merge(CaptureSettings(), node_ports=(22,), mesh_dns=("10.255.0.1", 18054))
        await trio.to_thread.run_sync(apply_capture, netns, plan)
    else:
        await trio.to_thread.run_sync(remove_capture, netns)


async def _measure(
    pods: int, directory: Path, namespaces: list[Path]
) -> dict[str, dict[str, dict[str, float]]]:
    config = AgentConfig(
        node_name="bench",
        log_dir=directory / "log",
        xds=ListenAddress.unix(directory / "xds.sock"),
        admin_socket=directory / "admin.sock",
        cni_socket=directory / "cni.sock",
        cni_pods=lambda namespace, name: MANAGED,
        cni_ack_wait=0.0,
    )
    figures: dict[str, dict[str, dict[str, float]]] = {}
    async with trio.open_nursery() as nursery:
        agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
        for label, run in (("netns", _netns), ("in-process", _in_process), ("exec", _executable)):
            samples: dict[str, list[float]] = {"ADD": [], "DEL": []}
            for command in ("ADD", "DEL"):
                for index, netns in enumerate(namespaces):
                    call = functools.partial(run, command, index, netns, config.cni_socket)
                    samples[command].append(await _timed(call))
            figures[label] = {command.lower(): latency_ms(values) for command, values in samples.items()}
        assert agent.cni is not None
        figures["agent"] = {
            "cni": {key: float(value) for key, value in attrs.asdict(agent.cni.statistics()).items()}
        }
        nursery.cancel_scope.cancel()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100)
    arguments = parser.parse_args()
    # With no proxy every AddPod logs that the (zero) ACK wait ran out: expected here, and noise.
    logging.getLogger("aether.cni").setLevel(logging.ERROR)
    if os.geteuid() != 0 or shutil.which("nft") is None:
        print("bench_cni: needs root and nft (Debian nftables); skipped", file=sys.stderr)
        return
    prefix = f"aecni-bench-{os.getpid()}"
    names = [f"{prefix}-{index}" for index in range(arguments.pods)]
    directory = Path(tempfile.mkdtemp(prefix="aecnib", dir="/tmp"))
    try:
        for name in names:
            subprocess.run(["ip", "netns", "add", name], check=True)
            subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        figures = trio.run(_measure, arguments.pods, directory, [Path("/run/netns") / name for name in names])
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)
    agent = figures.pop("agent")
    print(f"CNI ADD/DEL latency over {arguments.pods} pods in network namespaces (no proxy ACK wait)")
    print(f"{'layer':<12} {'ADD p50':>9} {'ADD p99':>9} {'DEL p50':>9} {'DEL p99':>9}   (ms)")
    for label, by_command in figures.items():
        add, delete = by_command["add"], by_command["del"]
        print(
            f"{label:<12} {add['p50_ms']:>9} {add['p99_ms']:>9} {delete['p50_ms']:>9} {delete['p99_ms']:>9}"
        )
    write_results("cni", {"pods": arguments.pods, "latency": figures, **agent})


if __name__ == "__main__":
    main()
