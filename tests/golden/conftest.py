"""Golden tests: `--update-golden` rewrites the expected outputs from the current projection (STYLE T6)."""

from __future__ import annotations

import pytest


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was asked to rewrite the golden outputs instead of comparing with them."""
    return bool(request.config.getoption("--update-golden"))
