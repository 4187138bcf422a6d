"""A webhook's answer to one admission review, before it is spelled as an AdmissionReview response."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["ALLOWED", "Verdict"]


@attrs.frozen(kw_only=True)
class Verdict:
    """Allowed or not, the denial's message (naming the object, the field and the rule), warnings for the client
    (kubectl prints each as `Warning: ...`), and the JSONPatch operations of a mutating webhook."""

    allowed: bool
    message: str = ""
    warnings: tuple[str, ...] = ()
    patch: tuple[Mapping[str, Any], ...] = ()


ALLOWED = Verdict(allowed=True)
"""Allowed, unchanged, without a word."""
