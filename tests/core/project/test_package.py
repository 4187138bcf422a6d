"""The package's public names (STYLE L4): `aether.core.project.__all__` lists existing public names only."""

from __future__ import annotations

import aether.core.project


def test_all_lists_existing_public_names() -> None:
    """`__all__` has no duplicates, names only public objects, and each resolves on the package."""
    exported = list(aether.core.project.__all__)
    assert len(exported) == len(set(exported))
    assert [name for name in exported if name.startswith("_") or not hasattr(aether.core.project, name)] == []
    assert {"project_node", "NodeProjector"} <= set(exported)
