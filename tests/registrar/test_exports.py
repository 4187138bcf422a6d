"""The registrar packages re-export their public names (STYLE L4), and its core modules stay sans-IO."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import aether.registrar

PACKAGES = ["aether.registrar", "aether.registrar.backends"]
SANS_IO = ["snapshot.py", "broadcaster.py", "watch_machine.py"]
FORBIDDEN = {"trio", "anyio", "purerpc", "grpc", "socket", "os", "time", "random", "logging", "aether.log"}


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_existing_public_names(name: str) -> None:
    """`__all__` has no duplicates, names only public objects, and each resolves on the package."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported))
    assert [item for item in exported if item.startswith("_") or not hasattr(module, item)] == []


@pytest.mark.parametrize("filename", SANS_IO)
def test_the_registry_core_imports_no_io(filename: str) -> None:
    """snapshot.py, broadcaster.py and watch_machine.py import no transport, clock, randomness, logging or store."""
    tree = ast.parse((Path(aether.registrar.__file__).parent / filename).read_text())
    imported = {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert sorted(name for name in imported if name in FORBIDDEN or name.split(".")[0] in FORBIDDEN) == []
