"""Jittered exponential backoff, shared by every reconnect: registrar watch and registrations, etcd, Kubernetes."""

from __future__ import annotations

import random

import attrs

__all__ = ["DEFAULT_BACKOFF", "Backoff"]


@attrs.frozen(kw_only=True)
class Backoff:
    """Exponential backoff with "equal jitter": the n-th consecutive failure waits in [d/2, d], d = min(cap, base*2**n).

    Half the delay is fixed so a flapping registrar is never hammered; the jittered half spreads the agents of a
    cluster that all lost the same registrar at once.
    """

    base: float = 0.1
    """Seconds before the first retry (at most): quick enough that a registrar restart goes unnoticed."""
    cap: float = 10.0
    """The longest wait in seconds: a registrar that comes back is found within this."""

    def delay(self, failures: int, *, rng: random.Random) -> float:
        """Return the wait after `failures` consecutive failures (1 for the first)."""
        ceiling: float = min(self.cap, self.base * 2.0 ** min(max(failures - 1, 0), 62))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


DEFAULT_BACKOFF = Backoff()
