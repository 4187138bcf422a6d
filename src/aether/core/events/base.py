"""The base of every event: what was observed, by which source, and when."""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class Event:
    """A fact observed by a source and appended to the node's log.

    Events are immutable and past tense. Their meaning never changes once persisted: a new meaning is a new
    event type (see `aether.core.events.codec` for the wire rules).
    """

    observed_at: int
    """When the source observed the fact, in nanoseconds since the Unix epoch (time is data, never read)."""
    source: str
    """Which source observed it: `cni`, `registrar`, `kubernetes`, `xds`, `identity`, `directory`, ..."""

    @property
    def subject(self) -> str:
        """The key of the object the event is about, e.g. `pod/default/web-1` (used by inspect and rejections)."""
        raise NotImplementedError  # pragma: no cover - every concrete event overrides it
