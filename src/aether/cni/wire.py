"""The wire between the host's `aether-cni` executable (`shim/aether-cni.c`) and the agent (pure: bytes in, values out).

The shim forwards what the runtime gave it and prints what the agent answers, nothing more, so the frames carry
exactly that::

    request:  b"AECNI\\x01" | u32 env length | b"NAME=value\\0" per CNI_* variable | u32 stdin length | stdin
    response: b"AECNI\\x01" | u32 exit status | u32 stdout length | stdout | u32 stderr length | stderr

Every u32 is big-endian. One request per connection; the shim half-closes after sending it. Why not the agent's
gRPC service (`cni.sock`): a client of it would need HTTP/2, HPACK and protobuf in C, and it would parse the
network config (prevResult, annotations) to build the request, a second copy of `aether.cni.config` in another
language. Forwarding the raw request keeps one parser, in the agent, and a shim of a few hundred lines of libc.

The C source and this module must change together: `MAGIC` carries the wire version.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

import attrs

__all__ = [
    "DEFAULT_PLUGIN_SOCKET",
    "MAGIC",
    "MAX_ENVIRONMENT",
    "MAX_STDIN",
    "PLUGIN_SOCKET_VARIABLE",
    "PluginRequest",
    "PluginResponse",
    "WireError",
]

MAGIC = b"AECNI\x01"
"""Every frame's first bytes: the protocol and its version (1)."""
DEFAULT_PLUGIN_SOCKET = "/run/aether/cni-plugin.sock"
"""Where the shim dials the agent (the DaemonSet's hostPath /run/aether)."""
PLUGIN_SOCKET_VARIABLE = "AETHER_CNI_PLUGIN_SOCKET"
"""An environment variable that overrides `DEFAULT_PLUGIN_SOCKET` (the runtime passes its environment through)."""
MAX_ENVIRONMENT = 64 * 1024
"""Bytes of CNI_* variables a request may carry (the shim refuses more)."""
MAX_STDIN = 4 * 1024 * 1024
"""Bytes of network config a request may carry (the shim refuses more)."""

_U32 = struct.Struct(">I")


class WireError(ValueError):
    """A frame that breaks the wire's rules; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return f"aether-cni wire: {self.reason}"


@attrs.frozen(kw_only=True)
class PluginRequest:
    """What the runtime gave the shim: its CNI_* variables and its stdin."""

    environ: Mapping[str, str]
    stdin: bytes

    def to_bytes(self) -> bytes:
        """Encode the request (the shim's side; tests and benchmarks speak it from Python)."""
        environment = b"".join(
            f"{name}={value}".encode(errors="surrogateescape") + b"\0"
            for name, value in sorted(self.environ.items())
            if name.startswith("CNI_")
        )
        return MAGIC + _U32.pack(len(environment)) + environment + _U32.pack(len(self.stdin)) + self.stdin

    @classmethod
    def from_bytes(cls, frame: bytes) -> PluginRequest:
        """Decode a whole request.

        Raises:
            WireError: the frame is not version 1 of this wire, is cut short, too long, or names a variable
                that is not CNI_*.
        """
        if frame[: len(MAGIC)] != MAGIC:
            raise WireError(f"a request must start with {MAGIC!r} (got {frame[: len(MAGIC)]!r})")
        environment, offset = _block(frame, len(MAGIC), limit=MAX_ENVIRONMENT, what="the environment")
        stdin, offset = _block(frame, offset, limit=MAX_STDIN, what="stdin")
        if offset != len(frame):
            raise WireError(f"{len(frame) - offset} bytes follow the request")
        environ: dict[str, str] = {}
        for entry in environment.split(b"\0")[:-1] if environment else []:
            name, equals, value = entry.decode(errors="surrogateescape").partition("=")
            if not equals or not name.startswith("CNI_"):
                raise WireError(f"each environment entry must be CNI_NAME=value (got {entry[:40]!r})")
            environ[name] = value
        if environment and not environment.endswith(b"\0"):
            raise WireError("the environment must end with NUL")
        return cls(environ=environ, stdin=stdin)

    @staticmethod
    def expected_length(prefix: bytes) -> int | None:
        """The whole request's length once `prefix` holds its headers, else None (read more first).

        Raises:
            WireError: the prefix already breaks the wire's rules (wrong magic, a block too long).
        """
        if len(prefix) < len(MAGIC) + 4:
            if prefix and not MAGIC.startswith(prefix[: len(MAGIC)]):
                raise WireError(f"a request must start with {MAGIC!r} (got {prefix[: len(MAGIC)]!r})")
            return None
        if prefix[: len(MAGIC)] != MAGIC:
            raise WireError(f"a request must start with {MAGIC!r} (got {prefix[: len(MAGIC)]!r})")
        environment: int = _U32.unpack_from(prefix, len(MAGIC))[0]
        if environment > MAX_ENVIRONMENT:
            raise WireError(f"the environment must be at most {MAX_ENVIRONMENT} bytes (got {environment})")
        stdin_at = len(MAGIC) + 4 + environment
        if len(prefix) < stdin_at + 4:
            return None
        stdin: int = _U32.unpack_from(prefix, stdin_at)[0]
        if stdin > MAX_STDIN:
            raise WireError(f"stdin must be at most {MAX_STDIN} bytes (got {stdin})")
        return stdin_at + 4 + stdin


@attrs.frozen(kw_only=True)
class PluginResponse:
    """What the shim prints and how it exits."""

    status: int
    stdout: bytes = b""
    stderr: bytes = b""

    def to_bytes(self) -> bytes:
        """Encode the response (the agent's side)."""
        return (
            MAGIC
            + _U32.pack(self.status)
            + _U32.pack(len(self.stdout))
            + self.stdout
            + _U32.pack(len(self.stderr))
            + self.stderr
        )

    @classmethod
    def from_bytes(cls, frame: bytes) -> PluginResponse:
        """Decode a whole response (tests speak the shim's side from Python).

        Raises:
            WireError: the frame is not version 1 of this wire or is cut short.
        """
        if frame[: len(MAGIC)] != MAGIC or len(frame) < len(MAGIC) + 4:
            raise WireError(f"a response must start with {MAGIC!r} and a status (got {frame[:10]!r})")
        (status,) = _U32.unpack_from(frame, len(MAGIC))
        stdout, offset = _block(frame, len(MAGIC) + 4, limit=len(frame), what="stdout")
        stderr, offset = _block(frame, offset, limit=len(frame), what="stderr")
        if offset != len(frame):
            raise WireError(f"{len(frame) - offset} bytes follow the response")
        return cls(status=status, stdout=stdout, stderr=stderr)


def _block(frame: bytes, offset: int, *, limit: int, what: str) -> tuple[bytes, int]:
    if len(frame) < offset + 4:
        raise WireError(f"the frame ends before the length of {what}")
    (length,) = _U32.unpack_from(frame, offset)
    if length > limit:
        raise WireError(f"{what} must be at most {limit} bytes (got {length})")
    start = offset + 4
    if len(frame) < start + length:
        raise WireError(f"{what} is cut short ({len(frame) - start} of {length} bytes)")
    return frame[start : start + length], start + length
