"""The controller (`aether controller`): leader election over a Lease, Gateway API status written back, and the
admission webhooks every replica serves, and the MeshConfig projection."""

from __future__ import annotations

from aether.controller.app import (
    DEFAULT_RESYNC,
    ControllerConfig,
    ControllerStatistics,
    RunningController,
    serve_controller,
)
from aether.controller.config_admission import config_verdict
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
from aether.controller.mesh_config_projection import (
    MeshConfigProjection,
    MeshConfigProjectionStatistics,
    serve_mesh_config_projection,
)
from aether.controller.pod_mutation import (
    IDENTITY_READY_CONTAINER,
    IdentityCheck,
    PodMutation,
    mesh_ndots,
    pod_verdict,
)
from aether.controller.review import ADMISSION_API_VERSION, WEBHOOK_PATHS, ReviewInvalid, answer_review
from aether.controller.route_admission import ROUTE_KINDS_VALIDATED, route_verdict
from aether.controller.status_diff import OUR_CONTROLLERS, SUPPORTED_FEATURES, status_update
from aether.controller.status_writer import StatusWrite, write_status
from aether.controller.verdict import Verdict
from aether.controller.webhook_server import DEFAULT_WEBHOOK_PORT, WebhookServer, WebhookStatistics
from aether.controller.webhook_tls import (
    SERVING_SECRET,
    ServingCertificate,
    TlsFilesInvalid,
    generate_serving_certificate,
)
from aether.controller.webhooks import WebhookOptions, serve_webhooks

__all__ = [
    "ADMISSION_API_VERSION",
    "DEFAULT_LEASE",
    "DEFAULT_RESYNC",
    "DEFAULT_TIMING",
    "DEFAULT_WEBHOOK_PORT",
    "IDENTITY_READY_CONTAINER",
    "OUR_CONTROLLERS",
    "ROUTE_KINDS_VALIDATED",
    "SERVING_SECRET",
    "SUPPORTED_FEATURES",
    "WEBHOOK_PATHS",
    "ControllerConfig",
    "ControllerStatistics",
    "Deposed",
    "Elected",
    "ElectionState",
    "ElectionTiming",
    "IdentityCheck",
    "LeaderElection",
    "Leadership",
    "LeadershipStatistics",
    "LeaseName",
    "LeaseRecord",
    "MeshConfigProjection",
    "MeshConfigProjectionStatistics",
    "PodMutation",
    "ReadLease",
    "ReviewInvalid",
    "RunningController",
    "ServingCertificate",
    "StatusWrite",
    "TlsFilesInvalid",
    "Verdict",
    "WebhookOptions",
    "WebhookServer",
    "WebhookStatistics",
    "WriteLease",
    "answer_review",
    "config_verdict",
    "generate_serving_certificate",
    "mesh_ndots",
    "pod_verdict",
    "route_verdict",
    "serve_controller",
    "serve_leader_election",
    "serve_mesh_config_projection",
    "serve_webhooks",
    "status_update",
    "write_status",
]
