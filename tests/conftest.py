"""Options shared by the whole test suite (pytest reads only this level's conftest before parsing options)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/testdata/*.out.json from the current code, and delete orphaned outputs",
    )
