"""The folded state: immutable, structurally shared sub-states for pods, registry, Kubernetes objects, identity,
xDS feedback and rejections."""

from aether.core.state.codec import decode_state, encode_state, state_digest, state_from_proto, state_to_proto
from aether.core.state.diagnostics import MAX_REJECTIONS, Diagnostics, Rejection, RejectionReason
from aether.core.state.feedback import FeedbackState, OnDemandRequest, XdsFeedback
from aether.core.state.identity import IdentityState
from aether.core.state.invariants import state_problems
from aether.core.state.kube import KubeState
from aether.core.state.pods import PodConfig, PodRecord
from aether.core.state.registry import MAX_ENDPOINT_STEPS, EndpointStep, RegistryState
from aether.core.state.state import EMPTY_STATE, State
from aether.core.state.summary import StateSummary, state_document, summarize

__all__ = [
    "EMPTY_STATE",
    "MAX_ENDPOINT_STEPS",
    "MAX_REJECTIONS",
    "Diagnostics",
    "EndpointStep",
    "FeedbackState",
    "IdentityState",
    "KubeState",
    "OnDemandRequest",
    "PodConfig",
    "PodRecord",
    "RegistryState",
    "Rejection",
    "RejectionReason",
    "State",
    "StateSummary",
    "XdsFeedback",
    "decode_state",
    "encode_state",
    "state_digest",
    "state_document",
    "state_from_proto",
    "state_problems",
    "state_to_proto",
    "summarize",
]
