"""Synchronisation primitives every role shares: `LatestValue`, a cell that one owner sets and any task waits on."""

from __future__ import annotations

from aether.sync.latest_value import LatestValue, LatestValueStatistics

__all__ = ["LatestValue", "LatestValueStatistics"]
