"""What to capture in a pod's network namespace, and the nftables ruleset that does it (pure: values in, text out).

The capture is a TPROXY-style mark-and-divert, so the IP header is never rewritten and the proxy sees the original
destination:

1. `divert` (route hook, output): a new outbound TCP connection of the pod, and a new UDP flow to a destination
   of the set `udp_services`, gets the capture mark on its first packet and on its conntrack entry, and its later
   packets get the mark back from the entry (a UDP flow only while its destination stays in the set). Not
   captured: loopback, the proxy's own (`PASSTHROUGH_MARK` on its socket), a reply of a connection made *to* the
   pod, DNS (port 53, which is DNATed instead), an excluded port or range, a TCP connection that began before
   the capture (whose SYN this chain never saw), and every datagram to a destination outside `udp_services`.
   Changing the mark in a route chain makes the kernel route the packet again: the policy rule
   `fwmark CAPTURE_MARK lookup CAPTURE_TABLE` finds the table's one `local` route, so the packet loops back
   through `lo`.
2. `steer` (filter hook, prerouting): a marked packet arriving on `lo` is handed by `tproxy` to a socket with
   `IP_TRANSPARENT`: TCP to the one on 18001, which sees the original destination as its local address; UDP to the
   one bound to the datagram's own destination (the proxy's listener of that Service ClusterIP and port, which
   answers from that address).
3. `dns` (nat hook, output): the pod's DNS (UDP and TCP port 53, not on loopback) is DNATed to the node's mesh-dns.

Why UDP is captured by a set: Envoy's UDP proxy cannot send a datagram on to its original destination, so only
what a listener serves may be diverted; anything else must go where it was going, untouched. The set holds the
`(ClusterIP, port)` pairs of the mesh Services the node's proxy serves (`aether.core.project.udp`), which change
while the pod runs: the agent keeps it equal to them (`render_udp_services`, written by `aether.cni.udp_services`
once the proxy has the listeners), and the plugin's ruleset never touches its elements.

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
    "MESH_DNS_PORT",
    "NFT_TABLE",
    "PASSTHROUGH_MARK",
    "RULE_PRIORITY",
    "UDP_SERVICES_SET",
    "CapturePlan",
    "CaptureSettings",
    "ip_range_problem",
    "port_problem",
    "render_ruleset",
    "render_udp_services",
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
UDP_SERVICES_SET = "udp_services"
"""The set (`ipv4_addr . inet_service`) of the UDP destinations the pod's proxy serves: the only UDP captured."""
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


_CHAINS = {
    "divert": "type route hook output priority mangle; policy accept;",
    "steer": "type filter hook prerouting priority mangle; policy accept;",
    "dns": "type nat hook output priority -100; policy accept;",
}
_UDP_SET_DECLARATION = f"\tset {UDP_SERVICES_SET} {{ type ipv4_addr . inet_service; }}"


