"""Checks of names and values shared by the reducers: each returns a problem message, or None when fine.

Patterns are applied with `fullmatch`: `$` would also accept a value ending in a newline.

Messages follow the house rule: lowercase, name the rule, show the offending value with `!r`.
"""

from __future__ import annotations

import functools
import ipaddress
import re

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""Kubernetes' DNS-1123 subdomain (`IsDNS1123Subdomain`): labels between dots have no length limit of their own."""
MAX_OBJECT_NAME = 253
_TRUST_DOMAIN = re.compile(r"[a-z0-9._-]+")
_PATH_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")

MAX_PORT = 65535


def dns_label_problem(value: str, *, what: str) -> str | None:
    """Check an RFC 1123 label (a namespace, a service account, a service name)."""
    if _DNS_LABEL.fullmatch(value):
        return None
    return f"{what} must be an RFC 1123 label (lowercase alphanumerics and '-', at most 63) (got {value!r})"


def dns_subdomain_problem(value: str, *, what: str) -> str | None:
    """Check an RFC 1123 subdomain (a mesh domain, a pod name)."""
    if 0 < len(value) <= 253 and all(_DNS_LABEL.fullmatch(label) for label in value.split(".")):
        return None
    return f"{what} must be an RFC 1123 subdomain (got {value!r})"


def object_name_problem(value: str, *, what: str) -> str | None:
    """Check a Kubernetes object name as the API server does: an RFC 1123 subdomain of at most 253 characters.

    Unlike `dns_subdomain_problem` (names that become DNS names), a label between dots may be longer than 63: a
    Gateway named with 253 letters and dashes is valid.
    """
    if 0 < len(value) <= MAX_OBJECT_NAME and _OBJECT_NAME.fullmatch(value):
        return None
    return (
        f"{what} must be an RFC 1123 subdomain (lowercase alphanumerics, '-' and '.', at most "
        f"{MAX_OBJECT_NAME}) (got {value!r})"
    )


@functools.lru_cache(maxsize=65536)  # a pure function of a string; a node's catalog is far smaller
def service_key_problem(value: str) -> str | None:
    """Check a mesh service key `<namespace>/<serviceAccount>`."""
    namespace, slash, account = value.partition("/")
    if (
        slash
        and _DNS_LABEL.fullmatch(namespace)
        and 0 < len(account) <= 253
        and all(_DNS_LABEL.fullmatch(label) for label in account.split("."))
    ):
        return None
    return f"service key must be '<namespace>/<serviceAccount>' (got {value!r})"


def ip_problem(value: str, *, what: str) -> str | None:
    """Check an IPv4 or IPv6 address; an IPv6 address with a zone (`fe80::1%eth0`) is a problem."""
    # Endpoint churn validates an IP per event: a regex settles dotted quads ~8x faster than `ipaddress`.
    if _IPV4.fullmatch(value):
        return None
    try:
        parsed = ipaddress.ip_address(value)
    except ValueError:
        return f"{what} must be an IP address (got {value!r})"
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.scope_id is not None:
        # A zone (`%eth0`) names an interface of the host that wrote it: no other node (nor Envoy's socket address,
        # which takes no zone) can use it. The registrar refuses it too (`registrar.convert.check_ip`).
        return f"{what} must be an IPv6 address without a zone ('%...') (got {value!r})"
    return None


def port_problem(value: int, *, what: str) -> str | None:
    """Check a port number."""
    if 1 <= value <= MAX_PORT:
        return None
    return f"{what} must be 1..{MAX_PORT} (got {value!r})"


def trust_domain_problem(value: str) -> str | None:
    """Check a SPIFFE trust domain name."""
    if _TRUST_DOMAIN.fullmatch(value) and len(value) <= 255:
        return None
    return f"trust domain must be lowercase letters, digits, '.', '-' or '_' (got {value!r})"


def spiffe_id_problem(value: str) -> str | None:
    """Check a SPIFFE ID `spiffe://<trustDomain>/<path>` (a path is required for workload identities)."""
    scheme, _, rest = value.partition("://")
    domain, slash, path = rest.partition("/")
    segments = path.split("/")
    if (
        scheme == "spiffe"
        and _TRUST_DOMAIN.fullmatch(domain)
        and slash
        and all(_PATH_SEGMENT.fullmatch(item) and item not in (".", "..") for item in segments)
    ):
        return None
    return f"spiffe id must be 'spiffe://<trustDomain>/<path>' (got {value!r})"
