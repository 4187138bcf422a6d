"""Shared pieces of the CNI tests: real network namespaces, sockets inside them, a running agent, plugin runs.

Every namespace is made here and removed after its test, whatever happens; addresses exist only inside them:
the pod namespace (10.88.0.2) reaches the node namespace (10.88.0.1 and 10.88.0.3) over a veth pair, and its
default route points there, so any destination (a ClusterIP-like 10.96.x.y) has a route and nothing leaves.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from aether.agent.app import AgentConfig, RunningAgent, serve_agent
from aether.cni import entered_netns, run_plugin
from aether.cni.server import PodLookup, PodMetadata
from aether.rpc.listen import ListenAddress
from tests.needs import ROOT, needs

NODE_NAME = "node-a"
POD_IP = "10.88.0.2"
NODE_IP = "10.88.0.1"
NODE_IP_2 = "10.88.0.3"
VIP = "10.96.7.9"
"""A ClusterIP-like address: the node namespace holds it when a test wants a real (non-mesh) server there."""
IP_TRANSPARENT = 19
MANAGED = {"aether.io/managed": "true"}
PLUGIN = Path(sys.executable).parent / "aether-cni"

needs_netns = needs(ROOT, "nft", "ip")
"""Real network namespaces are made and programmed."""

_names = itertools.count()


def _ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], check=True, capture_output=True)


@attrs.frozen(kw_only=True)
class NetnsPair:
    """A pod namespace and a node namespace joined by a veth pair."""

    pod: str
    node: str

    @property
    def pod_path(self) -> Path:
        return Path("/run/netns") / self.pod

    @property
    def node_path(self) -> Path:
        return Path("/run/netns") / self.node

    def exec(self, namespace: str, *command: str) -> str:
        """Run `command` in `namespace` (a name) and return its stdout."""
        done = subprocess.run(
            ["ip", "netns", "exec", namespace, *command], check=True, capture_output=True, text=True
        )
        return done.stdout


@pytest.fixture
def netns_pair() -> Iterator[NetnsPair]:
    index = next(_names)
    pair = NetnsPair(pod=f"aecni-pod-{os.getpid()}-{index}", node=f"aecni-node-{os.getpid()}-{index}")
    veth = f"aec{os.getpid() % 100000}x{index}"
    try:
        _ip("netns", "add", pair.pod)
        _ip("netns", "add", pair.node)
        _ip(
            "link",
            "add",
            f"{veth}a",
            "netns",
            pair.pod,
            "type",
            "veth",
            "peer",
            "name",
            f"{veth}b",
            "netns",
            pair.node,
        )
        for name, device, addresses in (
            (pair.pod, f"{veth}a", (f"{POD_IP}/24",)),
            (pair.node, f"{veth}b", (f"{NODE_IP}/24", f"{NODE_IP_2}/24")),
        ):
            for address in addresses:
                _ip("-n", name, "addr", "add", address, "dev", device)
            _ip("-n", name, "link", "set", device, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", pair.pod, "route", "add", "default", "via", NODE_IP)
        yield pair
    finally:
        for name in (pair.pod, pair.node):  # removing a namespace removes its veth end, rules and tables
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def socket_in(
    netns: Path, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM
) -> trio.socket.SocketType:
    """Return a trio socket created inside `netns` (a socket stays in the namespace it was made in)."""
    made: list[socket.socket] = []

    def make() -> None:
        with entered_netns(netns):
            made.append(socket.socket(family, kind))

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    return trio.socket.from_stdlib_socket(made[0])


UdpServer = trio.socket.SocketType


async def udp_server(netns: Path, address: tuple[str, int], *, transparent: bool = False) -> UdpServer:
    """A UDP socket in `netns` bound to `address` (`answer` answers one datagram on it)."""
    sock = socket_in(netns, kind=socket.SOCK_DGRAM)
    if transparent:  # what the proxy's listener of a Service destination sets: the address is not the pod's
        sock.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
    await sock.bind(address)
    return sock


async def answer(server: UdpServer, tag: bytes, *, forever: bool = False) -> None:
    """Answer the next datagram on `server` (every one, `forever`) with `<tag>:<datagram>`."""
    while forever:
        data, peer = await server.recvfrom(512)
        await server.sendto(tag + b":" + data, peer)
    data, peer = await server.recvfrom(512)
    await server.sendto(tag + b":" + data, peer)


async def udp_exchange(
    netns: Path,
    destination: tuple[str, int],
    payload: bytes = b"ping",
    *,
    # A datagram lost is an answer that never comes: the deadline is the exchange's own (STYLE C5).
    timeout: float = 5,  # noqa: ASYNC109
) -> bytes:
    """Send `payload` from a *connected* UDP socket in `netns` and return the answer: a connected socket only
    takes datagrams from `destination` itself, so an answer proves it came from where the client sent."""
    with socket_in(netns, kind=socket.SOCK_DGRAM) as client, trio.fail_after(timeout):
        await client.connect(destination)
        await client.send(payload)
        return bytes(await client.recv(512))


@attrs.define
class Agent:
    """A running agent with its CNI service; `pods` is what its pod lookup knows."""

    running: RunningAgent
    socket: Path
    plugin_socket: Path
    """Where the host's Python-free executable reaches this agent (`aether.cni.plugin_server`)."""
    records: Path
    pods: dict[tuple[str, str], PodMetadata]


