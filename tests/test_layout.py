"""The package layout holds (DESIGN.md section 3): packages import downward only, never a private module of another
package, and nothing outside `aether.testing` imports it. The core's own purity rules are in tests/core/test_purity.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.imports import SOURCE_ROOT, Import, imports_in, module_name, package_of

AETHER = SOURCE_ROOT / "aether"

GENERATED = "aether.proto"
"""The generated protobuf messages: data every package may import (the core too)."""

RANKS = {
    "core": 0,
    "log": 1,
    "sync": 1,
    "telemetry": 1,
    "rpc": 2,
    "http1": 2,
    "dns": 3,
    "envoy": 3,
    "identity": 3,
    "kube": 3,
    "xds": 3,
    "registrar": 4,
    "plane": 5,
    "cni": 6,
    "agent": 7,
    "edge": 7,
    "controller": 7,
    "demo": 8,
    "cli": 9,
    "testing": 10,
}
"""A package imports its own modules and packages of a lower rank only: never a sibling (same rank) or above.

DESIGN.md's order (core ← log ← plane/rpc ← xds/registrar/cni/kube/identity ← agent/edge/controller ← cli/demo),
refined where a package needs another of its row: `http1` (HTTP/1 over h11, the one piece every HTTP/1 client
and server uses) sits beside `rpc`, below Envoy's client, the Kubernetes client and the admin socket; `sync` (the
`LatestValue` cell) sits beside the log, below every package that waits on a value; `telemetry` (OpenTelemetry
set-up and instruments) imports only the SDK and the generated OTLP messages, so every adapter above it (xds, dns,
registrar, plane, agent, edge, controller) records; the registrar's Kubernetes backend uses `kube`'s client and
reflector; the plane wires the xDS server, the SVID source and the admin socket (so it sits above xds and identity);
the CNI server waits on the journal and the snapshot cache (so `cni` sits above the plane); `aether demo` is a
subcommand of the CLI. `testing` may import anything, and only tests import it.
"""


def _modules() -> list[Path]:
    return sorted(path for path in AETHER.rglob("*.py") if not module_name(path).startswith(GENERATED))


def _imports(path: Path) -> list[Import]:
    return imports_in(path.read_text(encoding="utf-8"), package=package_of(path))


def _top(module: str) -> str | None:
    """`kube` for `aether.kube.watch`; None for a module outside `aether` (or `aether` itself)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "aether" and len(parts) > 1 else None


def _where(path: Path, found: Import) -> str:
    target = found.module if found.name is None else f"{found.module}.{found.name}"
    return f"{path.relative_to(SOURCE_ROOT)}:{found.line} imports {target}"


def _aether_imports() -> list[tuple[Path, str, Import]]:
    """`(path, the module's top package, import)` for every import of an `aether` module outside the generated protos."""
    return [
        (path, top, found)
        for path in _modules()
        if (top := _top(module_name(path))) is not None
        for found in _imports(path)
        if found.module.startswith("aether.") and not found.module.startswith(GENERATED)
    ]


def test_the_walk_sees_every_package_and_the_imports_between_them() -> None:
    """The walk finds modules of every package, and imports across packages (relative and in functions too)."""
    packages = {_top(module_name(path)) for path in _modules()}
    assert packages - {None} == set(RANKS)
    edges = {(top, _top(found.module)) for _, top, found in _aether_imports()}
    assert {("agent", "plane"), ("plane", "xds"), ("registrar", "rpc"), ("demo", "envoy")} <= edges


def test_every_package_has_a_rank() -> None:
    """A new top-level package must take its place in the order before it can import or be imported."""
    unranked = sorted(
        {
            top
            for path in _modules()
            if (top := _top(module_name(path))) not in (None, "proto") and top not in RANKS
        }
    )
    assert unranked == [], f"add these packages to RANKS in {__file__}: {unranked!r}"


def test_packages_import_downward_only() -> None:
    """A module imports its own package and packages of a lower rank: no sibling, nothing above."""
    offending = [
        f"{_where(path, found)} ({top} rank {RANKS[top]} -> {target} rank {RANKS[target]})"
        for path, top, found in _aether_imports()
        if (target := _top(found.module)) is not None
        and target != top
        and target in RANKS
        and top in RANKS
        and RANKS[target] >= RANKS[top]
    ]
    assert offending == [], "imports against the layout: " + "; ".join(offending)


def test_the_core_imports_only_the_core_and_the_generated_protos() -> None:
    """No core module imports an `aether` module outside `aether.core` (the protos aside)."""
    offending = [_where(path, found) for path, top, found in _aether_imports() if top == "core"]
    offending = [line for line in offending if " imports aether.core" not in line]
    assert offending == []


def test_nothing_outside_testing_imports_aether_testing() -> None:
    """Runtime code never imports the test helpers (DESIGN.md section 3)."""
    offending = [
        _where(path, found)
        for path, top, found in _aether_imports()
        if top != "testing" and _top(found.module) == "testing"
    ]
    assert offending == [], "runtime code imports aether.testing: " + "; ".join(offending)


def _private_part(found: Import) -> tuple[str, str] | None:
    """`(owner, private)` when the import names a private module or name: the package it is private to, and it."""
    parts = found.module.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index]), ".".join(parts[: index + 1])
    if found.name is not None and found.name.startswith("_") and not found.name.startswith("__"):
        return found.module.rpartition(".")[0] if found.module.count(".") > 1 else found.module, found.name
    return None


def test_no_module_imports_a_private_module_of_another_package() -> None:
    """A `_private` module (or name) is used only inside the package that holds it."""
    offending = [
        f"{_where(path, found)} (private to {owner})"
        for path in _modules()
        for found in _imports(path)
        if found.module.startswith("aether.")
        and (private := _private_part(found)) is not None
        and not (module_name(path) + ".").startswith((owner := private[0]) + ".")
    ]
    assert offending == [], "imports of another package's private parts: " + "; ".join(offending)


@pytest.mark.parametrize(
    ("found", "owner"),
    [
        (Import(line=1, module="aether.core.project._messages", name="any_of"), "aether.core.project"),
        (Import(line=1, module="aether.rpc.compat", name="_PATCHES"), "aether.rpc"),
        (Import(line=1, module="aether.rpc", name="_revert"), "aether.rpc"),
    ],
)
def test_a_private_import_is_owned_by_the_package_holding_it(found: Import, owner: str) -> None:
    """A private module belongs to its package, and a private name to the package of the module defining it."""
    private = _private_part(found)
    assert private is not None
    assert private[0] == owner


def test_a_public_import_has_no_private_part() -> None:
    """Dunder names (`__version__`) and public modules are not private."""
    assert _private_part(Import(line=1, module="aether.core.project.names", name="LOOPBACK")) is None
    assert _private_part(Import(line=1, module="purerpc", name="__version__")) is None
