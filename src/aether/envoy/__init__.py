"""Running a real Envoy: the ADS bootstrap a node or edge proxy starts with (`aether bootstrap` prints it)."""

from __future__ import annotations

from aether.envoy.bootstrap import DEFAULT_NODE_CLUSTER, XDS_CLUSTER, ads_bootstrap, loopback_admin

__all__ = ["DEFAULT_NODE_CLUSTER", "XDS_CLUSTER", "ads_bootstrap", "loopback_admin"]
