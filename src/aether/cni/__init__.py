"""The CNI plugin (`aether-cni`) and its pod-netns programming (pyroute2 + nftables).

On a node the plugin is the Python-free executable of `shim/aether-cni.c`, which forwards each request over the
wire of `aether.cni.wire` to the agent; the agent runs it with `run_command`, the Python console script's own code.
`aether.cni.install` puts the executable on the host and keeps it chained into the primary CNI's conflist.

The agent's side of the CNI service lives in `aether.cni.server` and `aether.cni.plugin_server` and is not
re-exported here on purpose: it loads the journal, the log and the projection, and every plugin run imports this
package.

Every name is imported on first use (PEP 562): `aether-cni VERSION` reads `aether.cni.config` without loading
trio, gRPC or netlink.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
        render_udp_services,
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
        InstallFailed,
        InvalidEnvironment,
        InvalidNetworkConfig,
        NetnsProgrammingFailed,
        PluginUnavailable,
        WireMismatch,
    )
    from aether.cni.netns import (
        apply_capture,
        capture_problems,
        entered_netns,
        remove_capture,
        write_udp_services,
    )
    from aether.cni.plugin import PluginOutcome, run_command, run_plugin

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
    "InstallFailed",
    "InvalidEnvironment",
    "InvalidNetworkConfig",
    "Invocation",
    "NetnsProgrammingFailed",
    "NetworkConfig",
    "PluginOutcome",
    "PluginUnavailable",
    "PodArgs",
    "WireMismatch",
    "apply_capture",
    "call_agent",
    "capture_problems",
    "entered_netns",
    "remove_capture",
    "render_ruleset",
    "render_udp_services",
    "run_command",
    "run_plugin",
    "settings_from_annotations",
    "write_udp_services",
]

_MODULES = {
    "DEFAULT_CNI_SOCKET": "aether.cni.api",
    "METHODS": "aether.cni.api",
    "SERVICE_NAME": "aether.cni.api",
    "BUILTIN_EXCLUDED_RANGES": "aether.cni.capture",
    "CAPTURE_MARK": "aether.cni.capture",
    "CAPTURE_TABLE": "aether.cni.capture",
    "CapturePlan": "aether.cni.capture",
    "CaptureSettings": "aether.cni.capture",
    "EXCLUDE_OUTBOUND_IP_RANGES": "aether.cni.capture",
    "EXCLUDE_OUTBOUND_PORTS": "aether.cni.capture",
    "MESH_DNS_PORT": "aether.cni.capture",
    "NFT_TABLE": "aether.cni.capture",
    "render_ruleset": "aether.cni.capture",
    "render_udp_services": "aether.cni.capture",
    "settings_from_annotations": "aether.cni.capture",
    "call_agent": "aether.cni.client",
    "Command": "aether.cni.config",
    "Invocation": "aether.cni.config",
    "NetworkConfig": "aether.cni.config",
    "PodArgs": "aether.cni.config",
    "SUPPORTED_VERSIONS": "aether.cni.config",
    "AgentRefused": "aether.cni.errors",
    "AgentUnavailable": "aether.cni.errors",
    "CaptureDrifted": "aether.cni.errors",
    "CniError": "aether.cni.errors",
    "DecodeFailure": "aether.cni.errors",
    "IncompatibleVersion": "aether.cni.errors",
    "InstallFailed": "aether.cni.errors",
    "InvalidEnvironment": "aether.cni.errors",
    "InvalidNetworkConfig": "aether.cni.errors",
    "NetnsProgrammingFailed": "aether.cni.errors",
    "PluginUnavailable": "aether.cni.errors",
    "WireMismatch": "aether.cni.errors",
    "apply_capture": "aether.cni.netns",
    "capture_problems": "aether.cni.netns",
    "entered_netns": "aether.cni.netns",
    "remove_capture": "aether.cni.netns",
    "write_udp_services": "aether.cni.netns",
    "PluginOutcome": "aether.cni.plugin",
    "run_command": "aether.cni.plugin",
    "run_plugin": "aether.cni.plugin",
}
"""Where each exported name is defined."""


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
