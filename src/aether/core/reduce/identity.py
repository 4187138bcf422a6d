"""Reducers of identity events: SVIDs and trust bundles."""

from __future__ import annotations

import attrs

from aether.core.events.identity import SvidRemoved, SvidRotated, TrustBundleRemoved, TrustBundleRotated
from aether.core.reduce.common import applied, rejected
from aether.core.state.diagnostics import RejectionReason
from aether.core.state.state import State
from aether.core.validation import spiffe_id_problem, trust_domain_problem


def svid_rotated(state: State, event: SvidRotated, seq: int) -> State:
    """Adopt the SVID; a bad one is a rejection and the SVID in force for its SPIFFE ID stays until it expires.

    An SVID is bad when its SPIFFE ID is malformed, when its source reported a problem with the material, when its
    leaf certificate names another SPIFFE ID than the one it is delivered for, when it has no certificate or no
    key, or when it expired before it was observed (`not_after` at or before `observed_at`; 0 means not stated).

    When a bad one comes and the SVID in force has expired by then too, that one is dropped as well: it is no
    longer served. A source that keeps time re-sends its latest SVID when its `not_after` passes (the SPIFFE
    clients of `aether.identity` do), so an SVID that expires while nothing else happens stops being served, and
    the rejection says why.
    """
    problem = _svid_problem(event)
    if problem is not None:
        message = f"svid {event.svid.spiffe_id!r}: {problem}"
        state = rejected(state, event, seq, reason=RejectionReason.INVALID_SVID, message=message)
        in_force = state.identity.svids.get(event.svid.spiffe_id)
        if in_force is not None and in_force.not_after and in_force.not_after <= event.observed_at:
            svids = state.identity.svids.delete(event.svid.spiffe_id)
            state = attrs.evolve(state, identity=attrs.evolve(state.identity, svids=svids))
        return state
    svid = event.svid
    identity = attrs.evolve(state.identity, svids=state.identity.svids.set(svid.spiffe_id, svid))
    return applied(state, event, seq, identity=identity)


def _svid_problem(event: SvidRotated) -> str | None:
    """Return the first rule the event's SVID breaks, in the order the docstring of `svid_rotated` lists them."""
    svid = event.svid
    problem = spiffe_id_problem(svid.spiffe_id)
    if problem is not None:
        return problem
    if svid.problem:
        return svid.problem
    if svid.leaf_spiffe_id and svid.leaf_spiffe_id != svid.spiffe_id:
        return f"the certificate names another identity (got {svid.leaf_spiffe_id!r})"
    if not svid.cert_chain_pem:
        return "certificate chain must not be empty"
    if not svid.private_key.secret:
        return "private key must not be empty"
    if svid.not_after and svid.not_after <= event.observed_at:
        return f"the certificate expired (not_after {svid.not_after!r} <= observed_at {event.observed_at!r})"
    return None


def svid_removed(state: State, event: SvidRemoved, seq: int) -> State:
    """Forget the SVID; an unknown one is a rejection."""
    if event.spiffe_id not in state.identity.svids:
        message = f"svid {event.spiffe_id!r} removed but not known"
        return rejected(state, event, seq, reason=RejectionReason.UNKNOWN_SVID, message=message)
    identity = attrs.evolve(state.identity, svids=state.identity.svids.delete(event.spiffe_id))
    return applied(state, event, seq, identity=identity)


def trust_bundle_rotated(state: State, event: TrustBundleRotated, seq: int) -> State:
    """Adopt the trust bundle; a bad one (malformed domain, a problem its source reported, empty) is a rejection."""
    bundle = event.bundle
    problem = trust_domain_problem(bundle.trust_domain)
    if problem is None and bundle.problem:
        problem = bundle.problem
    if problem is None and not bundle.bundle_pem:
        problem = "bundle must not be empty"
    if problem is not None:
        message = f"trust bundle {bundle.trust_domain!r}: {problem}"
        return rejected(state, event, seq, reason=RejectionReason.INVALID_TRUST_BUNDLE, message=message)
    bundles = state.identity.trust_bundles.set(bundle.trust_domain, bundle)
    return applied(state, event, seq, identity=attrs.evolve(state.identity, trust_bundles=bundles))


def trust_bundle_removed(state: State, event: TrustBundleRemoved, seq: int) -> State:
    """Forget the trust bundle; an unknown one is a rejection."""
    if event.trust_domain not in state.identity.trust_bundles:
        message = f"trust bundle {event.trust_domain!r} removed but not known"
        return rejected(state, event, seq, reason=RejectionReason.UNKNOWN_TRUST_BUNDLE, message=message)
    bundles = state.identity.trust_bundles.delete(event.trust_domain)
    return applied(state, event, seq, identity=attrs.evolve(state.identity, trust_bundles=bundles))
