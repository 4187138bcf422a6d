"""The host's Python-free `aether-cni` (`aether/cni/shim/aether-cni.c`), compiled for tests and benchmarks.

The image builds it in its own stage (Containerfile, `-static`); here the machine's C compiler builds it into a
directory the caller owns, with libc only, in well under a second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import aether.cni

__all__ = ["SHIM_SOURCE", "compile_c", "compile_shim", "find_compiler"]

SHIM_SOURCE = Path(aether.cni.__file__).parent / "shim" / "aether-cni.c"
"""The executable's one source file (package data: an installed wheel holds it too)."""

CFLAGS = ("-O2", "-Wall", "-Wextra", "-Werror")


def find_compiler() -> str | None:
    """The C compiler: `$CC` when set, else `cc` or `gcc` on PATH; None when there is none."""
    named = os.environ.get("CC")
    if named:
        return shutil.which(named)
    return shutil.which("cc") or shutil.which("gcc")


def compile_shim(directory: Path, *, name: str = "aether-cni") -> Path:
    """Compile the executable into `directory`/`name` and return its path.

    Raises:
        FileNotFoundError: no C compiler (see `find_compiler`).
        subprocess.CalledProcessError: the compiler refused the source (its stderr in the exception).
    """
    return compile_c(SHIM_SOURCE, directory / name)


def compile_c(source: Path, output: Path) -> Path:
    """Compile the one-file, libc-only C program `source` into the executable `output` and return its path.

    Raises:
        FileNotFoundError: no C compiler (see `find_compiler`).
        subprocess.CalledProcessError: the compiler refused the source (its stderr in the exception).
    """
    compiler = find_compiler()
    if compiler is None:
        raise FileNotFoundError(f"no C compiler for {source.name}: set CC or install gcc (Debian gcc)")
    subprocess.run(
        [compiler, *CFLAGS, "-o", str(output), str(source)], check=True, capture_output=True, text=True
    )
    return output
