"""The edge role: Gateway API north-south routes served to the edge Envoy (`aether edge`)."""

from aether.edge.app import DEFAULT_EDGE_ADMIN_SOCKET, EdgeConfig, RunningEdge, serve_edge
from aether.edge.manifests_source import ManifestSource, ManifestSourceStatistics, serve_manifest_directory

__all__ = [
    "DEFAULT_EDGE_ADMIN_SOCKET",
    "EdgeConfig",
    "ManifestSource",
    "ManifestSourceStatistics",
    "RunningEdge",
    "serve_edge",
    "serve_manifest_directory",
]
