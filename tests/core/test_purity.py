"""The core is pure: no module under `src/aether/core` imports I/O, clocks, randomness or logging (L1); and it is
layered: the Gateway API view builds no Envoy message and knows nothing of the projections (STYLE P9)."""

from __future__ import annotations

from pathlib import Path

import pytest

import aether.core
from tests.imports import imports_in, package_of

CORE = Path(aether.core.__file__).parent

ALLOWED = (
    "__future__",
    "typing",
    "enum",
    "re",
    "json",
    "hashlib",
    "ipaddress",
    "functools",
    "collections",
    "collections.abc",
    "dataclasses",
    "itertools",
    "operator",
    "bisect",
    "operator",
    "math",
    "attrs",
    "immutables",
    "google.protobuf",
    "aether.core",
    "aether.proto",
    # Envoy's generated message classes (the xds-protos package): data, not transports (STYLE L1).
    "envoy",
    "xds",
    "udpa",
    "validate",
)
"""Modules the core may import; each also allows its submodules."""

DENIED = (
    "trio",
    "purerpc",
    "anyio",
    "socket",
    "os",
    "time",
    "random",
    "logging",
    "subprocess",
    "asyncio",
    "threading",
    "datetime",
    "pathlib",
    "io",
    "sys",
    "kubernetes",
    "pyroute2",
    "httpx",
    "dnslib",
)
"""Modules that do I/O or read hidden inputs: named explicitly, so a widened allowlist cannot let them in."""


ENVOY_FREE = ("envoy", "xds", "udpa", "validate", "google.protobuf", "aether.proto", "aether.core.project")
"""What the Gateway API view (`aether.core.gateway`) and the mesh names below it never import: the view is typed
values, and the projection (`aether.core.project`) alone spells them as Envoy messages."""
ENVOY_FREE_MODULES = ("gateway", "mesh_names.py")
"""The core's packages and modules held to `ENVOY_FREE`, relative to `src/aether/core`."""


def _core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def _envoy_free_modules() -> list[Path]:
    return [path for path in _core_modules() if path.relative_to(CORE).parts[0] in ENVOY_FREE_MODULES]


def _package_of(path: Path) -> str:
    """`aether.core.reduce` for `reduce/fold.py` and for `reduce/__init__.py` alike."""
    return ".".join(("aether", "core", *path.relative_to(CORE).parent.parts))


def _imports(path: Path) -> list[tuple[int, str]]:
    """Return `(line, module)` for every import of the core module at `path`."""
    return _imports_in(path.read_text(encoding="utf-8"), package=package_of(path))


def _imports_in(source: str, *, package: str) -> list[tuple[int, str]]:
    """Return `(line, module)` for every import in `source` (function bodies too; relative ones resolved)."""
    return sorted({(found.line, found.module) for found in imports_in(source, package=package)})


def _within(module: str, roots: tuple[str, ...]) -> str | None:
    return next((root for root in roots if module == root or module.startswith(f"{root}.")), None)


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(CORE.parent.parent)}:{line}"


def test_the_walk_sees_every_core_module_and_its_imports() -> None:
    """The walk finds the core's modules, and in them imports of attrs and of the core itself."""
    modules = {str(path.relative_to(CORE)) for path in _core_modules()}
    assert {"__init__.py", "errors.py", "reduce/fold.py", "events/codec.py", "state/codec.py"} <= modules
    imported = {module for path in _core_modules() for _, module in _imports(path)}
    assert {"attrs", "aether.core.errors", "google.protobuf.message"} <= imported


def test_core_modules_import_only_allowed_modules() -> None:
    """Every import in the core names a module of the allowlist (or one of its submodules)."""
    offending = [
        f"{_where(path, line)} imports {module!r}"
        for path in _core_modules()
        for line, module in _imports(path)
        if _within(module, ALLOWED) is None
    ]
    assert offending == [], "the core must stay pure: " + "; ".join(offending)


@pytest.mark.parametrize("denied", DENIED)
def test_core_modules_never_import_an_io_module(denied: str) -> None:
    """No core module imports the I/O, clock, randomness or logging module (nor any of its submodules)."""
    offending = [
        f"{_where(path, line)} imports {module!r}"
        for path in _core_modules()
        for line, module in _imports(path)
        if _within(module, (denied,))
    ]
    assert offending == [], f"the core must not import {denied!r}: " + "; ".join(offending)


def test_the_gateway_view_imports_no_envoy_message_and_no_projection() -> None:
    """No module of `aether.core.gateway` (nor `aether.core.mesh_names`) imports Envoy's or protobuf's messages, or
    `aether.core.project`: the projection imports the view, never the reverse."""
    modules = _envoy_free_modules()
    assert {"gateway/ir.py", "gateway/view.py", "gateway/model/routes.py", "mesh_names.py"} <= {
        str(path.relative_to(CORE)) for path in modules
    }
    offending = [
        f"{_where(path, line)} imports {module!r}"
        for path in modules
        for line, module in _imports(path)
        if _within(module, ENVOY_FREE)
    ]
    assert offending == [], "the gateway view must stay Envoy-free: " + "; ".join(offending)


def test_the_allowlist_and_the_denylist_do_not_overlap() -> None:
    """No denied module is allowed, even as a submodule of an allowed one."""
    assert [name for name in DENIED if _within(name, ALLOWED)] == []


def test_function_level_imports_are_seen() -> None:
    """An import hidden in a function body is found like a top-level one."""
    source = "import re\n\ndef f():\n    import time\n    from os import path\n    return time, path\n"
    assert _imports_in(source, package="aether.core") == [(1, "re"), (4, "time"), (5, "os")]


def test_relative_imports_resolve_against_the_package() -> None:
    """A relative import resolves to the absolute module it names."""
    source = "from . import pods\nfrom ..state import State\n"
    assert _imports_in(source, package="aether.core.reduce") == [
        (1, "aether.core.reduce"),
        (2, "aether.core.state"),
    ]
