"""Exceptions raised by the xDS adapter.

Every exception keeps structured fields and builds its message in ``__str__``.
"""

from __future__ import annotations

__all__ = ["XdsError"]


class XdsError(Exception):
    """Root of every exception the xDS adapter raises.

    The tree::

        XdsError
        └── ProtocolError  (aether.xds.protocol) a request that breaks the xDS protocol: its stream ends

    Serving gRPC raises the errors of `aether.rpc.errors` (`RpcError`).
    """
