"""The committed protobuf modules under src/aether/proto match what `nox -s proto` generates from proto/."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "src" / "aether" / "proto"


def _generator() -> object:
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "tools" / "gen_proto.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_generated_protobuf_code_is_fresh(tmp_path: Path) -> None:
    """Regenerating from proto/ gives exactly the committed files: run `nox -s proto` when this fails."""
    _generator().generate(tmp_path / "proto")  # type: ignore[attr-defined]
    fresh = _files(tmp_path / "proto")
    committed = _files(COMMITTED)
    stale = sorted(name for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name))
    assert stale == [], f"stale generated files (run `nox -s proto` and commit): {stale!r}"
