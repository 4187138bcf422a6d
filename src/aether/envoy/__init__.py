"""Running a real Envoy: finding its binary, ADS bootstraps, `open_envoy` (optionally under a guard that stops it
when its owner dies), and a small HTTP/1.1 client for its admin API and its listeners."""

from __future__ import annotations

from aether.envoy.bootstrap import DEFAULT_NODE_CLUSTER, XDS_CLUSTER, ads_bootstrap, loopback_admin
from aether.envoy.guard import guard_command
from aether.envoy.http import HttpReader, HttpResponse, http_get
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
    "HttpReader",
    "HttpResponse",
    "ads_bootstrap",
    "find_envoy_binary",
    "guard_command",
    "http_get",
    "loopback_admin",
    "open_envoy",
]
