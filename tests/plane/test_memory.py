"""The plane's memory policy on this machine's glibc: thresholds pinned, free pages released."""

from __future__ import annotations

from aether.plane.memory import release_memory, tune_allocator


def test_the_allocator_is_tuned_and_trimmed() -> None:
    """Both calls reach glibc (True from mallopt); a trim after freeing a large block gives pages back or finds
    none to give, without raising."""
    assert tune_allocator() is True
    block = [bytes(1024) for _ in range(10_000)]
    del block
    assert release_memory() in (True, False)
