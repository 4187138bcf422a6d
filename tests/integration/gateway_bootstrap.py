"""A validation bootstrap for Gateway API views: every HTTP route the view holds, served by real Envoy listeners.

`envoy --mode validate` then checks the routes the way Envoy loads them: matchers, regexes (RE2), rewrites,
redirects, weighted clusters, mirrors, retry policies, and (with `validate_clusters`) that every cluster a route
names exists. Each mesh service's routes become a listener whose route table has them as its only virtual host;
each edge HTTP listener keeps its virtual hosts plus the 404 catch-all the edge adds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envoy.config.route.v3 import route_components_pb2
from google.protobuf import json_format

from aether.core.gateway import GatewayView
from aether.core.mesh_names import http_cluster_name
from aether.core.project.gateway_routes import envoy_route_list, envoy_virtual_host
from aether.testing.envoy import validate_config

VALIDATE_TIMEOUT = 120
"""Seconds `envoy --mode validate` gets (a few hundred listeners take about a second)."""


def _dict(message: Any) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(json_format.MessageToJson(message, preserving_proto_field_name=True))
    return value


def _listener(name: str, port: int, vhosts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                            "stat_prefix": name,
                            "route_config": {
                                "name": name,
                                "virtual_hosts": vhosts,
                                "validate_clusters": True,
                                "ignore_port_in_host_matching": True,
                            },
                            "http_filters": [
                                {
                                    "name": "envoy.filters.http.router",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                                    },
                                }
                            ],
                        },
                    }
                ]
            }
        ],
    }


def views_bootstrap(
    views: Iterable[tuple[str, GatewayView]], *, mesh_domain: str = "aether.internal"
) -> dict[str, Any]:
    """Return one bootstrap holding the HTTP routes of every `(label, view)`."""
    listeners: list[dict[str, Any]] = []
    clusters: set[str] = set()
    port = 20000
    for label, view in views:
        for service, routing in sorted(view.mesh_routes.items()):
            port += 1
            vhost = route_components_pb2.VirtualHost(
                name=service, domains=["*"], routes=envoy_route_list(routing.all_routes, mesh=True)
            )
            listeners.append(_listener(f"{label}/mesh/{service}", port, [_dict(vhost)]))
            clusters.update(
                http_cluster_name(item, mesh_domain=mesh_domain) for item in routing.backend_services
            )
        for listener in view.edge_listeners:
            if listener.protocol not in ("HTTP", "HTTPS"):
                continue
            port += 1
            vhosts = [_dict(envoy_virtual_host(vhost)) for vhost in listener.virtual_hosts]
            if not any("*" in vhost.get("domains", []) for vhost in vhosts):
                vhosts.append(
                    {
                        "name": "not-found",
                        "domains": ["*"],
                        "routes": [{"match": {"prefix": "/"}, "direct_response": {"status": 404}}],
                    }
                )
            listeners.append(_listener(f"{label}/edge/{listener.gateway}/{listener.name}", port, vhosts))
        clusters.update(name for name in view.backend_clusters if not name.startswith(("tcp:", "udp:")))
    return {
        "node": {"id": "gateway-validate", "cluster": "aether-validate"},
        "static_resources": {
            "listeners": listeners,
            "clusters": [
                {
                    "name": name,
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "load_assignment": {"cluster_name": name},
                }
                for name in sorted(clusters)
            ],
        },
    }


def validate_views(views: Iterable[tuple[str, GatewayView]], work_dir: Path) -> str:
    """Run `envoy --mode validate` on the views' bootstrap; return Envoy's output (assert it accepted)."""
    return validate_config(views_bootstrap(views), work_dir / "gateway-validate", what="the routes")
