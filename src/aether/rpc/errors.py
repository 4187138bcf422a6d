"""Exceptions raised by the gRPC plumbing: listen addresses, serving gRPC, and the purerpc compatibility layer.

Every exception keeps structured fields and builds its message in ``__str__``.
"""

from __future__ import annotations

import purerpc

__all__ = [
    "InvalidListenAddressError",
    "InvalidServeOptionError",
    "ListenError",
    "MessageTooLargeError",
    "PeerGoneError",
    "PurerpcVersionError",
    "RpcError",
]


class RpcError(Exception):
    """Root of every exception the gRPC plumbing (`aether.rpc`) raises.

    The tree::

        RpcError
        ├── InvalidListenAddressError  (also ValueError) a listen address that does not parse
        ├── InvalidServeOptionError    (also ValueError) an argument of serve_grpc out of its range
        ├── ListenError                (also OSError) the listening socket cannot be set up
        ├── PurerpcVersionError        (also RuntimeError) purerpc is not the version the compat patches target
        ├── PeerGoneError              (also purerpc.CancelledError) the peer reset the stream or the connection ended
        └── MessageTooLargeError       (also purerpc.ResourceExhaustedError) a gRPC message over the size limit

    The last two reach RPC handlers: purerpc turns them into the stream's status (CANCELLED and
    RESOURCE_EXHAUSTED), and code that catches ``purerpc.RpcFailedError`` sees them too.
    """


class InvalidListenAddressError(RpcError, ValueError):
    """A listen address that does not parse (see `aether.rpc.listen.ListenAddress.parse`)."""

    def __init__(self, text: str, *, reason: str) -> None:
        super().__init__(text, reason)
        self.text = text
        """The address as given."""
        self.reason = reason
        """The rule it breaks, in words."""

    def __str__(self) -> str:
        return f"listen address {self.text!r}: {self.reason}"


class InvalidServeOptionError(RpcError, ValueError):
    """An argument of `aether.rpc.listen.serve_grpc` outside what it accepts."""

    def __init__(self, option: str, *, rule: str, value: object) -> None:
        super().__init__(option, rule, value)
        self.option = option
        """The argument's name."""
        self.rule = rule
        """What the argument must be."""
        self.value = value
        """The value given."""

    def __str__(self) -> str:
        return f"{self.option}: {self.rule} (got {self.value!r})"


class ListenError(RpcError, OSError):
    """The listening socket cannot be set up: the address is in use, not ours to take, or the bind failed.

    Chained (``from``) to the ``OSError`` when one caused it.
    """

    def __init__(self, address: str, *, reason: str) -> None:
        super().__init__(address)
        self.address = address
        """The listen address, as `ListenAddress` prints it."""
        self.reason = reason
        """What went wrong, in words."""

    def __str__(self) -> str:
        return f"cannot listen on {self.address!r}: {self.reason}"


class PurerpcVersionError(RpcError, RuntimeError):
    """The installed purerpc is not the version `aether.rpc.compat` patches; patching it blindly could break it."""

    def __init__(self, *, installed: str, required: str) -> None:
        super().__init__(installed, required)
        self.installed = installed
        """`purerpc.__version__`."""
        self.required = required
        """The only version the patches are written for."""

    def __str__(self) -> str:
        return (
            f"purerpc must be version {self.required!r} for the aether.rpc.compat patches (got {self.installed!r});"
            " review the patches against the new version before changing the pin"
        )


class PeerGoneError(RpcError, purerpc.CancelledError):  # type: ignore[misc]  # purerpc is untyped
    """The peer reset the stream (RST_STREAM), or the connection ended while the stream was open.

    Raised by a stream's receive (so a handler's request iterator raises it) and by sends on the stream.
    """

    def __init__(self, *, stream_id: int, error_code: int | None) -> None:
        self.stream_id = stream_id
        """The HTTP/2 stream id."""
        self.error_code = error_code
        """The HTTP/2 error code of the RST_STREAM, or None when the connection ended."""
        super().__init__(self._describe())

    def _describe(self) -> str:
        if self.error_code is None:
            return f"stream {self.stream_id}: the connection ended before the stream did"
        return f"stream {self.stream_id}: reset by the peer (error code {self.error_code!r})"

    def __str__(self) -> str:
        return self._describe()


class MessageTooLargeError(RpcError, purerpc.ResourceExhaustedError):  # type: ignore[misc]  # purerpc is untyped
    """A gRPC message larger than the configured limit, received or about to be sent.

    Only its stream fails, with status RESOURCE_EXHAUSTED and this message; the connection goes on.
    """

    def __init__(self, *, length: int, limit: int) -> None:
        self.length = length
        """The message's length in bytes (as its gRPC frame header says, for a received one)."""
        self.limit = limit
        """The limit in bytes."""
        super().__init__(self._describe())

    def _describe(self) -> str:
        return f"message of {self.length!r} bytes exceeds the limit of {self.limit!r} bytes"

    def __str__(self) -> str:
        return self._describe()
