"""Status conditions with the Gateway API's types and reasons, built from what resolution found."""

from __future__ import annotations

import functools

from aether.core.gateway.contract import Condition

TRUE, FALSE = "True", "False"

ACCEPTED = "Accepted"
RESOLVED_REFS = "ResolvedRefs"
PROGRAMMED = "Programmed"
PARTIALLY_INVALID = "PartiallyInvalid"
CONFLICTED = "Conflicted"

NO_MATCHING_PARENT = "NoMatchingParent"
NOT_ALLOWED_BY_LISTENERS = "NotAllowedByListeners"
NO_MATCHING_LISTENER_HOSTNAME = "NoMatchingListenerHostname"
UNSUPPORTED_VALUE = "UnsupportedValue"


@functools.lru_cache(maxsize=4096)  # a pure function of values; most conditions repeat across the routes
def condition(kind: str, *, ok: bool, reason: str = "", message: str = "", generation: int) -> Condition:
    """Return a condition of type `kind`: True with reason `kind` when `ok`, else False with `reason`."""
    return Condition(
        type=kind,
        status=TRUE if ok else FALSE,
        reason=kind if ok and not reason else reason,
        message=message,
        observed_generation=generation,
    )
