"""Rejections: bad input folded into state as data (a reason from a closed set plus a message), never raised."""

from __future__ import annotations

import enum

import attrs
import immutables

MAX_REJECTIONS = 1024
"""How many subjects keep a rejection. Bounds state size under a flood of bad input; the oldest (lowest seq) goes
first. 1024 is far more than a node has objects in trouble at once, and small enough to print whole."""


class RejectionReason(enum.StrEnum):
    """Why an event could not apply (a closed set: status conditions and logs use these names)."""

    NOT_MANAGED = "NotManaged"
    INVALID_ANNOTATION = "InvalidAnnotation"
    INVALID_POD = "InvalidPod"
    UNKNOWN_POD = "UnknownPod"
    STALE_POD = "StalePod"
    INVALID_ENDPOINT = "InvalidEndpoint"
    INVALID_VERSION = "InvalidVersion"
    STALE_VERSION = "StaleVersion"
    UNKNOWN_SERVICE = "UnknownService"
    UNKNOWN_ENDPOINT = "UnknownEndpoint"
    INVALID_SERVICE = "InvalidService"
    UNSUPPORTED_KIND = "UnsupportedKind"
    INVALID_SPEC = "InvalidSpec"
    STALE_OBJECT = "StaleObject"
    UNKNOWN_OBJECT = "UnknownObject"
    INVALID_MESH_CONFIG = "InvalidMeshConfig"
    INVALID_SVID = "InvalidSvid"
    UNKNOWN_SVID = "UnknownSvid"
    INVALID_TRUST_BUNDLE = "InvalidTrustBundle"
    UNKNOWN_TRUST_BUNDLE = "UnknownTrustBundle"
    NOT_A_MESH_SERVICE = "NotAMeshService"


@attrs.frozen(kw_only=True)
class Rejection:
    """The latest rejection of one subject."""

    subject: str
    """The subject the rejected event was about (`pod/default/web-1`, `HTTPRoute/default/canary`, ...)."""
    reason: RejectionReason
    message: str
    """Lowercase, names the subject and the rule, shows the offending value."""
    seq: int
    """The log position of the rejected event."""


@attrs.frozen(kw_only=True)
class Diagnostics:
    """The rejections in force, one per subject, and how many events were ever rejected."""

    rejections: immutables.Map[str, Rejection] = immutables.Map()
    rejected_total: int = 0

    def with_rejection(self, rejection: Rejection) -> Diagnostics:
        """Record `rejection` as its subject's latest, evicting the oldest past `MAX_REJECTIONS`."""
        rejections = self.rejections.set(rejection.subject, rejection)
        if len(rejections) > MAX_REJECTIONS:
            oldest = min(rejections.values(), key=lambda item: (item.seq, item.subject))
            rejections = rejections.delete(oldest.subject)
        return Diagnostics(rejections=rejections, rejected_total=self.rejected_total + 1)

    def cleared(self, subject: str) -> Diagnostics:
        """Forget the rejection of `subject` (its latest event applied)."""
        if subject not in self.rejections:
            return self
        return attrs.evolve(self, rejections=self.rejections.delete(subject))
