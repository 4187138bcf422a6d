"""Golden tests: `--update-golden` rewrites the expected outputs from the current projection (STYLE T6)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/testdata/*.out.json from the current code, and delete orphaned outputs",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was asked to rewrite the golden outputs instead of comparing with them."""
    return bool(request.config.getoption("--update-golden"))