def render_ruleset(plan: CapturePlan) -> str:
    """Return the `nft -f` script that replaces the pod's capture table with `plan`'s, in one transaction.

    The script first declares the table, its chains and sets (no-ops for those that exist) and deletes all but
    the set `udp_services`, then defines them again: applying it twice gives the same ruleset (ADD is
    idempotent), a failure anywhere leaves the previous ruleset untouched, and the UDP destinations the agent
    wrote (before or after) are kept.
    """
    ranges = ", ".join(plan.exclude_ranges)
    mark = f"{plan.capture_mark:#x}"
    lines = [
        f"table ip {NFT_TABLE} {{",
        _UDP_SET_DECLARATION,
        "\tset excluded_ranges { type ipv4_addr; flags interval; }",
        *(f"\tchain {name} {{ {spec} }}" for name, spec in _CHAINS.items()),
        "}",
        *(f"delete chain ip {NFT_TABLE} {name}" for name in _CHAINS),
        f"delete set ip {NFT_TABLE} excluded_ranges",
        f"table ip {NFT_TABLE} {{",
        "\tset excluded_ranges {",
        "\t\ttype ipv4_addr; flags interval;",
        f"\t\telements = {{ {ranges} }}",
        "\t}",
        "\tchain divert {",
        f"\t\t{_CHAINS['divert']}",
        '\t\toifname "lo" return',
        f"\t\tmeta mark {plan.proxy_mark:#x} return",
        "\t\tct direction reply return",
        # Conntrack starts in the namespace with this table, and picks up a connection it did not see begin
        # mid-stream, taking the first packet it meets for the original direction. Callers connect to a pod's
        # inbound before ADD programs the capture (the agent advertises the pod first): the pod's answers, taken
        # for new outbound packets, went to the capture listener, which reset the connection. So only a TCP
        # connection whose SYN passes here is captured, and its entry remembers it (UDP has no such tell). A UDP
        # flow stays captured only while the proxy serves its destination: once gone from the set, it passes.
        f"\t\tct mark {mark} meta l4proto tcp meta mark set {mark} return",
        f"\t\tct mark {mark} ip daddr . udp dport @{UDP_SERVICES_SET} meta mark set {mark} return",
        "\t\tct state != new return",
        "\t\tmeta l4proto tcp tcp flags & (fin | syn | rst | ack) != syn return",
        "\t\tip daddr @excluded_ranges return",
        "\t\tmeta l4proto { tcp, udp } th dport 53 return",
    ]
    if plan.exclude_ports:
        ports = ", ".join(str(port) for port in plan.exclude_ports)
        lines.append(f"\t\tmeta l4proto {{ tcp, udp }} th dport {{ {ports} }} return")
    lines += [
        # Only what a listener serves: the UDP proxy has no way to send other datagrams where they were going.
        f"\t\tmeta l4proto udp ip daddr . udp dport != @{UDP_SERVICES_SET} return",
        f"\t\tmeta l4proto {{ tcp, udp }} meta mark set {mark} ct mark set {mark}",
        "\t}",
        "\tchain steer {",
        f"\t\t{_CHAINS['steer']}",
        f'\t\tiifname "lo" meta mark {mark} meta l4proto tcp tproxy to 127.0.0.1:{plan.tcp_port} accept',
        # No address or port given: the socket bound to the datagram's own destination takes it.
        f'\t\tiifname "lo" meta mark {mark} meta l4proto udp tproxy ip to ip daddr accept',
        "\t}",
    ]
    if plan.mesh_dns is not None:
        host, port = plan.mesh_dns
        lines += [
            "\tchain dns {",
            f"\t\t{_CHAINS['dns']}",
            f"\t\tmeta mark {plan.proxy_mark:#x} return",
            "\t\tip daddr 127.0.0.0/8 return",
            f"\t\tmeta l4proto {{ tcp, udp }} th dport 53 dnat to {host}:{port}",
            "\t}",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_udp_services(destinations: Iterable[tuple[str, int]]) -> str:
    """Return the `nft -f` script that makes the pod's set `udp_services` hold exactly `destinations`.

    It declares the table and the set first (no-ops when they exist), so it applies before the plugin's first
    ruleset as well as after (which keeps the elements), in one transaction.
    """
    elements = ", ".join(f"{address} . {port}" for address, port in sorted(set(destinations), key=_pair_key))
    lines = [
        f"table ip {NFT_TABLE} {{",
        _UDP_SET_DECLARATION,
        "}",
        f"flush set ip {NFT_TABLE} {UDP_SERVICES_SET}",
    ]
    if elements:
        lines.append(f"add element ip {NFT_TABLE} {UDP_SERVICES_SET} {{ {elements} }}")
    return "\n".join(lines) + "\n"


def _pair_key(pair: tuple[str, int]) -> tuple[int, int]:
    return int(ipaddress.IPv4Address(pair[0])), pair[1]
