"""What the mutating webhook does to a pod created in a namespace labelled for the mesh, as RFC 6902 JSONPatch.

Three changes, each made only when missing, so the patch of a pod that has them is empty (a reinvocation changes
nothing) and the same pod always gets the same patch:

1. the label `aether.io/managed: "true"` (the agent, the CNI and the registrar select meshed pods by it);
2. the DNS option `ndots` so that a mesh name, `<sa>.<ns>.<meshDomain>`, is tried as an absolute name first
   instead of walking the cluster's search domains (Kubernetes' default `ndots: 5` would try five of them);
3. the init container `aether-identity-ready`, first of all, running `aether identity-ready`: it holds the app's
   containers until the pod's SVID is issued. By default (`IdentityCheck.INBOUND`) it checks the certificate the
   pod's own mesh inbound serves (`--inbound`: `$POD_IP:18008`, whose SVID must name
   `spiffe://<trustDomain>/ns/<ns>/sa/<sa>`: `--trust-domain` from the patch, namespace and service account from
   the Downward API): no volume, no privilege, so a namespace enforcing the Pod Security "baseline" (or
   "restricted") level admits it. `IdentityCheck.ADMIN_SOCKET` asks the node agent's admin socket instead,
   through the node's `/run/aether` as a read-only hostPath volume the patch adds (which "baseline" refuses), for
   the agent's reasons on failure (the agent checks the SPIFFE ID itself).

A pod that opts out with `aether.io/managed: "false"`, or lives in a namespace that is never meshed, is left alone.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from aether.controller.verdict import ALLOWED, Verdict
from aether.core.events.kube import MeshConfig
from aether.core.reduce.annotations import MANAGED_LABEL, NEVER_MESHED

__all__ = ["IDENTITY_READY_CONTAINER", "IdentityCheck", "PodMutation", "mesh_ndots", "pod_verdict"]

IDENTITY_READY_CONTAINER = "aether-identity-ready"
"""The init container's name (also how the webhook knows a pod already has it)."""
IDENTITY_READY_COMMAND = ("/opt/aether/bin/aether", "identity-ready")
"""Its command: the image's `aether` (manifests/base/controller.yaml runs the same path)."""
AGENT_RUN_VOLUME = "aether-agent-run"
"""The pod volume of the node's `/run/aether` (hostPath), mounted read-only in the init container: the agent's
admin socket is where `aether identity-ready` asks whether the pod's SVID is served."""
AGENT_RUN_DIR = "/run/aether"
AGENT_GROUP = 10001
"""The agent's group (`manifests/base/agent.yaml`'s runAsGroup): its sockets are mode 0660 of this group, so the
init container runs in it to connect to the admin socket (as this non-root user, with no capability)."""


class IdentityCheck(enum.Enum):
    """How the injected `aether identity-ready` asks whether the pod's SVID is served."""

    INBOUND = "inbound"
    """A TLS handshake with the pod's own mesh inbound: no volume (Pod Security "baseline" admits it)."""
    ADMIN_SOCKET = "admin-socket"
    """The node agent's admin socket, through a hostPath volume of the node's `/run/aether`."""


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def mesh_ndots(mesh_domain: str) -> int:
    """The `ndots` at which a mesh name `<sa>.<ns>.<mesh_domain>` counts as absolute: its number of dots."""
    return mesh_domain.count(".") + 2


