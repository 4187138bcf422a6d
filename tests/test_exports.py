"""Each package re-exports its public names with `__all__`, complete and importable (STYLE L4).

As trio's `test_exports.py`: the packages are found by walking `aether`, not listed, so a new one is checked too.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import aether

GENERATED = "aether.proto"


def _walk() -> list[pkgutil.ModuleInfo]:
    return [
        info
        for info in pkgutil.walk_packages(aether.__path__, "aether.")
        if not info.name.startswith(GENERATED) and not info.name.endswith("__main__")
    ]


PACKAGES = sorted(info.name for info in _walk() if info.ispkg)
MODULES = sorted(info.name for info in _walk())


def _public_namespace(module: ModuleType) -> set[str]:
    """The names a package's `__init__` defines or imports: neither private, nor a submodule, nor `annotations`, nor
    the `typing` helpers a package that exports on first use (PEP 562) needs (`TYPE_CHECKING`, `Any`)."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and name not in {"annotations", "TYPE_CHECKING", "Any"}
    }


def test_the_walk_finds_the_packages() -> None:
    """The walk sees packages of every layer, nested ones too, and none of the generated protos."""
    assert {
        "aether.core.gateway.model",
        "aether.plane",
        "aether.rpc",
        "aether.testing",
        "aether.demo",
    } <= set(PACKAGES)
    assert [name for name in PACKAGES if name.startswith(GENERATED)] == []


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_existing_public_names(name: str) -> None:
    """`__all__` has no duplicates, names only public objects, and each resolves on the package."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported))
    assert [item for item in exported if item.startswith("_") or not hasattr(module, item)] == []


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_complete(name: str) -> None:
    """Every public name the package's `__init__` holds is in `__all__`: nothing is re-exported by accident."""
    module = importlib.import_module(name)
    assert sorted(_public_namespace(module) - set(module.__all__)) == []


@pytest.mark.parametrize("name", PACKAGES)
def test_star_import_gives_exactly_all(name: str) -> None:
    """`from package import *` works and binds exactly the names of `__all__`."""
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)  # the statement under test
    assert sorted(set(namespace) - {"__builtins__"}) == sorted(importlib.import_module(name).__all__)


@pytest.mark.parametrize("name", MODULES)
def test_a_module_all_names_what_it_has(name: str) -> None:
    """A module that declares `__all__` defines (or imports) every name it lists, without duplicates."""
    module = importlib.import_module(name)
    exported = list(getattr(module, "__all__", ()))
    assert len(exported) == len(set(exported))
    assert [item for item in exported if not hasattr(module, item)] == []
