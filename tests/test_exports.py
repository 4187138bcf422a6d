"""Each package re-exports its public names with `__all__`, and every listed name exists (STYLE L4)."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = [
    "aether.core.events",
    "aether.core.state",
    "aether.core.reduce",
    "aether.log",
    "aether.testing",
    "aether.cli",
    "aether.identity",
    "aether.xds",
    "aether.agent",
    "aether.core.project",
    "aether.core.gateway",
    "aether.core.gateway.model",
    "aether.dns",
    "aether.registrar",
    "aether.kube",
    "aether.edge",
    "aether.cni",
    "aether.envoy",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_existing_public_names(name: str) -> None:
    """`__all__` has no duplicates, names only public objects, and each resolves on the package."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported))
    assert [item for item in exported if item.startswith("_") or not hasattr(module, item)] == []
