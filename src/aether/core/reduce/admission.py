"""Whether the mesh takes a pod: the one verdict the pod reducer folds, and the CNI server and the Kubernetes endpoint
reader answer with.

A pod outside the mesh (label, namespace) is none of its business whatever its fields say, so that comes first: the
CNI never refuses a pod it should ignore. Then the identity fields every projection relies on, then an address.
"""

from __future__ import annotations

import enum

import attrs

from aether.core.events.pods import Pod
from aether.core.reduce.annotations import address_problem, pod_problem, unmanaged_reason


class PodVerdict(enum.Enum):
    """What the mesh makes of a pod."""

    ADMITTED = "admitted"
    """Managed, valid and addressed: it is stored, projected and registered."""
    NOT_MANAGED = "not managed"
    """Outside the mesh (label, namespace): not stored; a known record of it is dropped."""
    INVALID = "invalid"
    """Its namespace, name or service account is invalid: refused; what is known stays."""
    NO_ADDRESS = "no address"
    """Managed, but without a valid IP yet: not stored until an update brings one."""


@attrs.frozen(kw_only=True)
class PodAdmission:
    """The verdict on a pod, and the message saying why it is not admitted ("" when it is)."""

    verdict: PodVerdict
    message: str = ""


ADMITTED = PodAdmission(verdict=PodVerdict.ADMITTED)


def admit_pod(pod: Pod) -> PodAdmission:
    """Return whether the mesh takes `pod`, and why not (the first rule it breaks, in the module's order)."""
    unmanaged = unmanaged_reason(pod)
    if unmanaged is not None:
        return PodAdmission(verdict=PodVerdict.NOT_MANAGED, message=unmanaged)
    invalid = pod_problem(pod)
    if invalid is not None:
        return PodAdmission(verdict=PodVerdict.INVALID, message=invalid)
    addressless = address_problem(pod)
    if addressless is not None:
        return PodAdmission(verdict=PodVerdict.NO_ADDRESS, message=addressless)
    return ADMITTED
