"""What a control plane (agent, edge) serves its Envoy from."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_XDS_SOCKET"]

DEFAULT_XDS_SOCKET = Path("/run/aether/xds.sock")
"""Where a control plane serves xDS to its Envoy (the agent: the node's Envoy)."""
