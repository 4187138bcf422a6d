"""Kubernetes objects for the registrar tests: the labelled pod that stands for a given endpoint, and its node."""

from __future__ import annotations

from typing import Any

from aether.core.events.registry import Endpoint, EndpointKey
from aether.kube.api import KubeClient
from aether.kube.config import ClusterConfig
from aether.kube.resources import NODES, PODS
from aether.testing.kubeapi import KubeApi

READY = [{"type": "Ready", "status": "True"}]


def client_of(api: KubeApi) -> KubeClient:
    """A client of the test API server."""
    return KubeClient(ClusterConfig.from_url(api.url))


def pod_name(service: str, ip: str) -> str:
    return f"{service.split('/')[1]}-{ip.replace('.', '-').replace(':', '-')}"


def pod_object(
    service: str,
    ip: str,
    *,
    node: str = "node-1",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    phase: str = "Running",
    conditions: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A meshed pod of `service` (`<ns>/<sa>`) at `ip`, running and ready unless told otherwise."""
    namespace, account = service.split("/")
    return {
        "metadata": {
            "name": pod_name(service, ip),
            "namespace": namespace,
            "labels": {"aether.io/managed": "true"} if labels is None else labels,
            "annotations": annotations or {},
        },
        "spec": {"nodeName": node, "serviceAccountName": account, "containers": [{"name": "app"}]},
        "status": {
            "phase": phase,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": READY if conditions is None else conditions,
        },
    }


def node_object(name: str, *, region: str = "", zone: str = "", internal_ip: str = "") -> dict[str, Any]:
    """A node with topology labels and an InternalIP."""
    labels = {"topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": zone} if region else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"addresses": [{"type": "InternalIP", "address": internal_ip}] if internal_ip else []},
    }


def put_pod_of(api: KubeApi, endpoint: Endpoint) -> None:
    """Create (or update) the pod that stands for `endpoint` (service, ip, port, weight)."""
    annotations = {
        "endpoint.aether.io/port": str(endpoint.port),
        "endpoint.aether.io/weight": str(endpoint.weight),
    }
    api.store.put(PODS, pod_object(endpoint.service, endpoint.ip, annotations=annotations))


def delete_pod_of(api: KubeApi, key: EndpointKey) -> None:
    """Delete the pod that stands for the endpoint `key`."""
    service, _, ip = key
    api.store.delete(PODS, name=pod_name(service, ip), namespace=service.split("/")[0])


def put_node(api: KubeApi, name: str, **fields: Any) -> None:
    """Create or update a node."""
    api.store.put(NODES, node_object(name, **fields))
