"""The capture plan and its nftables ruleset (pure): exclusions merged and normalized, the script deterministic."""

from __future__ import annotations

from aether.cni import capture
from aether.cni.capture import (
    CapturePlan,
    CaptureSettings,
    render_ruleset,
    render_udp_services,
    settings_from_annotations,
)
from aether.core.project import names


def test_the_data_plane_contract_matches_the_projection() -> None:
    """The port and the proxy's mark the rules use are the ones the projection binds and sets."""
    assert (capture.CAPTURE_PORT, capture.PASSTHROUGH_MARK) == (names.CAPTURE_PORT, names.PASSTHROUGH_MARK)


def test_annotations_are_normalized_and_bad_entries_are_skipped_with_a_warning() -> None:
    """Ports and ranges are sorted and distinct; a typo skips only its own entry and says which."""
    settings, warnings = settings_from_annotations(
        {
            capture.EXCLUDE_OUTBOUND_PORTS: " 9090, 15020,9090,http,70000",
            capture.EXCLUDE_OUTBOUND_IP_RANGES: "10.1.2.3, 10.0.0.0/8,10.0.0.1/8,nope",
        }
    )
    assert settings == CaptureSettings(
        exclude_ports=(9090, 15020), exclude_ranges=("10.0.0.0/8", "10.1.2.3/32")
    )
    assert warnings == (
        "annotation 'capture.aether.io/exclude-outbound-ports': a port must be 1..65535 (got 'http')",
        "annotation 'capture.aether.io/exclude-outbound-ports': a port must be 1..65535 (got '70000')",
        "annotation 'capture.aether.io/exclude-outbound-ip-ranges': an IP range must be an IPv4 CIDR such as"
        " '10.0.0.0/8' (got 'nope')",
    )


def test_a_plan_merges_pod_node_and_builtin_exclusions() -> None:
    """The node's exclusions and the built-in ranges join the pod's, sorted by address."""
    plan = CapturePlan.merge(
        CaptureSettings(exclude_ports=(9090,), exclude_ranges=("10.0.0.0/8",)),
        node_ports=(22, 9090),
        node_ranges=("192.168.0.0/16",),
        mesh_dns=("10.88.0.1", 18054),
    )
    assert plan == CapturePlan(
        exclude_ports=(22, 9090),
        exclude_ranges=(
            "10.0.0.0/8",
            "169.254.0.0/16",
            "192.168.0.0/16",
            "224.0.0.0/4",
            "255.255.255.255/32",
        ),
        mesh_dns=("10.88.0.1", 18054),
    )
    settings = CaptureSettings(exclude_ports=(1,), exclude_ranges=("10.0.0.1/32",))
    assert CaptureSettings.from_proto(settings.to_proto()) == settings


def test_the_ruleset_replaces_one_table_atomically() -> None:
    """The script declares the table, chains and sets, deletes all but the UDP service set (idempotent, and the
    agent's elements survive), then defines the chains; UDP is captured only to the set's destinations."""
    text = render_ruleset(
        CapturePlan.merge(CaptureSettings(exclude_ports=(9090,)), mesh_dns=("10.88.0.1", 18054))
    )
    assert text == render_ruleset(
        CapturePlan.merge(CaptureSettings(exclude_ports=(9090,)), mesh_dns=("10.88.0.1", 18054))
    )
    lines = text.splitlines()
    assert lines[:12] == [
        "table ip aether_capture {",
        "\tset udp_services { type ipv4_addr . inet_service; }",
        "\tset excluded_ranges { type ipv4_addr; flags interval; }",
        "\tchain divert { type route hook output priority mangle; policy accept; }",
        "\tchain steer { type filter hook prerouting priority mangle; policy accept; }",
        "\tchain dns { type nat hook output priority -100; policy accept; }",
        "}",
        "delete chain ip aether_capture divert",
        "delete chain ip aether_capture steer",
        "delete chain ip aether_capture dns",
        "delete set ip aether_capture excluded_ranges",
        "table ip aether_capture {",
    ]
    assert "delete set ip aether_capture udp_services" not in lines
    assert "\t\tmeta l4proto { tcp, udp } th dport { 9090 } return" in lines
    assert "\t\tct mark 0xae71 meta l4proto tcp meta mark set 0xae71 return" in lines
    assert "\t\tct mark 0xae71 ip daddr . udp dport @udp_services meta mark set 0xae71 return" in lines
    assert "\t\tmeta l4proto udp ip daddr . udp dport != @udp_services return" in lines
    assert "\t\tct state != new return" in lines
    assert "\t\tmeta l4proto tcp tcp flags & (fin | syn | rst | ack) != syn return" in lines
    assert "\t\tmeta l4proto { tcp, udp } meta mark set 0xae71 ct mark set 0xae71" in lines
    assert '\t\tiifname "lo" meta mark 0xae71 meta l4proto tcp tproxy to 127.0.0.1:18001 accept' in lines
    assert '\t\tiifname "lo" meta mark 0xae71 meta l4proto udp tproxy ip to ip daddr accept' in lines
    assert "\t\tmeta l4proto { tcp, udp } th dport 53 dnat to 10.88.0.1:18054" in lines


def test_without_mesh_dns_or_port_exclusions_those_rules_are_absent() -> None:
    """No DNS chain without a mesh-dns address (declared only to be deleted), and no port rule without excluded
    ports."""
    text = render_ruleset(CapturePlan())
    assert "\tchain dns {" not in text.splitlines()
    assert "delete chain ip aether_capture dns" in text.splitlines()
    assert "dnat" not in text
    assert "th dport {" not in text


def test_the_udp_service_set_script_replaces_the_elements_and_creates_what_is_missing() -> None:
    """The agent's script declares table and set, flushes the set and adds the destinations, sorted by address."""
    assert render_udp_services([("10.96.5.5", 8125), ("10.96.0.10", 53), ("10.96.5.5", 8125)]) == (
        "table ip aether_capture {\n"
        "\tset udp_services { type ipv4_addr . inet_service; }\n"
        "}\n"
        "flush set ip aether_capture udp_services\n"
        "add element ip aether_capture udp_services { 10.96.0.10 . 53, 10.96.5.5 . 8125 }\n"
    )
    assert render_udp_services([]).splitlines()[-1] == "flush set ip aether_capture udp_services"
