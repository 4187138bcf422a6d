"""CNI ADD as the runtime runs it: exec the host executable, wait for its exit; 100 pods, each in its own real
network namespace (root; needs nft, ip and a C compiler).

Per pod, in one run and interleaved, so the machine's noise falls on all alike:

* `/bin/true`: the reference, exec'd with the same environment and stdin (what any exec costs here);
* `aether-cni (C)`: the Python-free executable (`aether/cni/shim/aether-cni.c`, compiled here with cc), which
  forwards to the agent; the agent registers the pod and programs its namespace;
* `aether-cni (Python)`: the console script, on the first `--python-pods` pods (it costs about a second each).

The agent is the real one (journal, log fsync, projection, CNI service) with no proxy to wait for: `ack_wait` is 0,
so the figures exclude the proxy's ACK, as the issue asks. Between two ADDs of a pod, a DEL (not timed) clears it.

    python bench/bench_cni_add.py [--pods 100] [--python-pods 20]
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
from pathlib import Path

import trio
from _cni import cni_config, cni_environment, latency_ms
from _common import write_results

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.cni.server import PodMetadata
from aether.cni.wire import PLUGIN_SOCKET_VARIABLE
from aether.rpc.listen import ListenAddress
from aether.testing.cni_shim import compile_shim, find_compiler

PYTHON_PLUGIN = Path(sys.executable).parent / "aether-cni"
MANAGED = PodMetadata(service_account="web", labels={"aether.io/managed": "true"})
AIM_P99_MS = 100.0


def _environment(command: str, index: int, netns: Path, socket: Path) -> dict[str, str]:
    return {
        **cni_environment(command, index, netns),
        "CNI_PATH": "/opt/cni/bin",
        PLUGIN_SOCKET_VARIABLE: str(socket),
    }


async def _exec(program: Path, env: dict[str, str], stdin: bytes) -> float:
    """Exec `program` and wait for its exit; return the seconds it took (it must exit 0)."""
    start = time.perf_counter()
    done = await trio.run_process([str(program)], stdin=stdin, env=env, capture_stdout=True, check=False)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, (program, done.stdout)
    return elapsed


async def _measure(
    shim: Path, directory: Path, namespaces: list[Path], *, python_pods: int
) -> dict[str, dict[str, float]]:
    config = AgentConfig(
        node_name="bench",
        log_dir=directory / "log",
        xds=ListenAddress.unix(directory / "xds.sock"),
        admin_socket=directory / "admin.sock",
        cni_socket=directory / "cni.sock",
        cni_plugin_socket=directory / "cni-plugin.sock",
        cni_pods=lambda namespace, name: MANAGED,
        cni_ack_wait=0.0,
    )
    assert config.cni_socket is not None
    assert config.cni_plugin_socket is not None
    samples: dict[str, list[float]] = {"true": [], "shim": [], "python": []}
    async with trio.open_nursery() as nursery:
        agent: RunningAgent = await nursery.start(functools.partial(serve_agent, config))
        for index, netns in enumerate(namespaces):
            stdin = cni_config(config.cni_socket, index)
            add = _environment("ADD", index, netns, config.cni_plugin_socket)
            delete = _environment("DEL", index, netns, config.cni_plugin_socket)
            samples["true"].append(await _exec(Path("/bin/true"), add, stdin))
            samples["shim"].append(await _exec(shim, add, stdin))
            await _exec(shim, delete, stdin)
            if index < python_pods:
                samples["python"].append(await _exec(PYTHON_PLUGIN, add, stdin))
                await _exec(shim, delete, stdin)
        assert agent.cni_plugin is not None
        statistics_ = agent.cni_plugin.statistics()
        assert statistics_.failed == 0, statistics_
        nursery.cancel_scope.cancel()
    return {
        label: {"samples": len(values), **latency_ms(values)} for label, values in samples.items() if values
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument(
        "--python-pods", type=int, default=20, help="pods the Python plugin ADDs too (~1 s each)"
    )
    arguments = parser.parse_args()
    # With no proxy every AddPod logs that the (zero) ACK wait ran out: expected here, and noise.
    logging.getLogger("aether.cni").setLevel(logging.ERROR)
    if os.geteuid() != 0 or shutil.which("nft") is None or find_compiler() is None:
        print(
            "bench_cni_add: needs root, nft (Debian nftables) and cc (Debian gcc); skipped", file=sys.stderr
        )
        return
    prefix = f"aecni-add-{os.getpid()}"
    names = [f"{prefix}-{index}" for index in range(arguments.pods)]
    directory = Path(tempfile.mkdtemp(prefix="aecnia", dir="/tmp"))
    try:
        shim = compile_shim(directory)
        for name in names:
            subprocess.run(["ip", "netns", "add", name], check=True)
            subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        figures = trio.run(
            functools.partial(
                _measure,
                shim,
                directory,
                [Path("/run/netns") / name for name in names],
                python_pods=min(arguments.python_pods, arguments.pods),
            )
        )
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)
    reference = figures["true"]
    labels = {"true": "/bin/true", "shim": "aether-cni (C)", "python": "aether-cni (Python)"}
    print(f"CNI ADD, exec to exit, {arguments.pods} pods in network namespaces (no proxy ACK wait)")
    print(f"{'executable':<22} {'pods':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p50 / true':>11}")
    for label, figure in figures.items():
        ratio = figure["p50_ms"] / reference["p50_ms"] if reference["p50_ms"] else float("inf")
        print(
            f"{labels[label]:<22} {int(figure['samples']):>5} {figure['p50_ms']:>8} {figure['p99_ms']:>8}"
            f" {figure['max_ms']:>8} {ratio:>10.1f}x"
        )
    shim_p99 = figures["shim"]["p99_ms"]
    verdict = "met" if shim_p99 <= AIM_P99_MS else "NOT met"
    print(f"aim p99 <= {AIM_P99_MS:.0f} ms for aether-cni (C): {verdict} ({shim_p99} ms)")
    write_results(
        "cni_add",
        {
            "pods": arguments.pods,
            "python_pods": figures.get("python", {}).get("samples", 0),
            "latency": figures,
            "shim_p50_over_true": round(figures["shim"]["p50_ms"] / reference["p50_ms"], 2)
            if reference["p50_ms"]
            else None,
            "aim_p99_ms": AIM_P99_MS,
        },
    )


if __name__ == "__main__":
    main()
