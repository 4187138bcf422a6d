"""HTTP/1.1 on trio streams, framed by h11: the one HTTP/1 piece of every client and server in Aether (Envoy's
admin API and listeners, the demo's upstream and traffic, the admin socket, the Kubernetes client)."""

from __future__ import annotations

from aether.http1.connection import (
    HttpConnection,
    HttpProtocolError,
    HttpRequest,
    HttpResponse,
    http_get,
    http_request,
)

__all__ = [
    "HttpConnection",
    "HttpProtocolError",
    "HttpRequest",
    "HttpResponse",
    "http_get",
    "http_request",
]
