"""The node agent's parts: the journal that owns the node's log and state."""

from aether.agent.journal import Journal, JournalStatistics, open_journal

__all__ = ["Journal", "JournalStatistics", "open_journal"]
