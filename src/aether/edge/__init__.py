"""The edge role: Gateway API north-south routes served to the edge Envoy (`aether edge`)."""

from aether.edge.app import DEFAULT_EDGE_ADMIN_SOCKET, EdgeConfig, RunningEdge, serve_edge

__all__ = [
    "DEFAULT_EDGE_ADMIN_SOCKET",
    "EdgeConfig",
    "RunningEdge",
    "serve_edge",
]
