"""The controller (`aether controller`): leader election over a Lease, and Gateway API status written back."""

from __future__ import annotations

from aether.controller.app import (
    DEFAULT_RESYNC,
    ControllerConfig,
    ControllerStatistics,
    RunningController,
    serve_controller,
)
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
from aether.controller.leader import (
    DEFAULT_LEASE,
    Leadership,
    LeadershipStatistics,
    LeaseName,
    serve_leader_election,
)
from aether.controller.status_diff import OUR_CONTROLLERS, SUPPORTED_FEATURES, status_update
from aether.controller.status_writer import StatusWrite, write_status

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_RESYNC",
    "DEFAULT_TIMING",
    "OUR_CONTROLLERS",
    "SUPPORTED_FEATURES",
    "ControllerConfig",
    "ControllerStatistics",
    "Deposed",
    "Elected",
    "ElectionState",
    "ElectionTiming",
    "LeaderElection",
    "Leadership",
    "LeadershipStatistics",
    "LeaseName",
    "LeaseRecord",
    "ReadLease",
    "RunningController",
    "StatusWrite",
    "WriteLease",
    "serve_controller",
    "serve_leader_election",
    "status_update",
    "write_status",
]
