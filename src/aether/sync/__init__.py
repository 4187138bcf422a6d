"""Synchronisation primitives every role shares: `LatestValue`, a cell that one owner sets and any task waits on; and
`first_leaf`/`leaves`, what nested nurseries raised."""

from __future__ import annotations

from aether.sync.groups import first_leaf, leaves
from aether.sync.latest_value import LatestValue, LatestValueStatistics

__all__ = ["LatestValue", "LatestValueStatistics", "first_leaf", "leaves"]
