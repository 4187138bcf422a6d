"""Options and fixtures shared by the whole test suite (pytest reads only this level's conftest before parsing
options)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/testdata/*.out.json from the current code, and delete orphaned outputs",
    )


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A temporary directory with a short path (Unix socket paths hold at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="aeshort", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
