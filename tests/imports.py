"""The import walker the structure tests share: every import of a module's source, found in its AST."""

from __future__ import annotations

import ast
from pathlib import Path

import attrs

import aether

SOURCE_ROOT = Path(aether.__file__).resolve().parent.parent
"""Where the `aether` package under test lives: `src/` in an editable install, `site-packages/` in the wheel that
`nox -s tests` installs (the same files the core purity test walks)."""


@attrs.frozen(kw_only=True)
class Import:
    """One imported module (and, for `from M import n`, the name taken from it)."""

    line: int
    module: str
    """The absolute module name (relative imports resolved)."""
    name: str | None = None
    """`n` of `from M import n`; None for `import M`."""


def imports_in(source: str, *, package: str) -> list[Import]:
    """Return every import in `source` (function bodies and `TYPE_CHECKING` blocks too; relative ones resolved
    against `package`), in line order."""
    found: list[Import] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(Import(line=node.lineno, module=alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                assert node.module is not None
                module = node.module
            found.extend(Import(line=node.lineno, module=module, name=alias.name) for alias in node.names)
    return sorted(found, key=lambda item: (item.line, item.module, item.name or ""))


def module_name(path: Path) -> str:
    """`aether.core.reduce.fold` for `src/aether/core/reduce/fold.py`; `aether.core.reduce` for its `__init__.py`."""
    parts = path.relative_to(SOURCE_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path) -> str:
    """The package a module's relative imports resolve against: itself for `__init__.py`, else its parent."""
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]