@attrs.frozen(kw_only=True)
class PodMutation:
    """What the webhook adds: the init container's image, the mesh domain `ndots` is set for, and the trust domain
    of the SPIFFE ID the inbound check expects (the agents' MeshConfig's `trustDomain`, as they check SVIDs)."""

    image: str
    mesh_domain: str = MeshConfig().mesh_domain
    trust_domain: str = MeshConfig().trust_domain
    identity_check: IdentityCheck = IdentityCheck.INBOUND

    def init_container(self) -> dict[str, Any]:
        """The `aether-identity-ready` container spec (Pod Security "restricted": no privileges, read-only root,
        the runtime's seccomp profile), naming its pod from the Downward API."""
        env = [_field_env("POD_NAMESPACE", "metadata.namespace"), _field_env("POD_NAME", "metadata.name")]
        container: dict[str, Any] = {
            "name": IDENTITY_READY_CONTAINER,
            "image": self.image,
            "imagePullPolicy": "IfNotPresent",
            "command": list(IDENTITY_READY_COMMAND),
        }
        if self.identity_check is IdentityCheck.INBOUND:
            container["args"] = ["--inbound", f"--trust-domain={self.trust_domain}"]
            env += [
                _field_env("POD_SERVICE_ACCOUNT", "spec.serviceAccountName"),
                _field_env("POD_IP", "status.podIP"),
            ]
            container["env"] = env
        else:
            container["args"] = [f"--admin={AGENT_RUN_DIR}/admin.sock"]
            container["env"] = env
            container["volumeMounts"] = [
                {"name": AGENT_RUN_VOLUME, "mountPath": AGENT_RUN_DIR, "readOnly": True}
            ]
        container["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": AGENT_GROUP,
            "runAsGroup": AGENT_GROUP,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        return container

    def volume(self) -> dict[str, Any] | None:
        """The pod volume the init container mounts (the node's `/run/aether`), or None (the inbound check)."""
        if self.identity_check is IdentityCheck.INBOUND:
            return None
        return {"name": AGENT_RUN_VOLUME, "hostPath": {"path": AGENT_RUN_DIR, "type": "Directory"}}


def _pointer(token: str) -> str:
    """One RFC 6901 reference token (`aether.io/managed` → `aether.io~1managed`)."""
    return token.replace("~", "~0").replace("/", "~1")


def _label_patch(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    labels = metadata.get("labels")
    if not isinstance(labels, Mapping):
        return [{"op": "add", "path": "/metadata/labels", "value": {MANAGED_LABEL: "true"}}]
    if labels.get(MANAGED_LABEL) == "true":
        return []
    return [{"op": "add", "path": f"/metadata/labels/{_pointer(MANAGED_LABEL)}", "value": "true"}]


def _dns_patch(spec: Mapping[str, Any], ndots: str) -> list[dict[str, Any]]:
    wanted = {"name": "ndots", "value": ndots}
    dns = spec.get("dnsConfig")
    if not isinstance(dns, Mapping):
        return [{"op": "add", "path": "/spec/dnsConfig", "value": {"options": [wanted]}}]
    options = dns.get("options")
    if not isinstance(options, list):
        return [{"op": "add", "path": "/spec/dnsConfig/options", "value": [wanted]}]
    for index, option in enumerate(options):
        if isinstance(option, Mapping) and option.get("name") == "ndots":
            if option.get("value") == ndots:
                return []
            return [{"op": "replace", "path": f"/spec/dnsConfig/options/{index}", "value": wanted}]
    return [{"op": "add", "path": "/spec/dnsConfig/options/-", "value": wanted}]


def _init_patch(spec: Mapping[str, Any], container: dict[str, Any]) -> list[dict[str, Any]]:
    present = spec.get("initContainers")
    if not isinstance(present, list) or not present:
        return [{"op": "add", "path": "/spec/initContainers", "value": [container]}]
    if any(isinstance(item, Mapping) and item.get("name") == IDENTITY_READY_CONTAINER for item in present):
        return []
    return [{"op": "add", "path": "/spec/initContainers/0", "value": container}]


def _volume_patch(spec: Mapping[str, Any], volume: dict[str, Any] | None) -> list[dict[str, Any]]:
    if volume is None:
        return []
    present = spec.get("volumes")
    if not isinstance(present, list) or not present:
        return [{"op": "add", "path": "/spec/volumes", "value": [volume]}]
    if any(isinstance(item, Mapping) and item.get("name") == volume["name"] for item in present):
        return []
    return [{"op": "add", "path": "/spec/volumes/-", "value": volume}]


def pod_verdict(pod: Mapping[str, Any], *, namespace: str, mutation: PodMutation) -> Verdict:
    """Return the patch that meshes `pod` (created in `namespace`), or a denial naming the malformed field."""
    metadata = pod.get("metadata", {})
    spec = pod.get("spec")
    if not isinstance(metadata, Mapping):
        return Verdict(allowed=False, message=f"pod in {namespace!r}: metadata: must be an object")
    name = metadata.get("name") or metadata.get("generateName") or ""
    if not isinstance(spec, Mapping):
        return Verdict(
            allowed=False, message=f"pod {namespace}/{name}: spec: must be an object (got {spec!r})"
        )
    labels = metadata.get("labels")
    opted_out = isinstance(labels, Mapping) and labels.get(MANAGED_LABEL) == "false"
    if opted_out or namespace in NEVER_MESHED or namespace.startswith("spire-"):
        return ALLOWED
    patch = [
        *_label_patch(metadata),
        *_dns_patch(spec, str(mesh_ndots(mutation.mesh_domain))),
        *_init_patch(spec, mutation.init_container()),
        *_volume_patch(spec, mutation.volume()),
    ]
    return Verdict(allowed=True, patch=tuple(patch))
