"""The node agent's parts: the journal that owns the node's log and state.

The journal is imported on first use (PEP 562): `aether status` reads this package's admin client
(`aether.agent.admin_client`) without loading the agent.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aether.agent.journal import Journal, JournalStatistics, open_journal

__all__ = ["Journal", "JournalStatistics", "open_journal"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("aether.agent.journal"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
