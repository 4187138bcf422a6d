"""Gateway listeners of the edge: which ones can be served, what they accept, and their status conditions.

Every Gateway of the edge's class shares one Envoy, so listeners of all of them are checked together: on one port,
the first listener (oldest Gateway, then listener order) fixes the protocol, a later one with another protocol
(UDP aside, which has its own sockets) is conflicted (`ProtocolConflict`), and a later one repeating a hostname
already served on that port is conflicted too (`HostnameConflict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from aether.core.events.kube import TlsSecret
from aether.core.gateway.certificates import certificate_problem
from aether.core.gateway.contract import Condition, ListenerStatus
from aether.core.gateway.model.gateways import DEFAULT_KINDS, Gateway, Listener
from aether.core.gateway.model.refs import CORE_GROUP, GATEWAY_GROUP
from aether.core.gateway.resolve import Resolver
from aether.core.gateway.status import ACCEPTED, CONFLICTED, FALSE, PROGRAMMED, RESOLVED_REFS, condition


@attrs.frozen(kw_only=True)
class ListenerState:
    """A listener with what checking it found."""

    gateway: Gateway
    listener: Listener
    index: int
    kinds: tuple[str, ...]
    """The route kinds it accepts (group `gateway.networking.k8s.io`), sorted."""
    certificates: tuple[str, ...] = ()
    """Its resolved certificateRefs as `<ns>/<name>`."""
    conditions: tuple[Condition, ...] = ()

    @property
    def usable(self) -> bool:
        """True when the listener is served: Accepted, Programmed, not Conflicted."""
        wanted = {ACCEPTED: "True", PROGRAMMED: "True", CONFLICTED: "False"}
        return all(item.status == wanted[item.type] for item in self.conditions if item.type in wanted)

    def status(self, attached: int) -> ListenerStatus:
        """Return the listener's status with `attached` routes."""
        return ListenerStatus(
            name=self.listener.name,
            supported_kinds=self.kinds,
            attached_routes=attached,
            conditions=self.conditions,
        )


def _kinds(listener: Listener) -> tuple[tuple[str, ...], str]:
    """Return the kinds the listener accepts and, when some given kinds are not valid for it, why."""
    defaults = DEFAULT_KINDS.get(listener.protocol, ())
    if not listener.allowed.kinds:
        return tuple(sorted(defaults)), ""
    kinds = [kind for group, kind in listener.allowed.kinds if group == GATEWAY_GROUP and kind in defaults]
    invalid = [
        f"{group or 'core'}/{kind}"
        for group, kind in listener.allowed.kinds
        if kind not in kinds or group != GATEWAY_GROUP
    ]
    problem = f"route kinds {invalid} are not supported on a {listener.protocol} listener" if invalid else ""
    return tuple(sorted(set(kinds))), problem


def _certificates(
    gateway: Gateway, listener: Listener, resolver: Resolver, secrets: Mapping[str, TlsSecret]
) -> tuple[tuple[str, ...], str, str]:
    """Return the resolved certificate Secrets, and the reason and message of the first one that did not resolve
    (of another kind, not permitted, missing, or not a TLS certificate and key)."""
    resolved: list[str] = []
    reason = message = ""
    for ref in listener.certificates:
        if ref.group != CORE_GROUP or ref.kind != "Secret":
            reason = reason or "InvalidCertificateRef"
            message = (
                message
                or f"certificateRef {ref.group or 'core'}/{ref.kind}/{ref.namespace}/{ref.name}: only core Secrets are supported"
            )
            continue
        if not resolver.permitted(
            from_kind="Gateway",
            from_namespace=gateway.meta.namespace,
            to_group=CORE_GROUP,
            to_kind="Secret",
            to_namespace=ref.namespace,
            to_name=ref.name,
        ):
            reason = reason or "RefNotPermitted"
            message = message or (
                f"certificateRef Secret {ref.namespace}/{ref.name}: no ReferenceGrant in namespace {ref.namespace!r} "
                f"allows Gateways from {gateway.meta.namespace!r} to refer to it"
            )
            continue
        secret = secrets.get(f"Secret/{ref.namespace}/{ref.name}")
        problem = (
            f"no Secret of type kubernetes.io/tls named {ref.name!r} in namespace {ref.namespace!r}"
            if secret is None
            else certificate_problem(secret)
        )
        if problem:
            reason = reason or "InvalidCertificateRef"
            message = message or f"certificateRef Secret {ref.namespace}/{ref.name}: {problem}"
            continue
        resolved.append(f"{ref.namespace}/{ref.name}")
    return tuple(resolved), reason, message


