"""What the node's Envoys said about the config they were sent: per stream type, and on-demand requests."""

from __future__ import annotations

import attrs
import immutables


@attrs.frozen(kw_only=True)
class XdsFeedback:
    """The latest word of one Envoy on one resource type."""

    node_id: str
    type_url: str
    acked_version: str = ""
    """The last version Envoy accepted (it stays in force while a newer one is NACKed)."""
    nacked_version: str = ""
    """The version Envoy rejected after `acked_version`, or empty."""
    error_message: str = ""
    error_code: int = 0


@attrs.frozen(kw_only=True)
class OnDemandRequest:
    """A cluster an Envoy asked for on demand, and when it last did."""

    node_id: str
    cluster_name: str
    last_requested_at: int
    """Nanoseconds since the Unix epoch (the requests' own observation times; never a clock)."""


@attrs.frozen(kw_only=True)
class FeedbackState:
    """xDS feedback keyed by `(node_id, type_url)`; on-demand requests keyed by `(node_id, cluster_name)`."""

    streams: immutables.Map[tuple[str, str], XdsFeedback] = immutables.Map()
    on_demand: immutables.Map[tuple[str, str], OnDemandRequest] = immutables.Map()
