"""Exceptions raised by the Kubernetes API client and its sources.

The tree::

    KubeError
    ├── ApiStatusError        the API server answered with a failure Status (code, reason, message)
    │   └── ResourceExpiredError  410 Gone / Expired: the version asked for is compacted; list again
    ├── ApiConnectionError    (also OSError) the server cannot be reached, or a response broke off
    ├── ApiProtocolError      (also ValueError) the response is not the HTTP or JSON the API speaks
    └── ConfigError           (also ValueError) the cluster configuration (kubeconfig, in-cluster files) is unusable

Every exception keeps structured fields and builds its message in ``__str__``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApiConnectionError",
    "ApiProtocolError",
    "ApiStatusError",
    "ConfigError",
    "KubeError",
    "ResourceExpiredError",
    "status_error",
]

GONE = 410
"""The HTTP code of an expired resource version or continue token (reason `Expired`)."""


class KubeError(Exception):
    """Root of every exception the Kubernetes adapters raise."""


class ApiStatusError(KubeError):
    """The server refused a request to `path` with a Status: HTTP `code`, machine `reason`, human `message`."""

    def __init__(self, path: str, *, code: int, reason: str, message: str) -> None:
        super().__init__(path, code, reason, message)
        self.path = path
        self.code = code
        self.reason = reason
        """The Status reason (`NotFound`, `Expired`, `Unauthorized`...); empty when the server gave none."""
        self.message = message

    def __str__(self) -> str:
        return f"kubernetes api {self.path!r}: {self.code} {self.reason or 'error'}: {self.message}"


class ResourceExpiredError(ApiStatusError):
    """410 Gone: the resource version (or continue token) is older than the history the server keeps."""


class ApiConnectionError(KubeError, OSError):
    """The server at `server` could not be reached, or a response broke off: `reason` says how."""

    def __init__(self, server: str, *, reason: str) -> None:
        super().__init__(server, reason)
        self.server = server
        self.reason = reason

    def __str__(self) -> str:
        return f"kubernetes api {self.server!r}: {self.reason}"


class ApiProtocolError(KubeError, ValueError):
    """A response from `path` is not what the API speaks: `problem` says what was wrong."""

    def __init__(self, path: str, *, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem

    def __str__(self) -> str:
        return f"kubernetes api {self.path!r}: {self.problem}"


class ConfigError(KubeError, ValueError):
    """The cluster configuration at `source` is unusable: `problem` says why and what to fix."""

    def __init__(self, source: str, *, problem: str) -> None:
        super().__init__(source, problem)
        self.source = source
        self.problem = problem

    def __str__(self) -> str:
        return f"kubernetes config {self.source!r}: {self.problem}"


def status_error(path: str, *, code: int, status: Any) -> ApiStatusError:
    """Build the error for a failure `Status` object (or anything else the server sent with HTTP `code`).

    A Status whose code is 410 becomes `ResourceExpiredError`, whether it came as an HTTP response or as a
    watch stream's ERROR event (the API server uses both).
    """
    if isinstance(status, dict) and status.get("kind") == "Status":
        code = int(status.get("code") or code)
        reason = str(status.get("reason") or "")
        message = str(status.get("message") or "")
    else:
        reason, message = "", repr(status)[:200]
    kind = ResourceExpiredError if code == GONE else ApiStatusError
    return kind(path, code=code, reason=reason, message=message)
