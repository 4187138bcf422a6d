"""`aether demo`: the whole mesh on one machine (see `aether.demo.mesh` for what runs, `scenario` for the steps)."""

from aether.demo.app import DemoOptions, run_demo
from aether.demo.mesh import DemoError
from aether.demo.upstream import (
    UPSTREAM_NAME_HEADER,
    HttpUpstream,
    HttpUpstreamStatistics,
    open_http_upstream,
    serve_http_upstream,
)

__all__ = [
    "UPSTREAM_NAME_HEADER",
    "DemoError",
    "DemoOptions",
    "HttpUpstream",
    "HttpUpstreamStatistics",
    "open_http_upstream",
    "run_demo",
    "serve_http_upstream",
]
