"""The CNI service's name and methods: the one table the agent's server and the plugin's client both read."""

from __future__ import annotations

from pathlib import Path

from google.protobuf.message import Message

from aether.proto.cni.v1 import cni_pb2

__all__ = ["DEFAULT_CNI_SOCKET", "METHODS", "SERVICE_NAME"]

SERVICE_NAME = "aether.cni.v1.CNIService"

DEFAULT_CNI_SOCKET = Path("/run/aether/cni.sock")
"""Where the agent serves the CNI service (DESIGN.md section 4)."""

METHODS: dict[str, tuple[type[Message], type[Message]]] = {
    "AddPod": (cni_pb2.AddPodRequest, cni_pb2.AddPodResponse),
    "RemovePod": (cni_pb2.RemovePodRequest, cni_pb2.RemovePodResponse),
    "CheckPod": (cni_pb2.CheckPodRequest, cni_pb2.CheckPodResponse),
    "CollectGarbage": (cni_pb2.CollectGarbageRequest, cni_pb2.CollectGarbageResponse),
    "Status": (cni_pb2.StatusRequest, cni_pb2.StatusResponse),
}
"""Method name to (request type, response type); every method is unary."""
