"""Reading a pod's mesh settings from its labels and annotations (the contract in DESIGN.md section 4)."""

from __future__ import annotations

from typing import Any

import attrs

from aether.core.events.pods import Pod
from aether.core.events.registry import HealthCheckMode, Protocol
from aether.core.state.pods import PodConfig
from aether.core.validation import (
    MAX_PORT,
    dns_label_problem,
    dns_subdomain_problem,
    ip_problem,
    service_key_problem,
)

MANAGED_LABEL = "aether.io/managed"
UPSTREAMS = "config.aether.io/upstreams"
PORT = "endpoint.aether.io/port"
PORTS = "endpoint.aether.io/ports"
WEIGHT = "endpoint.aether.io/weight"
PROTOCOL = "endpoint.aether.io/protocol"
HEALTH_CHECK_MODE = "endpoint.aether.io/health-check-mode"

NEVER_MESHED = ("kube-system", "aether-system")
"""Namespaces never meshed, whatever their pods' labels say (plus every `spire-*` namespace)."""

MAX_WEIGHT = 1_000_000
"""Envoy sums endpoint weights per locality into a uint32; a million per endpoint leaves room for 4,000 endpoints."""

_PROTOCOLS = {"http": Protocol.HTTP, "tcp": Protocol.TCP}
_MODES = {"eds": HealthCheckMode.EDS, "active": HealthCheckMode.ACTIVE}


def unmanaged_reason(pod: Pod) -> str | None:
    """Return why `pod` is not part of the mesh, or None when it is."""
    if pod.namespace in NEVER_MESHED or pod.namespace.startswith("spire-"):
        return f"pod {pod.key!r}: namespace {pod.namespace!r} is never meshed"
    label = pod.labels.get(MANAGED_LABEL)
    if label != "true":
        return f"pod {pod.key!r}: label {MANAGED_LABEL!r} must be 'true' to join the mesh (got {label!r})"
    return None


def _int_annotation(pod: Pod, name: str, *, low: int, high: int, problems: list[str]) -> int | None:
    raw = pod.annotations.get(name)
    if raw is None:
        return None
    digits = raw.strip()
    # ASCII digits only: int() would also take '1_000', '+5' and non-ASCII digits, which no user means.
    value = int(digits) if digits.isascii() and digits.isdigit() else None
    if value is None or not low <= value <= high:
        problems.append(f"annotation {name!r} must be an integer {low}..{high} (got {raw!r})")
        return None
    return value


def _ports(pod: Pod, problems: list[str]) -> tuple[int, ...]:
    raw = pod.annotations.get(PORTS)
    if raw is None:
        return ()
    ports: list[int] = []
    for item in raw.split(","):
        number = item.strip().removesuffix("=h2")
        if number.isascii() and number.isdigit() and 1 <= int(number) <= MAX_PORT:
            ports.append(int(number))
        else:
            problems.append(
                f"annotation {PORTS!r}: each port must be 1..{MAX_PORT}, optionally '=h2' (got {item!r})"
            )
    return tuple(ports)


def _choice(pod: Pod, name: str, choices: dict[str, Any], problems: list[str]) -> Any:
    raw = pod.annotations.get(name)
    if raw is None:
        return None
    value = choices.get(raw.strip().lower())
    if value is None:
        problems.append(f"annotation {name!r} must be one of {sorted(choices)!r} (got {raw!r})")
    return value


def _upstreams(pod: Pod, problems: list[str]) -> tuple[str, ...]:
    raw = pod.annotations.get(UPSTREAMS)
    if raw is None:
        return ()
    keys: set[str] = set()
    for item in raw.split(","):
        name = item.strip()
        if not name:
            continue
        key = name if "/" in name else f"{pod.namespace}/{name}"
        problem = service_key_problem(key)
        if problem is None:
            keys.add(key)
        else:
            problems.append(f"annotation {UPSTREAMS!r}: {problem}")
    return tuple(sorted(keys))


def parse_pod_config(pod: Pod) -> tuple[PodConfig, tuple[str, ...]]:
    """Return `pod`'s mesh settings and the problems found; an invalid setting keeps its default.

    Returns:
        The settings, and one message per problem (empty when every annotation parsed).
    """
    problems: list[str] = []
    defaults = PodConfig()
    port = _int_annotation(pod, PORT, low=1, high=MAX_PORT, problems=problems) or defaults.port
    ports = tuple(sorted({port, *_ports(pod, problems)}))
    weight = _int_annotation(pod, WEIGHT, low=1, high=MAX_WEIGHT, problems=problems) or defaults.weight
    protocol = _choice(pod, PROTOCOL, _PROTOCOLS, problems) or defaults.protocol
    mode = _choice(pod, HEALTH_CHECK_MODE, _MODES, problems) or defaults.health_check_mode
    upstreams = _upstreams(pod, problems)
    config = attrs.evolve(
        defaults,
        port=port,
        ports=ports,
        weight=weight,
        protocol=protocol,
        upstreams=upstreams,
        health_check_mode=mode,
    )
    return config, tuple(problems)


def address_problem(pod: Pod) -> str | None:
    """Check that a managed pod has IP addresses, all valid (the mesh binds and registers the first)."""
    if not pod.ips:
        return f"pod {pod.key!r}: has no IP address yet; it joins the mesh once one is assigned"
    problem = next((p for p in (ip_problem(ip, what="ip") for ip in pod.ips) if p), None)
    return None if problem is None else f"pod {pod.key!r}: {problem}"


def pod_problem(pod: Pod) -> str | None:
    """Check the identity fields of `pod` that every projection relies on."""
    problem = (
        dns_label_problem(pod.namespace, what="namespace")
        or dns_subdomain_problem(pod.name, what="pod name")
        or dns_subdomain_problem(pod.service_account, what="service account")
    )
    return None if problem is None else f"pod {pod.key!r}: {problem}"
