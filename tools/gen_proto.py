"""Generate the Python modules for `proto/` into `src/aether/proto/` (run by `nox -s proto`).

protoc names generated imports after the .proto import path (`aether.log.v1`); our generated code lives in the
`aether.proto` package instead, so the imports are rewritten to match.  The output is deterministic for a pinned
grpcio-tools and mypy-protobuf, which lets a test regenerate into a temporary directory and compare bytes.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUTPUT = ROOT / "src" / "aether" / "proto"

_IMPORT = re.compile(rb"^(from|import) aether\.(?=\w+\.v\d)", re.MULTILINE)


def generate(output: Path) -> None:
    """Run protoc over every .proto under `proto/` and write the rewritten modules under `output`."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    protos = sorted(str(path.relative_to(PROTO_ROOT)) for path in PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as raw:
        plugin = Path(sys.executable).parent / "protoc-gen-mypy"
        args = [
            "protoc",
            f"-I{PROTO_ROOT}",
            f"-I{include}",
            f"--plugin=protoc-gen-mypy={plugin}",
            f"--python_out={raw}",
            f"--mypy_out={raw}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {protos!r}")
        produced = Path(raw) / "aether"
        if output.exists():
            shutil.rmtree(output)
        for path in sorted(produced.rglob("*")):
            if path.is_dir():
                continue
            target = output / path.relative_to(produced)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(_IMPORT.sub(rb"\1 aether.proto.", path.read_bytes()))
    for directory in sorted({output, *(p for p in output.rglob("*") if p.is_dir())}):
        (directory / "__init__.py").write_text(
            '"""Generated protobuf modules: do not edit (nox -s proto)."""\n'
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    generate(parser.parse_args().output)


if __name__ == "__main__":
    sys.exit(main())
