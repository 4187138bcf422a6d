"""What this node knows of the mesh registry: the service catalog and the endpoints of its services."""

from __future__ import annotations

import attrs
import immutables

from aether.core.events.registry import Endpoint, Protocol

ServiceEndpoints = immutables.Map[tuple[Protocol, str], Endpoint]
"""One service's endpoints keyed by `(protocol, ip)`."""

_NO_ENDPOINTS: ServiceEndpoints = immutables.Map()


@attrs.frozen(kw_only=True)
class RegistryState:
    """The registry as streamed by the registrar.

    Invariant: every key of `endpoints` is in `services` (an endpoint never outlives its service's catalog entry).
    """

    version: str = ""
    """The registrar's version of the last applied registry event."""
    synced: bool = False
    """True once a (re)sync completed; False from a new full snapshot until its completion."""
    services: immutables.Map[str, bool] = immutables.Map()
    """The mesh service catalog (a set: every value is True)."""
    endpoints: immutables.Map[str, ServiceEndpoints] = immutables.Map()
    """Endpoints by service key, then by `(protocol, ip)`. Services without endpoints have no entry."""

    def endpoints_of(self, service: str) -> ServiceEndpoints:
        """Return the endpoints of `service` (empty if it has none)."""
        return self.endpoints.get(service, _NO_ENDPOINTS)

    def endpoint_count(self) -> int:
        """Return how many endpoints the registry holds."""
        return sum(len(items) for items in self.endpoints.values())
