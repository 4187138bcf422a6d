"""Envoy in tests: static bootstraps, `envoy --mode validate`, and polling a running Envoy until a check holds.

Starting Envoy itself is runtime code (`aether.envoy`); what only tests need lives here.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio
from google.protobuf import json_format

from aether.core.project.bootstrap import static_bootstrap as bootstrap_from_snapshot
from aether.core.snapshot import Snapshot
from aether.envoy.bootstrap import DEFAULT_NODE_CLUSTER, loopback_admin
from aether.envoy.process import find_envoy_binary
from aether.testing.xds_resources import LOOPBACK

__all__ = [
    "VALIDATE_TIMEOUT",
    "direct_response_bootstrap",
    "snapshot_bootstrap",
    "static_bootstrap",
    "validate_config",
    "wait_for",
]

VALIDATE_TIMEOUT = 120
"""Seconds `envoy --mode validate` may take (a few thousand resources take a few seconds on a loaded machine)."""


def validate_config(config: Mapping[str, Any], work_dir: Path, *, what: str) -> str:
    """Run `envoy --mode validate` on bootstrap `config`; return Envoy's output, or fail naming `what` it rejected.

    Raises:
        AssertionError: Envoy rejected the bootstrap (the message ends with the tail of its output).
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / "validate.json"
    path.write_text(json.dumps(config, indent=1))
    result = subprocess.run(
        [str(find_envoy_binary()), "--mode", "validate", "-c", str(path), "-l", "warning"],
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"envoy rejected {what}:\n{output[-4000:]}"
    return output


def snapshot_bootstrap(snapshot: Snapshot, *, admin_port: int | None = None) -> dict[str, Any]:
    """`aether.core.project.bootstrap.static_bootstrap(snapshot)` as JSON-ready dicts (admin on 127.0.0.1)."""
    admin = None if admin_port is None else (LOOPBACK, admin_port)
    return _to_json(bootstrap_from_snapshot(snapshot, admin=admin))


def static_bootstrap(
    *,
    listeners: Sequence[Any] = (),
    clusters: Sequence[Any] = (),
    admin_port: int = 0,
    node_id: str = "aether-static",
) -> dict[str, Any]:
    """Build a bootstrap whose listeners and clusters are all static.

    Args:
        listeners: `envoy.config.listener.v3.Listener` messages.
        clusters: `envoy.config.cluster.v3.Cluster` messages.
        admin_port: The admin port on 127.0.0.1; 0 lets Envoy pick one.
        node_id: The `node.id`, which only shows up in Envoy's logs and admin output here.

    Returns:
        The bootstrap as JSON-ready dicts.
    """
    return {
        "node": {"id": node_id, "cluster": DEFAULT_NODE_CLUSTER},
        "static_resources": {
            "listeners": [_to_json(listener) for listener in listeners],
            "clusters": [_to_json(cluster) for cluster in clusters],
        },
        "admin": loopback_admin(admin_port),
    }


def direct_response_bootstrap(port: int, body: str, *, host: str = "127.0.0.1") -> dict[str, Any]:
    """A static Envoy answering every HTTP/1.1 request on `host:port` with 200 and `body` (admin on a free loopback
    port): the smallest Envoy that serves traffic, for process-level tests and benchmarks (hot restart, crashes)."""
    route = {"match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": body}}}
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
        ".HttpConnectionManager",
        "stat_prefix": "ingress",
        "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [route]}]},
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            }
        ],
    }
    listener = {
        "name": "ingress",
        "address": {"socket_address": {"address": host, "port_value": port}},
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}]}
        ],
    }
    return {"admin": loopback_admin(0), "static_resources": {"listeners": [listener]}}


async def wait_for(
    predicate: Callable[[], Awaitable[bool]],
    *,
    # A polling helper's deadline is part of the call it makes, so it stays at the call site (STYLE C5).
    timeout: float,  # noqa: ASYNC109
    interval: float = 0.02,
) -> None:
    """Poll `predicate` until it returns True.

    Args:
        predicate: An async check, such as "the config dump shows cluster v2".
        timeout: Seconds to keep polling.
        interval: Seconds between polls.

    Raises:
        trio.TooSlowError: If `predicate` is still False after `timeout` seconds.
    """
    with trio.fail_after(timeout):
        # Envoy is another process: there is no trio.Event to wait on, so poll (ASYNC110 does not apply).
        while not await predicate():  # noqa: ASYNC110
            await trio.sleep(interval)


def _to_json(message: Any) -> dict[str, Any]:
    as_dict: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return as_dict
