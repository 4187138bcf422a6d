"""Service selections as Envoy subsets: the endpoints of a service account's cluster that a Service selects.

A backendRef names a Kubernetes Service, whose pods may share their service account (the identity, and the cluster)
with other Services' pods. Its traffic takes the cluster with a `metadata_match` of the Service's selector; the
cluster's subset load balancer groups its endpoints by the selectors' label keys, which each endpoint carries (its
pod's labels) in its `envoy.lb` metadata. A request without a match (a caller of the identity's own name) takes
any endpoint; one whose selector matches no endpoint gets none (503), never another Service's pods.
See https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/load_balancing/subsets
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from google.protobuf import struct_pb2

from aether.core.gateway.ir import SelectorKeys

LB_METADATA = "envoy.lb"
"""The metadata namespace the subset load balancer reads, on endpoints and in route matches."""

_Subset = cluster_pb2.Cluster.LbSubsetConfig


def _metadata(labels: Iterable[tuple[str, str]]) -> Any:
    fields = struct_pb2.Struct()
    for label, value in labels:
        fields.fields[label].string_value = value
    metadata = base_pb2.Metadata()
    metadata.filter_metadata[LB_METADATA].CopyFrom(fields)
    return metadata


def metadata_match(selector: tuple[tuple[str, str], ...]) -> Any:
    """Return the `metadata_match` that takes only the endpoints whose labels include all of `selector`."""
    return _metadata(selector)


def subset_config(keys: SelectorKeys) -> Any:
    """Return the subset load balancer config of a cluster whose routes select by the label key sets `keys`.

    Without a match (the service account's own callers), any endpoint (`ANY_ENDPOINT`); with the keys of one of
    `keys` but values no endpoint has (a Service selecting no pod), no endpoint at all (`NO_FALLBACK`).
    """
    return _Subset(
        fallback_policy=_Subset.ANY_ENDPOINT,
        subset_selectors=[
            _Subset.LbSubsetSelector(keys=list(item), fallback_policy=_Subset.LbSubsetSelector.NO_FALLBACK)
            for item in keys
        ],
    )


def endpoint_metadata(labels: Mapping[str, str], keys: SelectorKeys) -> Any | None:
    """Return the `envoy.lb` metadata of an endpoint with `labels`: its labels of the keys in `keys`, sorted (None
    when it has none of them: only the labels selectors read are sent, so other label changes move no bytes)."""
    wanted = sorted({key for item in keys for key in item if key in labels})
    if not wanted:
        return None
    return _metadata((key, labels[key]) for key in wanted)
