"""The CNI plugin (`aether-cni`) and its pod-netns programming (pyroute2 + nftables).

The agent's side of the CNI service lives in `aether.cni.server` and is not re-exported here on purpose: it
loads the journal, the log and the projection, and every plugin run imports this package.
"""

from __future__ import annotations

from aether.cni.api import DEFAULT_CNI_SOCKET, METHODS, SERVICE_NAME
from aether.cni.capture import (
    BUILTIN_EXCLUDED_RANGES,
    CAPTURE_MARK,
    CAPTURE_TABLE,
    EXCLUDE_OUTBOUND_IP_RANGES,
    EXCLUDE_OUTBOUND_PORTS,
    MESH_DNS_PORT,
    NFT_TABLE,
    CapturePlan,
    CaptureSettings,
    render_ruleset,
    settings_from_annotations,
)
from aether.cni.client import call_agent
from aether.cni.config import SUPPORTED_VERSIONS, Command, Invocation, NetworkConfig, PodArgs
from aether.cni.errors import (
    AgentRefused,
    AgentUnavailable,
    CaptureDrifted,
    CniError,
    DecodeFailure,
    IncompatibleVersion,
    InvalidEnvironment,
    InvalidNetworkConfig,
    NetnsProgrammingFailed,
    PluginUnavailable,
)
from aether.cni.netns import apply_capture, capture_problems, entered_netns, remove_capture
from aether.cni.plugin import run_plugin

__all__ = [
    "BUILTIN_EXCLUDED_RANGES",
    "CAPTURE_MARK",
    "CAPTURE_TABLE",
    "DEFAULT_CNI_SOCKET",
    "EXCLUDE_OUTBOUND_IP_RANGES",
    "EXCLUDE_OUTBOUND_PORTS",
    "MESH_DNS_PORT",
    "METHODS",
    "NFT_TABLE",
    "SERVICE_NAME",
    "SUPPORTED_VERSIONS",
    "AgentRefused",
    "AgentUnavailable",
    "CaptureDrifted",
    "CapturePlan",
    "CaptureSettings",
    "CniError",
    "Command",
    "DecodeFailure",
    "IncompatibleVersion",
    "InvalidEnvironment",
    "InvalidNetworkConfig",
    "Invocation",
    "NetnsProgrammingFailed",
    "NetworkConfig",
    "PluginUnavailable",
    "PodArgs",
    "apply_capture",
    "call_agent",
    "capture_problems",
    "entered_netns",
    "remove_capture",
    "render_ruleset",
    "run_plugin",
    "settings_from_annotations",
]
