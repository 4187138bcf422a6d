"""Running a real Envoy: finding its binary, ADS bootstraps, `open_envoy` (optionally under a guard that stops it
when its owner dies). Its admin API and listeners speak HTTP/1.1 through `aether.http1`."""

from __future__ import annotations

from aether.envoy.bootstrap import DEFAULT_NODE_CLUSTER, XDS_CLUSTER, ads_bootstrap, loopback_admin
from aether.envoy.guard import guard_command
from aether.envoy.process import (
    ENVOY_VARIABLE,
    AdminRequestFailed,
    Envoy,
    EnvoyStartFailed,
    find_envoy_binary,
    open_envoy,
)

__all__ = [
    "DEFAULT_NODE_CLUSTER",
    "ENVOY_VARIABLE",
    "XDS_CLUSTER",
    "AdminRequestFailed",
    "Envoy",
    "EnvoyStartFailed",
    "ads_bootstrap",
    "find_envoy_binary",
    "guard_command",
    "loopback_admin",
    "open_envoy",
]
