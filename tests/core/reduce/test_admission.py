"""The mesh's verdict on a pod (`admit_pod`), which the pod reducer folds and the CNI server answers with."""

from __future__ import annotations

import pytest

from aether.core.events.pods import Pod
from aether.core.reduce.admission import ADMITTED, PodAdmission, PodVerdict, admit_pod
from aether.testing import make_pod


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(make_pod(), ADMITTED, id="admitted"),
        pytest.param(
            make_pod(labels={}),
            PodAdmission(
                verdict=PodVerdict.NOT_MANAGED,
                message="pod 'default/web-1': label 'aether.io/managed' must be 'true' to join the mesh (got None)",
            ),
            id="no label",
        ),
        pytest.param(
            make_pod(namespace="kube-system"),
            PodAdmission(
                verdict=PodVerdict.NOT_MANAGED,
                message="pod 'kube-system/web-1': namespace 'kube-system' is never meshed",
            ),
            id="never meshed",
        ),
        pytest.param(
            make_pod(service_account="Web"),
            PodAdmission(
                verdict=PodVerdict.INVALID,
                message="pod 'default/web-1': service account must be an RFC 1123 subdomain (got 'Web')",
            ),
            id="invalid identity",
        ),
        pytest.param(
            make_pod(ips=()),
            PodAdmission(
                verdict=PodVerdict.NO_ADDRESS,
                message="pod 'default/web-1': has no IP address yet; it joins the mesh once one is assigned",
            ),
            id="no address",
        ),
        pytest.param(
            make_pod(service_account="Web", labels={}, ips=()),
            PodAdmission(
                verdict=PodVerdict.NOT_MANAGED,
                message="pod 'default/web-1': label 'aether.io/managed' must be 'true' to join the mesh (got None)",
            ),
            id="unmanaged comes first",
        ),
        pytest.param(
            make_pod(service_account="Web", ips=()),
            PodAdmission(
                verdict=PodVerdict.INVALID,
                message="pod 'default/web-1': service account must be an RFC 1123 subdomain (got 'Web')",
            ),
            id="identity before address",
        ),
    ],
)
def test_the_verdict_is_the_first_rule_the_pod_breaks(pod: Pod, expected: PodAdmission) -> None:
    """Outside the mesh first (the CNI never refuses a pod it should ignore), then identity, then address."""
    assert admit_pod(pod) == expected
