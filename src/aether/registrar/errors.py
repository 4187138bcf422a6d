"""Exceptions raised by the registrar.

The tree::

    RegistrarError
    ├── InvalidRequestError  (also ValueError) a request field breaks a rule; the RPC fails with INVALID_ARGUMENT
    ├── PermissionRefusedError (also PermissionError) the caller may not make this change; PERMISSION_DENIED
    ├── StoreError           (also OSError) the backend's store cannot be read or written; the registrar stops
    ├── StoreUnavailableError (also ConnectionError) the store cannot be reached now; the RPC fails UNAVAILABLE
    └── WatchProtocolError   (aether.registrar.watch_machine) a watch event out of protocol; the agent reconnects

Every exception keeps structured fields and builds its message in ``__str__``.
"""

from __future__ import annotations

__all__ = [
    "InvalidRequestError",
    "PermissionRefusedError",
    "RegistrarError",
    "StoreError",
    "StoreUnavailableError",
]


class RegistrarError(Exception):
    """Root of every exception the registrar raises."""


class InvalidRequestError(RegistrarError, ValueError):
    """A request field breaks a rule: `field` must be `rule` (got `value`)."""

    def __init__(self, field: str, *, rule: str, value: object) -> None:
        super().__init__(field, rule, value)
        self.field = field
        """The field's path in the request, as in `endpoint.port`."""
        self.rule = rule
        """What the field must be."""
        self.value = value
        """The value given."""

    def __str__(self) -> str:
        return f"{self.field}: {self.rule} (got {self.value!r})"


class PermissionRefusedError(RegistrarError, PermissionError):
    """The caller `caller` (its SPIFFE ID, "" if none) may not make this change: it `rule`."""

    def __init__(self, caller: str, *, rule: str) -> None:
        super().__init__(caller, rule)
        self.caller = caller
        self.rule = rule

    def __str__(self) -> str:
        return f"caller {self.caller or '(no client certificate)'!r}: {self.rule}"


class StoreError(RegistrarError, OSError):
    """The backend's store at `location` cannot be used: `reason` says why (chained to the cause)."""

    def __init__(self, location: str, *, reason: str) -> None:
        super().__init__(location, reason)
        self.location = location
        self.reason = reason

    def __str__(self) -> str:
        return f"registry store {self.location!r}: {self.reason}"


class StoreUnavailableError(RegistrarError, ConnectionError):
    """The store at `location` cannot be reached now (`reason`); nothing was written, and a retry may succeed."""

    def __init__(self, location: str, *, reason: str) -> None:
        super().__init__(location, reason)
        self.location = location
        self.reason = reason

    def __str__(self) -> str:
        return f"registry store {self.location!r} is unavailable: {self.reason}"
