"""The CNI plugin's errors: each carries the CNI spec's error code and becomes the spec's JSON error object.

    CniError                      the root; `code`, `message`, `details`; `to_json()` is what the plugin prints
    ├── IncompatibleVersion       1   the config's cniVersion is not one we speak
    ├── InvalidEnvironment        4   a CNI_* variable is missing or wrong (including a netns that does not exist)
    ├── DecodeFailure             6   stdin is empty or not a JSON object
    ├── InvalidNetworkConfig      7   the network config parsed but breaks a rule (a key's type or value)
    ├── AgentUnavailable         11   the agent did not answer: try again later (nothing was programmed)
    ├── PluginUnavailable        50   STATUS: the agent is not reachable, no pod can be added now
    ├── AgentRefused           1001   the agent answered with an error about this pod (a proxy NACK included)
    ├── NetnsProgrammingFailed 1002   the capture rules could not be applied (none are left behind)
    ├── CaptureDrifted         1003   CHECK: the pod's namespace does not hold the capture it should
    ├── WireMismatch           1004   the host's executable and the agent do not speak the same wire (aether.cni.wire)
    └── InstallFailed          1010   `aether cni-install` could not install or chain the plugin (never printed
                                      to a runtime: the installer's own messages, with the same fields)

Codes 0-99 are the spec's (https://github.com/containernetworking/cni/blob/main/SPEC.md#error); plugin-specific
codes are 100 and up, and ours start at 1001 so that they read as ours at a glance.
"""

from __future__ import annotations

import json

__all__ = [
    "AgentRefused",
    "AgentUnavailable",
    "CaptureDrifted",
    "CniError",
    "DecodeFailure",
    "IncompatibleVersion",
    "InstallFailed",
    "InvalidEnvironment",
    "InvalidNetworkConfig",
    "NetnsProgrammingFailed",
    "PluginUnavailable",
    "WireMismatch",
]


class CniError(Exception):
    """A CNI operation failed; the plugin prints `to_json()` on stdout and exits non-zero.

    Args:
        message: What went wrong, naming the subject and the rule (the spec's `msg`).
        details: Extra context, e.g. the underlying error (the spec's `details`).
    """

    code = 999
    """The spec's error code (overridden by every subclass)."""

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return self.message if not self.details else f"{self.message} ({self.details})"

    def to_json(self, *, cni_version: str) -> str:
        """Return the spec's error object: `{"cniVersion", "code", "msg", "details"}` (details only when set)."""
        document: dict[str, object] = {"cniVersion": cni_version, "code": self.code, "msg": self.message}
        if self.details:
            document["details"] = self.details
        return json.dumps(document, sort_keys=True)


class IncompatibleVersion(CniError):
    """The network config asks for a CNI version this plugin does not implement."""

    code = 1


class InvalidEnvironment(CniError):
    """A CNI_* environment variable is missing or invalid."""

    code = 4


class DecodeFailure(CniError):
    """The network config on stdin is missing or not a JSON object."""

    code = 6


class InvalidNetworkConfig(CniError):
    """The network config is JSON but a key has the wrong type or value."""

    code = 7


class AgentUnavailable(CniError):
    """The agent could not be reached or did not answer in time; the runtime should retry the operation."""

    code = 11


class PluginUnavailable(CniError):
    """STATUS: the plugin cannot add pods now (its agent is not reachable)."""

    code = 50


class AgentRefused(CniError):
    """The agent answered, with an error about this pod (its message says which rule the pod breaks)."""

    code = 1001


class NetnsProgrammingFailed(CniError):
    """The capture rules could not be applied in the pod's network namespace; none were left behind."""

    code = 1002


class CaptureDrifted(CniError):
    """CHECK found the pod's namespace without the capture the agent's settings call for (or with a stale one)."""

    code = 1003


class WireMismatch(CniError):
    """The host's `aether-cni` executable sent a frame the agent does not read (another wire version, or bytes
    that are no frame): install the executable of the agent's own image."""

    code = 1004


class InstallFailed(CniError):
    """The installer could not install the executable or chain it into the primary CNI's conflist; the message
    names the file and the rule, and the installer retries when the file or directory changes."""

    code = 1010