ANNOTATIONS = {
    "capture.aether.io/exclude-outbound-ports": "9090",
    "capture.aether.io/exclude-outbound-ip-ranges": f"{NODE_IP_2}/32",
}


def managed(agent: Agent, name: str = "web-1", *, annotations: dict[str, str] | None = None) -> None:
    """Make the agent's pod lookup know `default/<name>` as a managed pod (with `ANNOTATIONS` by default)."""
    agent.pods[("default", name)] = PodMetadata(
        uid=f"uid-{name}", service_account="web", labels=MANAGED, annotations=annotations or ANNOTATIONS
    )


def dict_lookup(pods: Mapping[tuple[str, str], PodMetadata]) -> PodLookup:
    """A pod lookup answering from `pods` (None, so the request's metadata, for any other pod)."""
    return lambda namespace, name: pods.get((namespace, name))


def agent_config(directory: Path, *, lookup: PodLookup, ack_wait: float) -> AgentConfig:
    """An agent whose sockets and files are all in `directory`, with `lookup` as its pod metadata."""
    return AgentConfig(
        node_name=NODE_NAME,
        log_dir=directory / "log",
        xds=ListenAddress.unix(directory / "xds.sock"),
        admin_socket=directory / "admin.sock",
        cni_socket=directory / "cni.sock",
        cni_plugin_socket=directory / "cni-plugin.sock",
        cni_pods=lookup,
        cni_ack_wait=ack_wait,
        dns_records=directory / "records.json",
    )


@pytest.fixture
async def agent(nursery: trio.Nursery, short_dir: Path) -> Agent:
    pods: dict[tuple[str, str], PodMetadata] = {}
    # No Envoy in these tests: a short wait for its ACK that runs out at once.
    config = agent_config(short_dir, lookup=dict_lookup(pods), ack_wait=0.2)
    running: RunningAgent = await nursery.start(serve_agent, config)
    return Agent(
        running=running,
        socket=short_dir / "cni.sock",
        plugin_socket=short_dir / "cni-plugin.sock",
        records=short_dir / "records.json",
        pods=pods,
    )


def prev_result(ip: str = POD_IP) -> dict[str, Any]:
    """A previous plugin's result (what a bridge or ptp plugin would hand us)."""
    return {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
        "ips": [{"address": f"{ip}/24", "gateway": NODE_IP, "interface": 0}],
    }


def network_config(agent_socket: Path, **extra: Any) -> dict[str, Any]:
    return {
        "cniVersion": "1.1.0",
        "name": "k8s-pod-network",
        "type": "aether-cni",
        "agentSocket": str(agent_socket),
        "agentTimeoutSeconds": 5,
        "prevResult": prev_result(),
        **extra,
    }


def environment(
    command: str,
    *,
    netns: Path | None,
    container: str = "c0ffee",
    pod: str = "web-1",
    namespace: str = "default",
) -> dict[str, str]:
    return {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container,
        "CNI_NETNS": str(netns) if netns is not None else "",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/opt/cni/bin",
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={pod};K8S_POD_UID=uid-{pod}",
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
    }


@attrs.frozen(kw_only=True)
class PluginRun:
    status: int
    output: dict[str, Any] | None
    """Stdout as JSON (None when empty)."""


async def run_cni_process(env: Mapping[str, str], config: Mapping[str, Any] | bytes) -> PluginRun:
    """Run the real `aether-cni` console script with `env` and `config` on stdin."""
    stdin = config if isinstance(config, bytes) else json.dumps(config).encode()
    done = await trio.run_process([str(PLUGIN)], stdin=stdin, capture_stdout=True, check=False, env=dict(env))
    text = done.stdout.decode().strip()
    return PluginRun(status=done.returncode, output=json.loads(text) if text else None)


async def run_cni(env: Mapping[str, str], config: Mapping[str, Any]) -> PluginRun:
    """Run the plugin in this process (its own trio run in a worker thread): same code, no interpreter start."""
    runner: Callable[[], tuple[str, int]] = functools.partial(run_plugin, env, json.dumps(config).encode())
    text, status = await trio.to_thread.run_sync(runner)
    return PluginRun(status=status, output=json.loads(text) if text else None)


def ruleset(pair: NetnsPair) -> str:
    """The pod namespace's whole nftables ruleset, as text."""
    return pair.exec(pair.pod, "nft", "list", "ruleset")


def capture_routing(pair: NetnsPair) -> tuple[str, str]:
    """The pod namespace's policy rules and its capture table's routes."""
    # IPv4 only: the kernel adds IPv6 link-local routes on its own schedule, which would make this racy.
    rules = pair.exec(pair.pod, "ip", "-4", "rule")
    routes = pair.exec(pair.pod, "ip", "-4", "route", "show", "table", "all")
    return rules, routes
