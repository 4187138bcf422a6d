"""The identities this node holds: its workloads' SVIDs and the trust bundles."""

from __future__ import annotations

import attrs
import immutables

from aether.core.events.identity import Svid, TrustBundle


@attrs.frozen(kw_only=True)
class IdentityState:
    """SVIDs keyed by SPIFFE ID, trust bundles keyed by trust domain."""

    svids: immutables.Map[str, Svid] = immutables.Map()
    trust_bundles: immutables.Map[str, TrustBundle] = immutables.Map()
