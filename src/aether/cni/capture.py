"""What to capture in a pod's network namespace, and the nftables ruleset that does it (pure: values in, text out).

The capture is a TPROXY-style mark-and-divert, so the IP header is never rewritten and the proxy sees the original
destination:

1. `divert` (route hook, output): a new outbound TCP or UDP connection of the pod gets the capture mark on its
   first packet and on its conntrack entry, and its later packets get the mark back from the entry. Not
   captured: loopback, the proxy's own (`PASSTHROUGH_MARK` on its socket), a reply of a connection made *to* the
   pod, DNS (port 53, which is DNATed instead), an excluded port or range, and a TCP connection that began before
   the capture (whose SYN this chain never saw). Changing the mark in a route chain makes the kernel route the
   packet again: the policy rule `fwmark CAPTURE_MARK lookup CAPTURE_TABLE` finds the table's one `local` route,
   so the packet loops back through `lo`.
2. `steer` (filter hook, prerouting): a marked packet arriving on `lo` is handed by `tproxy` to the socket on
   18001 (TCP) or 18082 (UDP), which must have `IP_TRANSPARENT`; it sees the original destination as its local
   address (TCP) or in `IP_ORIGDSTADDR` (UDP).
3. `dns` (nat hook, output): the pod's DNS (UDP and TCP port 53, not on loopback) is DNATed to the node's mesh-dns.

One table holds all three chains, so `nft -f` applies the whole capture or nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from aether.proto.cni.v1 import cni_pb2

__all__ = [
    "BUILTIN_EXCLUDED_RANGES",
    "CAPTURE_MARK",
    "CAPTURE_PORT",
    "CAPTURE_TABLE",
    "EXCLUDE_OUTBOUND_IP_RANGES",
    "EXCLUDE_OUTBOUND_PORTS",
    "L4_PORT",
    "MESH_DNS_PORT",
    "NFT_TABLE",
    "PASSTHROUGH_MARK",
    "RULE_PRIORITY",
    "CapturePlan",
    "CaptureSettings",
    "ip_range_problem",
    "port_problem",
    "render_ruleset",
    "settings_from_annotations",
]

EXCLUDE_OUTBOUND_PORTS = "capture.aether.io/exclude-outbound-ports"
"""Pod annotation: comma-separated destination ports (TCP and UDP) never captured."""
EXCLUDE_OUTBOUND_IP_RANGES = "capture.aether.io/exclude-outbound-ip-ranges"
"""Pod annotation: comma-separated IPv4 CIDRs (or addresses) never captured."""

# The data-plane contract (DESIGN.md section 4), spelled in `aether.core.project.names`. Repeated here because
# importing that module loads the whole projection, which would cost every plugin run a fifth of a second;
# `tests/cni/test_capture.py` checks that the values agree.
CAPTURE_PORT = 18001
"""Where captured TCP lands (the pod's capture listener)."""
L4_PORT = 18082
"""Where captured UDP lands (the pod's L4 port)."""
PASSTHROUGH_MARK = 0xAE7E
"""SO_MARK of the proxy's own connections: never captured."""

CAPTURE_MARK = 0xAE71
"""The packet mark of captured traffic. Distinct from `PASSTHROUGH_MARK` (0xae7e, the proxy's own sockets) and
compared as a whole word, so neither the proxy's mark nor another component's low bits can match it."""
CAPTURE_TABLE = 0xAE71
"""The routing table holding the one `local default` route; numbered like the mark so `ip rule` reads at a glance."""
RULE_PRIORITY = 100
"""Priority of the `fwmark` policy rule: before `main` (32766); nothing else in a pod's netns uses rules."""
NFT_TABLE = "aether_capture"
"""The nftables table (family `ip`) that holds the pod's whole capture."""
MESH_DNS_PORT = 18054
"""Where the node's mesh-dns listens (DESIGN.md section 4)."""

BUILTIN_EXCLUDED_RANGES = ("169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32")
"""Never captured whatever the pod says: link-local (cloud metadata, kubelet-less probes), multicast, broadcast."""


def port_problem(text: str, *, what: str) -> str | None:
    """Check one port (`1..65535`, ASCII digits); return why it is not one, or None."""
    value = text.strip()
    if value.isascii() and value.isdigit() and 1 <= int(value) <= 65535:
        return None
    return f"{what}: a port must be 1..65535 (got {text!r})"


def ip_range_problem(text: str, *, what: str) -> str | None:
    """Check one IPv4 CIDR or address; return why it is not one, or None."""
    try:
        ipaddress.IPv4Network(text.strip(), strict=False)
    except ValueError:
        return f"{what}: an IP range must be an IPv4 CIDR such as '10.0.0.0/8' (got {text!r})"
    return None


def _normal_range(text: str) -> str:
    return str(ipaddress.IPv4Network(text.strip(), strict=False))


@attrs.frozen(kw_only=True)
class CaptureSettings:
    """A pod's own capture exclusions (from its annotations), normalized: sorted and distinct."""

    exclude_ports: tuple[int, ...] = ()
    exclude_ranges: tuple[str, ...] = ()
    """Normalized CIDRs (`10.1.2.3` becomes `10.1.2.3/32`)."""

    @classmethod
    def from_proto(cls, message: cni_pb2.CaptureSettings) -> CaptureSettings:
        """Read the settings the agent sent (it sends them normalized; they are normalized again anyway)."""
        return cls(
            exclude_ports=tuple(sorted(set(message.exclude_outbound_ports))),
            exclude_ranges=tuple(
                sorted({_normal_range(text) for text in message.exclude_outbound_ip_ranges})
            ),
        )

    def to_proto(self) -> cni_pb2.CaptureSettings:
        """Return the settings as the CNI service sends them."""
        # Here, not at the top: `aether-cni VERSION` imports this module without the protos.
        from aether.proto.cni.v1 import cni_pb2

        return cni_pb2.CaptureSettings(
            exclude_outbound_ports=list(self.exclude_ports),
            exclude_outbound_ip_ranges=list(self.exclude_ranges),
        )


def settings_from_annotations(annotations: Mapping[str, str]) -> tuple[CaptureSettings, tuple[str, ...]]:
    """Read the `capture.aether.io/*` annotations; an entry that does not parse is skipped with a warning.

    Skipping keeps the pod in the mesh with the rest of its exclusions (STYLE E6): one typo must not take down a
    pod's start, and the warning names the annotation and the entry to fix.

    Returns:
        The settings, and one warning per skipped entry.
    """
    warnings: list[str] = []
    ports: set[int] = set()
    for item in _items(annotations.get(EXCLUDE_OUTBOUND_PORTS, "")):
        problem = port_problem(item, what=f"annotation {EXCLUDE_OUTBOUND_PORTS!r}")
        if problem is None:
            ports.add(int(item))
        else:
            warnings.append(problem)
    ranges: set[str] = set()
    for item in _items(annotations.get(EXCLUDE_OUTBOUND_IP_RANGES, "")):
        problem = ip_range_problem(item, what=f"annotation {EXCLUDE_OUTBOUND_IP_RANGES!r}")
        if problem is None:
            ranges.add(_normal_range(item))
        else:
            warnings.append(problem)
    settings = CaptureSettings(exclude_ports=tuple(sorted(ports)), exclude_ranges=tuple(sorted(ranges)))
    return settings, tuple(warnings)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


@attrs.frozen(kw_only=True)
class CapturePlan:
    """Everything the ruleset of one pod depends on: the pod's settings merged with the node's."""

    exclude_ports: tuple[int, ...] = ()
    """Sorted, distinct."""
    exclude_ranges: tuple[str, ...] = BUILTIN_EXCLUDED_RANGES
    """Normalized CIDRs, sorted, distinct; always includes `BUILTIN_EXCLUDED_RANGES`."""
    mesh_dns: tuple[str, int] | None = None
    """`(IPv4, port)` of the node's mesh-dns; None: the pod's DNS is left alone."""
    tcp_port: int = CAPTURE_PORT
    udp_port: int = L4_PORT
    proxy_mark: int = PASSTHROUGH_MARK
    capture_mark: int = CAPTURE_MARK

    @classmethod
    def merge(
        cls,
        pod: CaptureSettings,
        *,
        node_ports: Iterable[int] = (),
        node_ranges: Iterable[str] = (),
        mesh_dns: tuple[str, int] | None = None,
    ) -> CapturePlan:
        """Return the plan of a pod: its exclusions plus the node's and the built-in ones, normalized."""
        ranges = {
            _normal_range(text) for text in (*pod.exclude_ranges, *node_ranges, *BUILTIN_EXCLUDED_RANGES)
        }
        return cls(
            exclude_ports=tuple(sorted({*pod.exclude_ports, *node_ports})),
            exclude_ranges=tuple(sorted(ranges, key=lambda text: ipaddress.IPv4Network(text))),
            mesh_dns=mesh_dns,
        )


def render_ruleset(plan: CapturePlan) -> str:
    """Return the `nft -f` script that replaces the pod's capture table with `plan`'s, in one transaction.

    The script first declares the table (a no-op when it exists) and deletes it, so applying it twice gives the
    same ruleset (ADD is idempotent) and a failure anywhere leaves the previous ruleset untouched.
    """
    ranges = ", ".join(plan.exclude_ranges)
    lines = [
        f"table ip {NFT_TABLE}",
        f"delete table ip {NFT_TABLE}",
        f"table ip {NFT_TABLE} {{",
        "\tset excluded_ranges {",
        "\t\ttype ipv4_addr; flags interval;",
        f"\t\telements = {{ {ranges} }}",
        "\t}",
        "\tchain divert {",
        "\t\ttype route hook output priority mangle; policy accept;",
        '\t\toifname "lo" return',
        f"\t\tmeta mark {plan.proxy_mark:#x} return",
        "\t\tct direction reply return",
        # Conntrack starts in the namespace with this table, and picks up a connection it did not see begin
        # mid-stream, taking the first packet it meets for the original direction. Callers connect to a pod's
        # inbound before ADD programs the capture (the agent advertises the pod first): the pod's answers, taken
        # for new outbound packets, went to the capture listener, which reset the connection. So only a TCP
        # connection whose SYN passes here is captured, and its entry remembers it (UDP has no such tell).
        f"\t\tct mark {plan.capture_mark:#x} meta mark set {plan.capture_mark:#x} return",
        "\t\tct state != new return",
        "\t\tmeta l4proto tcp tcp flags & (fin | syn | rst | ack) != syn return",
        "\t\tip daddr @excluded_ranges return",
        "\t\tmeta l4proto { tcp, udp } th dport 53 return",
    ]
    if plan.exclude_ports:
        ports = ", ".join(str(port) for port in plan.exclude_ports)
        lines.append(f"\t\tmeta l4proto {{ tcp, udp }} th dport {{ {ports} }} return")
    lines += [
        f"\t\tmeta l4proto {{ tcp, udp }} meta mark set {plan.capture_mark:#x} ct mark set {plan.capture_mark:#x}",
        "\t}",
        "\tchain steer {",
        "\t\ttype filter hook prerouting priority mangle; policy accept;",
        f'\t\tiifname "lo" meta mark {plan.capture_mark:#x} meta l4proto tcp tproxy to 127.0.0.1:{plan.tcp_port} accept',
        f'\t\tiifname "lo" meta mark {plan.capture_mark:#x} meta l4proto udp tproxy to 127.0.0.1:{plan.udp_port} accept',
        "\t}",
    ]
    if plan.mesh_dns is not None:
        host, port = plan.mesh_dns
        lines += [
            "\tchain dns {",
            "\t\ttype nat hook output priority -100; policy accept;",
            f"\t\tmeta mark {plan.proxy_mark:#x} return",
            "\t\tip daddr 127.0.0.0/8 return",
            f"\t\tmeta l4proto {{ tcp, udp }} th dport 53 dnat to {host}:{port}",
            "\t}",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"
