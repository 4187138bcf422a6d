"""The rules of the MeshConfig and EdgeConfig CRDs' `openAPIV3Schema` (config.aether.io/v1, manifests/base/crds),
as data, and a checker: what the controller's validating webhook and the MeshConfig file readers check.

A test holds the schemas equal to the CRDs', so the webhook, the readers and the API server's own schema
validation cannot drift apart. The checker knows the structural-schema keywords these schemas use
(type, properties, additionalProperties, required, enum, pattern, maxLength, minimum, maximum); a denial names the
field and the rule, as the API server's validation error does: `spec.proxy.traceSampleRate: must be <= 1 (got 2)`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["CONFIG_SCHEMAS", "EDGE_CONFIG_SPEC", "MESH_CONFIG_NAME", "MESH_CONFIG_SPEC", "schema_problem"]

_DURATION: Mapping[str, Any] = {"type": "string", "pattern": "^([0-9]{1,5}(h|m|s|ms)){1,4}$"}
_WINDOW: Mapping[str, Any] = {"type": "integer", "minimum": 65535, "maximum": 2147483647}

MESH_CONFIG_SPEC: Mapping[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "meshDomain": {
            "type": "string",
            "maxLength": 253,
            "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        },
        "trustDomain": {"type": "string", "maxLength": 255, "pattern": "^[a-z0-9._-]+$"},
        "onDemandTtlSeconds": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 31536000},
        "proxy": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "accessLogsEnabled": {"type": "boolean"},
                "accessLogSuccessSampleRate": {"type": "integer", "minimum": 0, "maximum": 100},
                "tracingEnabled": {"type": "boolean"},
                "traceSampleRate": {"type": "number", "minimum": 0, "maximum": 1},
                "emitStatsPod": {"type": "boolean"},
            },
        },
    },
}
"""The MeshConfig CRD's `spec` schema, less its descriptions."""

EDGE_CONFIG_SPEC: Mapping[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "useRemoteAddress": {"type": "boolean"},
        "xffNumTrustedHops": {"type": "integer", "minimum": 0, "maximum": 255},
        "headersWithUnderscoresAction": {
            "type": "string",
            "enum": ["ALLOW", "REJECT_REQUEST", "DROP_HEADER"],
        },
        "http2": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "maxConcurrentStreams": {"type": "integer", "minimum": 1, "maximum": 2147483647},
                "initialStreamWindowSize": _WINDOW,
                "initialConnectionWindowSize": _WINDOW,
            },
        },
        "streamIdleTimeout": _DURATION,
        "requestTimeout": _DURATION,
        "idleTimeout": _DURATION,
        "perConnectionBufferLimitBytes": {"type": "integer", "minimum": 1024, "maximum": 2147483647},
        "http3": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"enabled": {"type": "boolean"}},
        },
    },
}
"""The EdgeConfig CRD's `spec` schema, less its descriptions."""

CONFIG_SCHEMAS: Mapping[str, Mapping[str, Any]] = {
    "MeshConfig": MESH_CONFIG_SPEC,
    "EdgeConfig": EDGE_CONFIG_SPEC,
}
"""By kind, the `spec` schema."""

MESH_CONFIG_NAME = "default"
"""The one MeshConfig name a namespace may have (the CRD's `metadata.name` enum)."""

_TYPES: Mapping[str, tuple[type, ...]] = {
    "object": (dict,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def _type_problem(value: Any, wanted: str) -> bool:
    if isinstance(value, bool) and wanted in ("integer", "number"):
        return True
    if wanted == "integer" and isinstance(value, float) and value.is_integer():
        return False
    return not isinstance(value, _TYPES[wanted])


def schema_problem(value: Any, schema: Mapping[str, Any], path: str) -> str | None:
    """Return the first rule of `schema` that `value` (at field `path`) breaks, described; None when it holds."""
    wanted = schema.get("type")
    if wanted is not None and _type_problem(value, wanted):
        return f"{path}: must be of type {wanted} (got {value!r})"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path}: must be one of {list(schema['enum'])!r} (got {value!r})"
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{path}: must be at most {schema['maxLength']} characters (got {len(value)})"
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            return f"{path}: must match {schema['pattern']!r} (got {value!r})"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path}: must be >= {schema['minimum']} (got {value!r})"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path}: must be <= {schema['maximum']} (got {value!r})"
    if isinstance(value, dict):
        return _object_problem(value, schema, path)
    return None


def _object_problem(value: Mapping[str, Any], schema: Mapping[str, Any], path: str) -> str | None:
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            return f"{path}.{name}: Required value"
    for name in sorted(value):
        if name in properties:
            problem = schema_problem(value[name], properties[name], f"{path}.{name}")
            if problem is not None:
                return problem
        elif schema.get("additionalProperties") is False:
            return f"{path}.{name}: unknown field (allowed: {sorted(properties)!r})"
    return None
