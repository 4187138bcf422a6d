"""`aether.dns` re-exports its public names with `__all__` (STYLE L4)."""

from __future__ import annotations

import aether.dns


def test_all_lists_existing_public_names() -> None:
    """`__all__` has no duplicates and every name resolves on the package."""
    exported = list(aether.dns.__all__)
    assert len(exported) == len(set(exported))
    assert [name for name in exported if name.startswith("_") or not hasattr(aether.dns, name)] == []