def _family(protocol: str) -> str:
    # HTTPS and TLS listeners share a port by SNI (one TLS inspector, filter chains per server name).
    return {"HTTPS": "TLS"}.get(protocol, protocol)


def listener_states(
    gateways: Sequence[Gateway], resolver: Resolver, *, secrets: Mapping[str, TlsSecret]
) -> list[ListenerState]:
    """Return the state of every listener of `gateways` (sorted oldest first), in that order; `secrets` are the
    TLS Secrets by key (`Secret/<ns>/<name>`), what certificateRefs name."""
    states: list[ListenerState] = []
    families: dict[tuple[int, bool], str] = {}
    hosts: dict[tuple[int, str, str], str] = {}
    for gateway in gateways:
        generation = gateway.meta.generation
        for index, listener in enumerate(gateway.listeners):
            kinds, kinds_problem = _kinds(listener)
            certificates, cert_reason, cert_message = _certificates(gateway, listener, resolver, secrets)
            conflict_reason = conflict_message = ""
            if not listener.problem:
                udp = listener.protocol == "UDP"
                family = families.setdefault((listener.port, udp), _family(listener.protocol))
                owner = hosts.get((listener.port, family, listener.hostname))
                if family != _family(listener.protocol):
                    conflict_reason = "ProtocolConflict"
                    conflict_message = f"port {listener.port} already serves {family}"
                elif owner is not None:
                    conflict_reason = "HostnameConflict"
                    conflict_message = f"port {listener.port} hostname {listener.hostname or '*'!r} is already served by {owner}"
                else:
                    hosts[(listener.port, family, listener.hostname)] = (
                        f"{gateway.meta.namespace}/{gateway.meta.name} listener {listener.name!r}"
                    )
            if listener.problem:
                accepted = condition(
                    ACCEPTED,
                    ok=False,
                    reason="UnsupportedProtocol",
                    message=listener.problem,
                    generation=generation,
                )
            elif conflict_reason:
                accepted = condition(
                    ACCEPTED,
                    ok=False,
                    reason="PortUnavailable",
                    message=conflict_message,
                    generation=generation,
                )
            else:
                accepted = condition(ACCEPTED, ok=True, generation=generation)
            if kinds_problem:
                refs = condition(
                    RESOLVED_REFS,
                    ok=False,
                    reason="InvalidRouteKinds",
                    message=kinds_problem,
                    generation=generation,
                )
            elif cert_reason:
                refs = condition(
                    RESOLVED_REFS, ok=False, reason=cert_reason, message=cert_message, generation=generation
                )
            else:
                refs = condition(RESOLVED_REFS, ok=True, generation=generation)
            servable = accepted.status == "True" and (listener.tls_mode != "Terminate" or bool(certificates))
            programmed = condition(
                PROGRAMMED,
                ok=servable,
                reason="" if servable else "Invalid",
                message="" if servable else (accepted.message or cert_message or "no certificate resolved"),
                generation=generation,
            )
            conflicted = Condition(
                type=CONFLICTED,
                status="True" if conflict_reason else FALSE,
                reason=conflict_reason or "NoConflicts",
                message=conflict_message,
                observed_generation=generation,
            )
            states.append(
                ListenerState(
                    gateway=gateway,
                    listener=listener,
                    index=index,
                    kinds=kinds,
                    certificates=certificates,
                    conditions=(accepted, programmed, refs, conflicted),
                )
            )
    return states
