"""A TLS client context that follows the Workload API: every new connection presents the newest SVID and trusts
exactly the newest bundle, and the connections open when the bundle loses a CA are told to reconnect.

`ssl` cannot forget a CA: `load_verify_locations` only adds, so a context loaded again and again keeps trusting a
CA the trust domain dropped (a retired or compromised root) until the process restarts. So each change of the
material builds a fresh context (`aether.identity.tls.client_context`) and `RenewingContext.renew` swaps it in:
`RenewingContext` is the `ssl.SSLContext` its users hold (`open_grpc_socket(tls=...)`), and hands every new
connection's TLS object to the newest context. A connection verified before a CA was dropped was verified with it,
so when the new bundle lacks a CA of the old one (`bundle_narrowed`), `serve_context_renewal` calls `on_narrowed`:
the agent makes its registrar watch and registrations redial (`reconnect()`), resuming where they were.
"""

from __future__ import annotations

import functools
import logging
import operator
import socket
import ssl
from collections.abc import Callable

from aether.identity.tls import client_context
from aether.identity.workload_api import WorkloadIdentity
from aether.identity.workload_bundles import bundle_narrowed

__all__ = ["RenewingContext", "serve_context_renewal"]

LOG = logging.getLogger("aether.identity.renewal")


class RenewingContext(ssl.SSLContext):
    """An `ssl.SSLContext` whose new connections use the context last given to `renew` (at first: one with no
    certificate and no CA, whose handshakes fail).

    Only `wrap_bio` and `wrap_socket` are delegated, which is all a TLS connection asks of its context; settings
    made on this object itself have no effect (make them on the context given to `renew`). anyio runs `wrap_bio`
    of a context that is not exactly `ssl.SSLContext` in a worker thread: a thread hop per new connection.
    """

    _current: ssl.SSLContext
    renewals: int

    def __new__(cls, current: ssl.SSLContext | None = None) -> RenewingContext:
        self = super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)
        self._current = client_context() if current is None else current
        self.renewals = 0
        return self

    def __init__(self, current: ssl.SSLContext | None = None) -> None:
        """See `__new__` (the state is set there: `ssl.SSLContext` is built in `__new__`)."""

    @property
    def current(self) -> ssl.SSLContext:
        """The context new connections use."""
        return self._current

    def renew(self, context: ssl.SSLContext) -> None:
        """Make new connections use `context` (the open ones keep the one they were made with)."""
        self._current = context
        self.renewals += 1

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self._current.wrap_bio(
            incoming, outgoing, server_side=server_side, server_hostname=server_hostname, session=session
        )

    def wrap_socket(
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return self._current.wrap_socket(
            sock,
            server_side=server_side,
            do_handshake_on_connect=do_handshake_on_connect,
            suppress_ragged_eofs=suppress_ragged_eofs,
            server_hostname=server_hostname,
            session=session,
        )


async def serve_context_renewal(
    identity: WorkloadIdentity, context: RenewingContext, *, on_narrowed: Callable[[], None] = lambda: None
) -> None:
    """Until cancelled, renew `context` with the Workload API's default SVID and bundle whenever they change, and
    call `on_narrowed` after a renewal whose bundle dropped a CA. Material that does not load is reported in the
    identity's `last_error` and the log; the context keeps what it had."""
    seen = -1
    trusted = b""
    while True:
        seen = await identity.material_version.wait_value(functools.partial(operator.ne, seen))
        material = identity.tls_material()
        if material is None:
            continue
        try:
            fresh = client_context(material)
            narrowed = bool(trusted) and bundle_narrowed(trusted, material.bundle_pem)
        except (ssl.SSLError, ValueError) as exc:
            identity.last_error = f"the SVID {material.spiffe_id!r} does not load into TLS: {exc}"
            LOG.warning("%s", identity.last_error)
            continue
        context.renew(fresh)
        trusted = material.bundle_pem
        if narrowed:
            LOG.info("the trust bundle of %r dropped a CA: reconnecting", identity.trust_domain)
            on_narrowed()
