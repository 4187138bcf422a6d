"""Programming a pod's network namespace: the policy rule and local table (pyroute2), the nftables table (`nft`).

Every function here blocks (netlink, a subprocess) and switches the *calling thread* into the pod's namespace for
its duration, so call them from the plugin's main thread or through `trio.to_thread.run_sync` (STYLE C4); the
thread is always switched back, and sockets opened meanwhile stay in the pod's namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute  # type: ignore[import-untyped]
from pyroute2.netlink.exceptions import NetlinkError  # type: ignore[import-untyped]

from aether.cni.capture import (
    CAPTURE_MARK,
    CAPTURE_TABLE,
    NFT_TABLE,
    RULE_PRIORITY,
    CapturePlan,
    render_ruleset,
    render_udp_services,
)
from aether.cni.errors import NetnsProgrammingFailed

__all__ = [
    "NFT_TIMEOUT",
    "apply_capture",
    "capture_problems",
    "entered_netns",
    "find_nft",
    "remove_capture",
    "write_udp_services",
]

_CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)

NFT_TIMEOUT = 10.0
"""Seconds `nft` may take: it answers in milliseconds; a hang (a wedged netlink socket) must not block a pod."""

_NFT_DIRECTORIES = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
"""Searched after PATH: kubelet and containerd run plugins with a minimal PATH that may lack sbin."""

_ABSENT = frozenset({errno.ENOENT, errno.ESRCH, errno.EEXIST})
"""Netlink answers that mean "already as wanted": deleting what is gone (ENOENT/ESRCH), adding what exists."""


def _setns(fd: int) -> None:
    if _LIBC.setns(fd, _CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@contextlib.contextmanager
def entered_netns(path: Path) -> Iterator[None]:
    """Switch the calling thread into the network namespace at `path` for the block, and back after it.

    Raises:
        FileNotFoundError: `path` does not exist.
        OSError: `path` is not a network namespace (setns fails with EINVAL).
    """
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)


def find_nft() -> str:
    """Return the path of the `nft` binary.

    Raises:
        NetnsProgrammingFailed: no `nft` on PATH nor in the sbin directories.
    """
    found = shutil.which("nft") or shutil.which("nft", path=os.pathsep.join(_NFT_DIRECTORIES))
    if found is None:
        raise NetnsProgrammingFailed(
            "the 'nft' binary was not found",
            details=f"install nftables; searched PATH and {_NFT_DIRECTORIES!r}",
        )
    return found


def _nft(arguments: list[str], *, script: str = "") -> str:
    """Run `nft` in the current thread's namespace; return its stdout."""
    try:
        done = subprocess.run(
            [find_nft(), *arguments],
            input=script,
            capture_output=True,
            text=True,
            timeout=NFT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsProgrammingFailed(f"nft {' '.join(arguments)!r} could not run", details=str(exc)) from exc
    if done.returncode != 0:
        raise NetnsProgrammingFailed(
            f"nft {' '.join(arguments)!r} failed with status {done.returncode}", details=done.stderr.strip()
        )
    return done.stdout


def _tolerant(action: Any) -> None:
    """Run a netlink call whose "already done" answers are fine."""
    try:
        action()
    except NetlinkError as exc:
        if exc.code not in _ABSENT:
            raise


def _route_rule(ipr: IPRoute, command: str) -> None:
    """Add or delete the policy rule `fwmark CAPTURE_MARK lookup CAPTURE_TABLE` and the table's local route."""
    loopback = ipr.link_lookup(ifname="lo")[0]
    if command == "add":
        ipr.link("set", index=loopback, state="up")
    _tolerant(
        lambda: ipr.rule(
            command, fwmark=CAPTURE_MARK, fwmask=0xFFFFFFFF, table=CAPTURE_TABLE, priority=RULE_PRIORITY
        )
    )
    # scope=host is required for a local route: without it the kernel answers EINVAL.
    _tolerant(
        lambda: ipr.route(
            command, dst="0.0.0.0/0", type="local", scope="host", oif=loopback, table=CAPTURE_TABLE
        )
    )


def apply_capture(netns: Path, plan: CapturePlan) -> None:
    """Program the capture of `plan` in the namespace at `netns`: all of it, or nothing.

    The routing part is idempotent; the nftables part replaces the table in one `nft -f` transaction. When that
    fails, the routing part is removed again (it captures nothing on its own: no packet carries the mark).

    Raises:
        NetnsProgrammingFailed: a netlink call or `nft` failed; the namespace is left without capture.
        FileNotFoundError: `netns` does not exist.
    """
    with entered_netns(netns):
        try:
            with IPRoute() as ipr:
                _route_rule(ipr, "add")
        except NetlinkError as exc:
            _remove_routing()
            raise NetnsProgrammingFailed(
                f"network namespace {str(netns)!r}: the capture route could not be added", details=str(exc)
            ) from exc
        try:
            _nft(["-f", "-"], script=render_ruleset(plan))
        except NetnsProgrammingFailed:
            _remove_routing()
            raise


def write_udp_services(netns: Path, destinations: Iterable[tuple[str, int]]) -> None:
    """Make the capture's set of served UDP destinations in the namespace at `netns` hold exactly `destinations`.

    One `nft -f` transaction; it creates the table and the set when the plugin has not programmed them yet (the
    plugin's ruleset then keeps the elements).

    Raises:
        NetnsProgrammingFailed: `nft` failed.
        FileNotFoundError: `netns` does not exist (the pod is gone).
    """
    with entered_netns(netns):
        _nft(["-f", "-"], script=render_udp_services(destinations))


def _remove_routing() -> None:
    with IPRoute() as ipr:
        _route_rule(ipr, "del")


def remove_capture(netns: Path) -> None:
    """Remove the capture table, rule and route from the namespace at `netns` (idempotent).

    Raises:
        NetnsProgrammingFailed: `nft` or netlink failed for another reason than "already gone".
        FileNotFoundError: `netns` does not exist (its rules went with it).
    """
    with entered_netns(netns):
        _nft(["-f", "-"], script=f"table ip {NFT_TABLE}\ndelete table ip {NFT_TABLE}\n")
        try:
            _remove_routing()
        except NetlinkError as exc:
            raise NetnsProgrammingFailed(
                f"network namespace {str(netns)!r}: the capture route could not be removed", details=str(exc)
            ) from exc


def capture_problems(netns: Path, plan: CapturePlan | None) -> tuple[str, ...]:
    """Return how the namespace at `netns` differs from `plan` (None: no capture at all); empty when it matches.

    Compared: the table's chains (type, hook) and rule counts, the excluded ranges and ports, the tproxy targets,
    the DNS target, and the policy rule and local route. Not the elements of `udp_services`: the agent changes
    them while the pod runs.

    Raises:
        FileNotFoundError: `netns` does not exist.
    """
    with entered_netns(netns):
        listing = _nft(["-j", "list", "tables", "ip"])
        present = any(
            item.get("table", {}).get("name") == NFT_TABLE for item in json.loads(listing)["nftables"]
        )
        actual = _summary(json.loads(_nft(["-j", "list", "table", "ip", NFT_TABLE]))) if present else None
        with IPRoute() as ipr:
            routed = _routing_present(ipr)
    if plan is None:
        problems = [f"table ip {NFT_TABLE} is present but the pod is not captured"] if present else []
        return (*problems, *(["the capture policy rule is present"] if routed else []))
    if actual is None:
        return (f"table ip {NFT_TABLE} is missing",)
    problems = [
        f"table ip {NFT_TABLE}: {key} is {actual.get(key)!r}, expected {value!r}"
        for key, value in sorted(_expected_summary(plan).items())
        if actual.get(key) != value
    ]
    if not routed:
        problems.append(f"the policy rule 'fwmark lookup {CAPTURE_TABLE}' or its local route is missing")
    return tuple(problems)


def _routing_present(ipr: IPRoute) -> bool:
    rules = [rule for rule in ipr.get_rules(family=2) if rule.get("table") == CAPTURE_TABLE]
    routes = ipr.get_routes(family=2, table=CAPTURE_TABLE)
    return bool(rules) and bool(routes)


def _expected_summary(plan: CapturePlan) -> dict[str, Any]:
    """The summary `_summary` would make of the table `render_ruleset(plan)` creates."""
    chains = {"divert": ("route", "output"), "steer": ("filter", "prerouting")}
    rules = {"divert": 11 + (1 if plan.exclude_ports else 0), "steer": 2}
    targets: list[list[Any]] = []
    if plan.mesh_dns is not None:
        chains["dns"] = ("nat", "output")
        rules["dns"] = 3
        targets.append(["dnat", plan.mesh_dns[0], plan.mesh_dns[1]])
    targets += [["tproxy", "127.0.0.1", plan.tcp_port], ["tproxy", "ip daddr", 0]]
    return {
        "chains": {name: list(hook) for name, hook in sorted(chains.items())},
        "rules": dict(sorted(rules.items())),
        "ranges": list(plan.exclude_ranges),
        "ports": list(plan.exclude_ports),
        "targets": sorted(targets),
    }


def _summary(document: dict[str, Any]) -> dict[str, Any]:
    """Reduce `nft -j list table` output to what `_expected_summary` predicts."""
    chains: dict[str, list[str]] = {}
    rules: dict[str, int] = {}
    ranges: list[str] = []
    ports: list[int] = []
    targets: list[list[Any]] = []
    for item in document["nftables"]:
        if "chain" in item:
            chain = item["chain"]
            chains[chain["name"]] = [chain.get("type"), chain.get("hook")]
        elif "set" in item and item["set"]["name"] == "excluded_ranges":
            for element in item["set"].get("elem", []):
                prefix = element.get("prefix") if isinstance(element, dict) else None
                ranges.append(f"{prefix['addr']}/{prefix['len']}" if prefix else f"{element}/32")
        elif "rule" in item:
            rule = item["rule"]
            rules[rule["chain"]] = rules.get(rule["chain"], 0) + 1
            for expression in rule["expr"]:
                for kind in ("tproxy", "dnat"):
                    if kind in expression:
                        targets.append(
                            [kind, _address(expression[kind]["addr"]), expression[kind].get("port", 0)]
                        )
                right = expression.get("match", {}).get("right")
                if rule["chain"] == "divert" and isinstance(right, dict) and "set" in right:
                    ports += [value for value in right["set"] if isinstance(value, int)]
                elif rule["chain"] == "divert" and isinstance(right, int) and right != 53:
                    left = expression["match"].get("left", {})
                    if "payload" in left:
                        ports.append(right)
    return {
        "chains": dict(sorted(chains.items())),
        "rules": dict(sorted(rules.items())),
        "ranges": sorted(ranges, key=_range_key),
        "ports": sorted(ports),
        "targets": sorted(targets),
    }


def _address(value: Any) -> str:
    """A target address as text: `10.0.0.1`, or `ip daddr` for the packet's own destination."""
    if isinstance(value, dict) and "payload" in value:
        return f"{value['payload']['protocol']} {value['payload']['field']}"
    return str(value)


def _range_key(text: str) -> tuple[int, int]:
    network = ipaddress.IPv4Network(text)
    return int(network.network_address), network.prefixlen
