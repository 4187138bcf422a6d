"""`aether demo --netns`: each pod in a network namespace of its own, as on a Kubernetes node (needs root).

A pod's namespace is wired to the host by a veth pair on a /30: the host side is `10.210.<n>.1`, the pod side
(`eth0`) `10.210.<n>.2`, the pod's IP, with its default route through the host side. Envoy stays in the host's
namespace: it binds each pod's listeners inside the pod's namespace (`network_namespace_filepath`) and reaches
every pod's inbound at `<pod IP>:18008` through its veth. Nothing here is routed beyond the machine.

Sockets belong to the namespace of the thread that made them, so `listen_in` and `connect_in` make theirs in a
worker thread switched into the pod's namespace (`aether.cni.netns.entered_netns`) and hand them to trio.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import attrs
import trio

from aether.cni.netns import entered_netns
from aether.cni.plugin import run_plugin

__all__ = [
    "NETNS_DIRECTORY",
    "PodNetwork",
    "address_holders",
    "connect_in",
    "listen_in",
    "namespace_prefix_of",
    "pod_ip",
]

NETNS_DIRECTORY = Path("/run/netns")
PREFIX = "aether-demo"


def pod_ip(index: int) -> str:
    """The pod side of the `index`-th pod's /30 (`index` is the last octet of its loopback address)."""
    return f"10.210.{index}.2"


def _host_ip(index: int) -> str:
    return f"10.210.{index}.1"


def address_holders(index: int) -> tuple[str, ...]:
    """Return the host's links that hold the host side of the `index`-th pod's /30, sorted (blocking).

    Another link than the pod's own means another network answers for the pod's IP: the host routes to the first
    of them, so the pod's traffic would go to a namespace nobody serves (one that a killed demo left behind, or
    another demo's).
    """
    result = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, timeout=10)
    if result.returncode != 0:
        raise OSError(f"ip -j -4 addr show: {result.stderr.strip() or result.returncode}")
    host = _host_ip(index)
    return tuple(
        sorted(
            str(link["ifname"])
            for link in json.loads(result.stdout or "[]")
            if any(info.get("local") == host for info in link.get("addr_info", ()))
        )
    )


def namespace_prefix_of(link: str) -> str:
    """The name prefix of the namespaces of the demo run whose host link `link` is; empty if it is no demo's."""
    match = re.fullmatch(r"ad([0-9a-f]{5})h\d+", link)
    return f"{PREFIX}-{match.group(1)}" if match else ""


def _ip(*arguments: str) -> None:
    result = subprocess.run(["ip", *arguments], capture_output=True, text=True, timeout=10)
    if result.returncode != 0:
        raise OSError(f"ip {' '.join(arguments)}: {result.stderr.strip() or result.returncode}")


@attrs.frozen(kw_only=True)
class PodNetwork:
    """One pod's network namespace and the veth pair that joins it to the host."""

    pod: str
    index: int
    run: str
    """A short tag of the demo run, in the namespace's and the host link's names."""

    @property
    def name(self) -> str:
        return f"{PREFIX}-{self.run}-{self.pod}"

    @property
    def netns(self) -> Path:
        return NETNS_DIRECTORY / self.name

    @property
    def host_link(self) -> str:
        # An interface name has at most 15 characters; `namespace_prefix_of` reads the run's tag back.
        return f"ad{self.run[:5]}h{self.index}"[:15]

    @property
    def ip(self) -> str:
        return pod_ip(self.index)

    def create(self) -> None:
        """Create the namespace and its link (blocking; removes a half-made one on failure)."""
        try:
            _ip("netns", "add", self.name)
            _ip("link", "add", self.host_link, "type", "veth", "peer", "name", "eth0", "netns", self.name)
            _ip("addr", "add", f"{_host_ip(self.index)}/30", "dev", self.host_link)
            _ip("link", "set", self.host_link, "up")
            _ip("-n", self.name, "addr", "add", f"{self.ip}/30", "dev", "eth0")
            _ip("-n", self.name, "link", "set", "eth0", "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
            _ip("-n", self.name, "route", "add", "default", "via", _host_ip(self.index))
        except OSError:
            self.remove()
            raise

    def remove(self) -> None:
        """Delete the namespace (its end of the veth pair goes with it, and so the host's end); never raises."""
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=10, check=False)
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, timeout=10, check=False)

    def cni(self, command: str, *, namespace: str, uid: str, agent_socket: Path) -> None:
        """Run `aether-cni` for this pod as a container runtime would (blocking); raise with its error if it fails."""
        environment = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": self.name,
            "CNI_NETNS": str(self.netns),
            "CNI_IFNAME": "eth0",
            "CNI_PATH": "/opt/cni/bin",
            "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={self.pod};K8S_POD_UID={uid}",
        }
        config = {
            "cniVersion": "1.1.0",
            "name": "aether-demo",
            "type": "aether-cni",
            "agentSocket": str(agent_socket),
            "prevResult": {
                "cniVersion": "1.1.0",
                "interfaces": [{"name": "eth0", "sandbox": str(self.netns)}],
                "ips": [{"address": f"{self.ip}/30", "gateway": _host_ip(self.index), "interface": 0}],
            },
        }
        output, status = run_plugin(environment, json.dumps(config).encode())
        if status != 0:
            raise OSError(f"aether-cni {command} for pod {self.pod}: {output.strip()}")


def _socket_in(netns: Path) -> socket.socket:
    with entered_netns(netns):
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)


async def listen_in(netns: Path, port: int) -> trio.SocketListener:
    """Return a listener on `0.0.0.0:port` inside `netns`."""
    raw = await trio.to_thread.run_sync(_socket_in, netns)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock = trio.socket.from_stdlib_socket(raw)
    await sock.bind(("0.0.0.0", port))
    sock.listen(128)
    return trio.SocketListener(sock)


async def connect_in(netns: Path, host: str, port: int) -> trio.SocketStream:
    """Return a TCP connection to `host:port` made from inside `netns`."""
    sock = trio.socket.from_stdlib_socket(await trio.to_thread.run_sync(_socket_in, netns))
    try:
        await sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)
