"""Node snapshots with GAMMA L4 routes pass real Envoy's validation: the golden TCPRoute and TLSRoute cases on a
realistic node, with a pod in a network namespace calling their parent Services, so that its capture and L4
listeners carry the routes' chains (ClusterIP, port, SNI) and the backends their `tcp:` clusters; the UDPRoute's
parent destination gets its listener to the route's weighted cluster."""

from __future__ import annotations

from pathlib import Path

from aether.core.events import Event
from aether.core.project import project_node
from aether.core.snapshot import CLUSTER_TYPE, LISTENER_TYPE
from aether.testing import AT, fold_events
from tests.core.project._helpers import NODE, messages
from tests.integration.test_gamma_validate import gamma_events
from tests.integration.test_projection_validate import realistic_events, validate

CASES = (
    "gamma-tcproute-splits-a-service-port-by-weight",
    "gamma-tlsroute-routes-a-service-port-by-sni",
    "gamma-tcproute-two-routes-on-one-service-port-older-wins",
    "gamma-tcproute-backend-that-is-not-tcp-is-unresolved",
    "gamma-udproute-splits-a-service-by-weight",
)


def _events(work_dir: Path) -> list[Event]:
    netns = work_dir / "netns" / "caller-0"
    netns.parent.mkdir(exist_ok=True)
    netns.touch()
    upstreams = "default/db, default/tls, default/cache, default/mq, default/dns"
    return gamma_events(CASES, upstreams=upstreams, netns=str(netns))


def test_gamma_l4_chains_on_a_realistic_node_pass_envoy_validation(tmp_path: Path) -> None:
    """Envoy accepts the caller's listeners with a chain per routed destination, and every proxy's cluster."""
    state = fold_events(*realistic_events(tmp_path, identities=True), *_events(tmp_path))
    snapshot = project_node(state, node_name=NODE, now=AT)
    assert snapshot.consistent() == ()
    listeners = messages(snapshot, LISTENER_TYPE)
    capture = listeners["capture_caller-0.default"]
    matched = sorted(
        (
            chain.filter_chain_match.prefix_ranges[0].address_prefix,
            chain.filter_chain_match.destination_port.value,
            tuple(chain.filter_chain_match.server_names),
        )
        for chain in capture.filter_chains
        if chain.filter_chain_match.prefix_ranges
    )
    assert matched == [
        ("10.96.0.10", 5432, ()),
        ("10.96.0.10", 5433, ()),
        ("10.96.1.1", 443, ()),
        ("10.96.1.1", 443, ("a.example.com",)),
        ("10.96.1.1", 443, ("b.example.com", "*.b.example.com")),
        ("10.96.2.1", 6379, ()),
        ("10.96.2.1", 6380, ()),
        ("10.96.3.1", 5672, ()),
    ]
    assert "envoy.filters.listener.tls_inspector" in [item.name for item in capture.listener_filters]
    assert {
        "tcp:db-v1.default.aether.internal",
        "tcp:db-v2.default.aether.internal",
        "tcp:tls-a.default.aether.internal",
        "tcp:tls-b.default.aether.internal",
        "tcp:cache-a.default.aether.internal",
        "tcp:cache-b.default.aether.internal",
        "tcp:mq-v1.default.aether.internal",
        "udproute:dns.default",
    } <= set(messages(snapshot, CLUSTER_TYPE))
    assert "udp_caller-0.default_10.96.4.1_53" in listeners
    validate(snapshot, tmp_path)
