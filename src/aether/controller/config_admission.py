"""Whether the mesh admits a MeshConfig or an EdgeConfig: the rules of their CRDs (`aether.kube.config_schemas`),
checked by the validating webhook; a denial names the field and the rule, as the API server's validation error
does: `spec.proxy.traceSampleRate: must be <= 1 (got 2)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aether.controller.verdict import ALLOWED, Verdict
from aether.kube.config_schemas import CONFIG_SCHEMAS, MESH_CONFIG_NAME, schema_problem

__all__ = ["config_verdict"]


def config_verdict(kind: str, obj: Mapping[str, Any]) -> Verdict:
    """Return the verdict on `obj`, a MeshConfig or EdgeConfig (`kind`): the CRD's rules, the first broken named."""
    metadata = obj.get("metadata")
    name = metadata.get("name", "") if isinstance(metadata, Mapping) else ""
    namespace = metadata.get("namespace", "") if isinstance(metadata, Mapping) else ""
    where = f"{kind} {namespace}/{name}"
    if kind == "MeshConfig" and name != MESH_CONFIG_NAME:
        return Verdict(
            allowed=False, message=f"{where}: metadata.name: must be {MESH_CONFIG_NAME!r} (got {name!r})"
        )
    if "spec" not in obj:
        return Verdict(allowed=False, message=f"{where}: spec: Required value")
    problem = schema_problem(obj["spec"], CONFIG_SCHEMAS[kind], "spec")
    return ALLOWED if problem is None else Verdict(allowed=False, message=f"{where}: {problem}")
