"""The access table (`aether.kube.access`) is what the roles' watches read: nothing watched is missing from it."""

from __future__ import annotations

from aether.kube.access import (
    AGENT_ACCESS,
    EDGE_ACCESS,
    EDGE_QUERIES,
    REGISTRAR_KUBERNETES_ACCESS,
    WATCH_VERBS,
    Rule,
)
from aether.kube.resources import SECRETS
from aether.kube.source import MESH_QUERIES, node_pod_query
from aether.registrar.backends.kubernetes import NODE_QUERY, POD_QUERY


def test_the_agents_watches_are_its_row() -> None:
    """Every query the agent runs (the mesh's objects and its node's pods) reads a resource of its row, and back."""
    watched = [query.resource for query in (*MESH_QUERIES, node_pod_query("node-1"))]
    assert sorted(map(str, watched)) == sorted(map(str, AGENT_ACCESS.watches))


def test_the_kubernetes_registrars_watches_are_its_row() -> None:
    """The kubernetes backend reads the meshed pods and the nodes: its row."""
    watched = [POD_QUERY.resource, NODE_QUERY.resource]
    assert sorted(map(str, watched)) == sorted(map(str, REGISTRAR_KUBERNETES_ACCESS.watches))


def test_rules_group_the_watches_by_api_group() -> None:
    """One rule per API group, list and watch only, plural names sorted."""
    assert REGISTRAR_KUBERNETES_ACCESS.rules() == (
        Rule(api_group="", resources=("nodes", "pods"), verbs=WATCH_VERBS),
    )
    assert AGENT_ACCESS.rules() == (
        Rule(api_group="", resources=("pods", "services"), verbs=("list", "watch")),
        Rule(api_group="discovery.k8s.io", resources=("endpointslices",), verbs=("list", "watch")),
        Rule(
            api_group="gateway.networking.k8s.io",
            resources=(
                "gatewayclasses",
                "gateways",
                "grpcroutes",
                "httproutes",
                "referencegrants",
                "tcproutes",
                "tlsroutes",
                "udproutes",
            ),
            verbs=("list", "watch"),
        ),
    )


def test_the_edges_watches_are_its_row() -> None:
    """The edge runs `EDGE_QUERIES` (what every node reads, the TLS Secrets by a field selector, the Namespaces):
    its row, with no pods (its endpoints come from the registrar)."""
    watched = [query.resource for query in EDGE_QUERIES]
    assert sorted(map(str, watched)) == sorted(map(str, EDGE_ACCESS.watches))
    assert [query.field_selector for query in EDGE_QUERIES if query.resource == SECRETS] == [
        "type=kubernetes.io/tls"
    ]
    assert EDGE_ACCESS.rules()[0] == Rule(
        api_group="", resources=("namespaces", "secrets", "services"), verbs=WATCH_VERBS
    )
