"""The controller (`aether controller`): leader election over a Lease, and Gateway API status written back."""

from __future__ import annotations

from aether.controller.election import (
    DEFAULT_TIMING,
    Deposed,
    Elected,
    ElectionState,
    ElectionTiming,
    LeaderElection,
    LeaseRecord,
    ReadLease,
    WriteLease,
)

__all__ = [
    "DEFAULT_TIMING",
    "Deposed",
    "Elected",
    "ElectionState",
    "ElectionTiming",
    "LeaderElection",
    "LeaseRecord",
    "ReadLease",
    "WriteLease",
]
