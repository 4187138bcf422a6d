"""The plane's memory policy: glibc's allocator gives freed memory back to the system.

A projection at 10,000 services builds and drops hundreds of thousands of protobuf messages; what it keeps (the
snapshot's bytes) is a small part of what it touched. glibc keeps freed heap at the top of its arenas until more than
`M_TRIM_THRESHOLD` (128 KiB by default, but raised dynamically up to 32 MiB each time a large block is freed: a
released `mmap` block moves the threshold above its own size) is free there, and memory freed below the top stays
mapped. Pinning the thresholds stops the dynamic raise, and `release_memory` (`malloc_trim`) returns the free
pages of every arena after a large projection. Elsewhere than on glibc both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 1 << 20
"""Free heap above this at an arena's top goes back to the system at once (1 MiB)."""
MMAP_THRESHOLD = 1 << 20
"""Blocks of at least this size get their own mapping, released whole when freed (1 MiB; pinned so glibc does not
raise it, and the trim threshold with it, after the first large block is freed)."""


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt  # noqa: B018 (glibc only)
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def tune_allocator() -> bool:
    """Pin glibc's trim and mmap thresholds (see the module docstring); return False where there is no glibc."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    )


def release_memory() -> bool:
    """Return the allocator's free pages to the system (`malloc_trim(0)`); True when some were released."""
    libc = _libc()
    return libc is not None and bool(libc.malloc_trim(0))
