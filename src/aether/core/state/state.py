"""The root of the folded state: every sub-state plus the log position it reflects."""

from __future__ import annotations

import attrs
import immutables

from aether.core.state.diagnostics import Diagnostics
from aether.core.state.feedback import FeedbackState
from aether.core.state.identity import IdentityState
from aether.core.state.kube import KubeState
from aether.core.state.pods import PodRecord
from aether.core.state.registry import RegistryState


@attrs.frozen(kw_only=True)
class State:
    """Everything the node has folded from its log, immutable and structurally shared between versions.

    Two states fold from equal event sequences are equal, whatever the process or hash seed.
    """

    seq: int = 0
    """The sequence number of the last record folded (0: none)."""
    pods: immutables.Map[str, PodRecord] = immutables.Map()
    """This node's managed pods, keyed by `<namespace>/<name>`."""
    captured_nodes: frozenset[str] = frozenset()
    """The nodes whose pods are captured (`NodeCaptureConfigured`): their pods bind only in their own network
    namespace, so one not joined through CNI ADD yet gets no listeners and no registration."""
    registry: RegistryState = RegistryState()
    kube: KubeState = KubeState()
    identity: IdentityState = IdentityState()
    feedback: FeedbackState = FeedbackState()
    diagnostics: Diagnostics = Diagnostics()
    """Rejections: derived from the events like everything else, but about the inputs, not the mesh."""


EMPTY_STATE = State()
"""The state before any record."""
