"""Service selections as Envoy subsets: route matches, cluster subset configs and endpoint metadata."""

from __future__ import annotations

from envoy.config.cluster.v3 import cluster_pb2

from aether.core.project.subsets import LB_METADATA, endpoint_metadata, metadata_match, subset_config
from tests.core.project._helpers import as_dict

_Subset = cluster_pb2.Cluster.LbSubsetConfig


def test_a_match_names_every_label_of_the_selector() -> None:
    """The route's metadata_match holds the selector's labels under `envoy.lb`."""
    match = metadata_match((("app", "web"), ("version", "v2")))
    assert as_dict(match) == {"filter_metadata": {LB_METADATA: {"app": "web", "version": "v2"}}}


def test_a_cluster_falls_back_to_any_endpoint_without_a_match_and_to_none_with_one() -> None:
    """Requests without a match take any endpoint; a selector's keys with values no endpoint has take none."""
    config = subset_config((("app",), ("app", "version")))
    assert config.fallback_policy == _Subset.ANY_ENDPOINT
    assert [(list(item.keys), item.fallback_policy) for item in config.subset_selectors] == [
        (["app"], _Subset.LbSubsetSelector.NO_FALLBACK),
        (["app", "version"], _Subset.LbSubsetSelector.NO_FALLBACK),
    ]


def test_an_endpoint_carries_only_the_labels_selectors_read() -> None:
    """Labels of keys no selector uses stay out of EDS; an endpoint with none of them carries no metadata."""
    labels = {"app": "web", "version": "v1", "pod-template-hash": "abc"}
    assert as_dict(endpoint_metadata(labels, (("app", "version"),))) == {
        "filter_metadata": {LB_METADATA: {"app": "web", "version": "v1"}}
    }
    assert endpoint_metadata({"pod-template-hash": "abc"}, (("app",),)) is None
