"""Tests of `aether.core.state.summary`: counts with the digest, and the redacted JSON document."""

from __future__ import annotations

import base64
import json

from aether.core.state import EMPTY_STATE, State, StateSummary, state_digest, state_document, summarize
from aether.testing import (
    endpoints_snapshot_received,
    fold_events,
    gateway_object_upserted,
    kube_service_upserted,
    make_endpoint,
    make_kube_object,
    make_kube_service,
    make_pod,
    make_svid,
    on_demand_cluster_requested,
    pod_added,
    pod_removed,
    reference_grant_upserted,
    resource_acked,
    resource_nacked,
    svid_rotated,
    trust_bundle_rotated,
)

SECRET = b"-----BEGIN PRIVATE KEY-----\nTOP-SECRET-MATERIAL\n-----END PRIVATE KEY-----\n"


def _state_with_secret() -> State:
    return fold_events(
        pod_added(make_pod()),
        endpoints_snapshot_received(make_endpoint("10.0.0.1"), make_endpoint("10.0.0.2"), version="4"),
        kube_service_upserted(make_kube_service()),
        gateway_object_upserted(make_kube_object()),
        reference_grant_upserted(make_kube_object("allow", kind="ReferenceGrant")),
        svid_rotated(make_svid(private_key=SECRET)),
        trust_bundle_rotated(),
        resource_acked("node-a"),
        resource_nacked("node-b"),
        on_demand_cluster_requested(),
        pod_removed("ghost"),
    )


def test_summarize_counts_every_part_of_the_state() -> None:
    """The summary counts each part and carries seq, version, mesh domain and digest."""
    state = _state_with_secret()
    assert summarize(state) == StateSummary(
        seq=11,
        digest=state_digest(state),
        pods=1,
        registry_version="4",
        registry_synced=False,
        services=1,
        endpoints=2,
        kube_services=1,
        gateway_objects=1,
        reference_grants=1,
        mesh_domain="aether.internal",
        svids=1,
        trust_bundles=1,
        xds_streams=2,
        xds_nacked=1,
        on_demand=1,
        rejections=1,
        rejected_total=1,
    )


def test_the_summary_lines_are_aligned_name_value_pairs_in_field_order() -> None:
    """`lines()` gives one `name value` line per field, names padded to 17 columns."""
    assert summarize(EMPTY_STATE).lines() == [
        "seq               0",
        f"digest            {state_digest(EMPTY_STATE)}",
        "pods              0",
        "registry_version  ",
        "registry_synced   False",
        "services          0",
        "endpoints         0",
        "kube_services     0",
        "gateway_objects   0",
        "reference_grants  0",
        "mesh_domain       aether.internal",
        "svids             0",
        "trust_bundles     0",
        "xds_streams       0",
        "xds_nacked        0",
        "on_demand         0",
        "rejections        0",
        "rejected_total    0",
    ]


def test_the_state_document_redacts_private_keys() -> None:
    """The JSON document replaces each private key by a note of its length."""
    document = state_document(_state_with_secret())
    (svid,) = document["svids"]
    assert base64.b64decode(svid["privateKey"]) == f"<redacted {len(SECRET)} bytes>".encode()
    assert svid["spiffeId"] == "spiffe://aether.internal/ns/default/sa/web"


def test_private_keys_never_appear_in_the_document_or_the_reprs() -> None:
    """Neither the key, nor its base64, is in the document, the state's repr or str, or the summary."""
    state = _state_with_secret()
    encoded = base64.b64encode(SECRET).decode()
    texts = [json.dumps(state_document(state)), repr(state), str(state), repr(summarize(state))]
    for text in texts:
        assert "TOP-SECRET-MATERIAL" not in text
        assert encoded not in text
    assert repr(state.identity.svids["spiffe://aether.internal/ns/default/sa/web"].private_key) == (
        f"Redacted(<{len(SECRET)} bytes>)"
    )


def test_the_document_of_the_empty_state_holds_only_the_mesh_config() -> None:
    """Empty parts are left out of the document; the MeshConfig defaults are always there."""
    assert state_document(EMPTY_STATE) == {
        "registry": {},
        "meshConfig": {
            "meshDomain": "aether.internal",
            "trustDomain": "aether.internal",
            "onDemandTtlSeconds": "600",
        },
    }
