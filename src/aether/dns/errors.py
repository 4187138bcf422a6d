"""Errors of the mesh DNS server.

MeshDnsError (Exception)
├── RecordsFileRejected (ValueError): the record file as a whole is unusable
├── ListenAddressInvalid (ValueError): a HOST:PORT flag that does not parse
└── WireFormatError (ValueError): a packet that is not well-formed DNS
"""

from __future__ import annotations

import attrs


class MeshDnsError(Exception):
    """The root of every error the `aether.dns` package raises."""


@attrs.define(kw_only=True, str=False)
class RecordsFileRejected(MeshDnsError, ValueError):
    """The record file could not be used at all (the server keeps its last records)."""

    reason: str

    def __str__(self) -> str:
        return f"record file: {self.reason}"


@attrs.define(kw_only=True, str=False)
class ListenAddressInvalid(MeshDnsError, ValueError):
    """A `HOST:PORT` value that does not parse."""

    text: str
    reason: str

    def __str__(self) -> str:
        return f"address {self.text!r}: {self.reason}"


@attrs.define(kw_only=True, str=False)
class WireFormatError(MeshDnsError, ValueError):
    """A packet that is not well-formed DNS."""

    reason: str

    def __str__(self) -> str:
        return self.reason
