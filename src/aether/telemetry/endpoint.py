"""Where OTLP goes: `--otlp-endpoint http://HOST:PORT` (OTLP/HTTP with protobuf bodies), checked at start.

An endpoint that does not parse is refused before the role does anything, with the reason (`OtlpEndpoint.parse`
raises `ValueError`); argparse turns that into a usage error.
"""

from __future__ import annotations

import urllib.parse

import attrs

__all__ = ["DEFAULT_OTLP_GRPC_PORT", "DEFAULT_OTLP_HTTP_PORT", "OtlpEndpoint"]

DEFAULT_OTLP_HTTP_PORT = 4318
"""OTLP/HTTP's registered port, used when the URL names none."""

DEFAULT_OTLP_GRPC_PORT = 4317
"""OTLP/gRPC's registered port (Envoy's stats sink speaks gRPC: `aether bootstrap --otlp-endpoint`)."""

_SCHEMES = ("http", "https")


@attrs.frozen(kw_only=True)
class OtlpEndpoint:
    """An OTLP/HTTP collector: `scheme://host:port`; signals are posted to `/v1/metrics` and `/v1/traces`."""

    scheme: str
    host: str
    port: int

    @classmethod
    def parse(
        cls, text: str, *, default_port: int = DEFAULT_OTLP_HTTP_PORT, option: str = "--otlp-endpoint"
    ) -> OtlpEndpoint:
        """Parse `http://HOST[:PORT]` or `https://HOST[:PORT]` (IPv6 hosts in brackets).

        Raises:
            ValueError: naming what is wrong and the form that is expected.
        """
        expected = "expected http://HOST:PORT or https://HOST:PORT, the collector's OTLP/HTTP receiver"
        try:
            url = urllib.parse.urlsplit(text.strip())
            port = url.port
        except ValueError as error:
            raise ValueError(f"{option} {text!r}: {error}; {expected}") from None
        if url.scheme not in _SCHEMES:
            raise ValueError(f"{option} {text!r}: scheme {url.scheme or 'missing'}; {expected}")
        if not url.hostname:
            raise ValueError(f"{option} {text!r}: no host; {expected}")
        if url.username is not None or url.password is not None:
            raise ValueError(f"{option} {text!r}: credentials in the URL are not supported; {expected}")
        if url.path not in ("", "/") or url.query or url.fragment:
            raise ValueError(
                f"{option} {text!r}: give the collector's base URL without a path or query"
                " (/v1/metrics and /v1/traces are appended)"
            )
        if port == 0:
            raise ValueError(f"{option} {text!r}: port 0; {expected}")
        return cls(scheme=url.scheme, host=url.hostname, port=default_port if port is None else port)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.base_url
