"""The MeshConfig (config.aether.io/v1) as the controller projects it and the agent and the edge read it.

One MeshConfig named `default` per namespace; `aether-system`'s is the fallback. The controller writes each
namespace's effective spec (the fallback's, overridden field by field by the namespace's own) into the ConfigMap
`aether-mesh-config`, key `mesh-config.yaml`, of that namespace: YAML with sorted keys, so the same specs always
give the same bytes and an unchanged spec is never written again. The agent and the edge (in aether-system)
mount their namespace's ConfigMap and read the file as a source (`aether.kube.mesh_config_file`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from aether.core.events.kube import MeshConfig
from aether.kube.config_schemas import MESH_CONFIG_NAME, MESH_CONFIG_SPEC, schema_problem
from aether.kube.resources import JsonObject, ResourceType

__all__ = [
    "CONFIG_MAPS",
    "FALLBACK_NAMESPACE",
    "MESH_CONFIGS",
    "MESH_CONFIG_KEY",
    "MESH_CONFIG_MAP",
    "PROJECTION_LABELS",
    "MeshConfigInvalid",
    "effective_spec",
    "mesh_config_from_text",
    "projected_config_map",
    "projected_text",
    "spec_of",
]

MESH_CONFIGS = ResourceType(
    group="config.aether.io", version="v1", plural="meshconfigs", kind="MeshConfig", namespaced=True
)
CONFIG_MAPS = ResourceType(group="", version="v1", plural="configmaps", kind="ConfigMap", namespaced=True)
FALLBACK_NAMESPACE = "aether-system"
"""Whose MeshConfig every namespace inherits (the control plane's own)."""
MESH_CONFIG_MAP = "aether-mesh-config"
MESH_CONFIG_KEY = "mesh-config.yaml"
PROJECTION_LABELS: Mapping[str, str] = {"app.kubernetes.io/managed-by": "aether-controller"}
"""The labels of every projected ConfigMap (the controller watches ConfigMaps by them)."""


class MeshConfigInvalid(ValueError):
    """A MeshConfig spec (an object's, or a projected file's) breaks a rule: `where` names it, `problem` says how."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where = where
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"


def _merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def spec_of(obj: JsonObject) -> dict[str, Any]:
    """The spec of MeshConfig `obj`, checked against the CRD's rules.

    Raises:
        MeshConfigInvalid: It is not named `default`, or its spec breaks a rule (the field and rule named).
    """
    metadata = obj.get("metadata") or {}
    where = f"MeshConfig {metadata.get('namespace', '')}/{metadata.get('name', '')}"
    if metadata.get("name") != MESH_CONFIG_NAME:
        raise MeshConfigInvalid(
            where, f"metadata.name: must be {MESH_CONFIG_NAME!r} (got {metadata.get('name')!r})"
        )
    spec = obj.get("spec")
    problem = schema_problem(spec, MESH_CONFIG_SPEC, "spec")
    if problem is not None:
        raise MeshConfigInvalid(where, problem)
    assert isinstance(spec, dict), "the schema checked the type (a bug)"
    return spec


def effective_spec(fallback: Mapping[str, Any] | None, own: Mapping[str, Any]) -> dict[str, Any]:
    """A namespace's spec: the fallback's fields, each overridden by the namespace's own (objects key by key)."""
    return _merged(fallback or {}, own)


def projected_text(spec: Mapping[str, Any]) -> str:
    """The `mesh-config.yaml` of `spec`: block YAML, keys sorted (the same spec, the same bytes)."""
    return yaml.safe_dump(dict(spec), sort_keys=True, default_flow_style=False)


def projected_config_map(namespace: str, spec: Mapping[str, Any]) -> JsonObject:
    """The ConfigMap `aether-mesh-config` of `namespace` holding `spec`."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": MESH_CONFIG_MAP, "namespace": namespace, "labels": dict(PROJECTION_LABELS)},
        "data": {MESH_CONFIG_KEY: projected_text(spec)},
    }


def mesh_config_from_text(text: str, *, where: str) -> MeshConfig:
    """The core's MeshConfig of a projected `mesh-config.yaml` (absent fields keep the core's defaults).

    Of the proxy telemetry fields, `tracingEnabled` and `traceSampleRate` are carried (the rate in millionths;
    absent with tracing on, 100%: Envoy's own default); the others are checked only.

    Raises:
        MeshConfigInvalid: The text is not YAML, not a mapping, or breaks the CRD's rules (`where` names the file).
    """
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise MeshConfigInvalid(where, f"not YAML ({error})") from None
    spec = {} if spec is None else spec
    problem = schema_problem(spec, MESH_CONFIG_SPEC, "spec")
    if problem is not None:
        raise MeshConfigInvalid(where, problem)
    defaults = MeshConfig()
    proxy = spec.get("proxy") or {}
    tracing, rate = bool(proxy.get("tracingEnabled", defaults.tracing_enabled)), proxy.get("traceSampleRate")
    return MeshConfig(
        mesh_domain=spec.get("meshDomain", defaults.mesh_domain),
        trust_domain=spec.get("trustDomain", defaults.trust_domain),
        on_demand_ttl_seconds=int(spec.get("onDemandTtlSeconds", defaults.on_demand_ttl_seconds)),
        tracing_enabled=tracing,
        trace_sample_per_million=(
            round(float(rate) * 1_000_000) if rate is not None else 1_000_000 if tracing else 0
        ),
    )
