"""Tests of `aether.core.validation`: the checks of names and values shared by the reducers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aether.core.validation import (
    MAX_PORT,
    dns_label_problem,
    dns_subdomain_problem,
    ip_problem,
    object_name_problem,
    port_problem,
    service_key_problem,
    spiffe_id_problem,
    trust_domain_problem,
)


@pytest.mark.parametrize("value", ["a", "web", "web-1", "0", "a" * 63, "1a-b2"])
def test_valid_dns_labels_have_no_problem(value: str) -> None:
    """Lowercase alphanumerics and inner dashes, 1 to 63 characters, pass."""
    assert dns_label_problem(value, what="namespace") is None


@pytest.mark.parametrize("value", ["", "-web", "web-", "Web", "web_1", "web.1", "a" * 64, "wéb"])
def test_invalid_dns_labels_are_named_with_the_rule_and_the_value(value: str) -> None:
    """An invalid label's problem names the subject, the rule and the value."""
    assert dns_label_problem(value, what="namespace") == (
        f"namespace must be an RFC 1123 label (lowercase alphanumerics and '-', at most 63) (got {value!r})"
    )


@pytest.mark.parametrize(
    "value", ["web", "web-1.v2", "a" * 64, "gateway-" + "a" * 245, "a" * 126 + "." + "b" * 126]
)
def test_object_names_are_subdomains_of_up_to_253_characters_with_labels_of_any_length(value: str) -> None:
    """A Kubernetes object name is valid up to 253 characters, whatever the length of its labels (the API server's
    `IsDNS1123Subdomain`): a 253-character Gateway name without dots passes."""
    assert object_name_problem(value, what="name") is None


@pytest.mark.parametrize("value", ["", ".web", "web.", "web..v2", "Web", "-web", "web-", "a" * 254, "web\n"])
def test_invalid_object_names_are_named_with_the_rule_and_the_value(value: str) -> None:
    """Empty labels, invalid characters and names over 253 characters are problems."""
    assert object_name_problem(value, what="name") == (
        f"name must be an RFC 1123 subdomain (lowercase alphanumerics, '-' and '.', at most 253) (got {value!r})"
    )


@pytest.mark.parametrize("value", ["web", "web-1.v2", "a.b.c", ".".join(["a" * 63] * 3) + ".b" * 30])
def test_valid_dns_subdomains_have_no_problem(value: str) -> None:
    """Dot-separated labels, at most 253 characters in all, pass."""
    assert len(value) <= 253
    assert dns_subdomain_problem(value, what="pod name") is None


@pytest.mark.parametrize("value", ["", ".web", "web.", "web..v2", "Web.v2", "a" * 64, ("a." * 127) + "a"])
def test_invalid_dns_subdomains_are_named_with_the_value(value: str) -> None:
    """Empty labels, invalid labels and names over 253 characters are problems."""
    assert (
        dns_subdomain_problem(value, what="pod name")
        == f"pod name must be an RFC 1123 subdomain (got {value!r})"
    )


@pytest.mark.parametrize("value", ["default/web", "shop/db.v2", "a/b"])
def test_valid_service_keys_have_no_problem(value: str) -> None:
    """`<namespace label>/<service account subdomain>` passes."""
    assert service_key_problem(value) is None


@pytest.mark.parametrize(
    "value", ["", "web", "/web", "default/", "Default/web", "default/Web", "default/web/x"]
)
def test_invalid_service_keys_are_named_with_the_value(value: str) -> None:
    """A key without the slash, with an empty or invalid part, or with a second slash is a problem."""
    assert service_key_problem(value) == f"service key must be '<namespace>/<serviceAccount>' (got {value!r})"


@pytest.mark.parametrize(
    "value", ["10.0.0.1", "0.0.0.0", "255.255.255.255", "fd00::1", "::1", "::ffff:10.0.0.1"]
)
def test_valid_ip_addresses_have_no_problem(value: str) -> None:
    """IPv4 and IPv6 addresses pass."""
    assert ip_problem(value, what="ip") is None


@pytest.mark.parametrize("value", ["", "10.0.0", "10.0.0.256", "010.0.0.1", "10.0.0.1 ", "fd00::1::2", "web"])
def test_invalid_ip_addresses_are_named_with_the_value(value: str) -> None:
    """Anything that is no IPv4 or IPv6 address (leading zeros and blanks included) is a problem."""
    assert ip_problem(value, what="node ip") == f"node ip must be an IP address (got {value!r})"


@pytest.mark.parametrize("value", ["fe80::1%eth0", "fe80::1%1"])
def test_an_ipv6_address_with_a_zone_is_a_problem_naming_the_rule(value: str) -> None:
    """A zoned IPv6 address (`fe80::1%eth0`) names an interface of one host: refused, as the registrar does."""
    assert ip_problem(value, what="pod ip") == (
        f"pod ip must be an IPv6 address without a zone ('%...') (got {value!r})"
    )


@pytest.mark.parametrize("value", [1, 80, MAX_PORT])
def test_ports_in_range_have_no_problem(value: int) -> None:
    """Ports 1..65535 pass."""
    assert port_problem(value, what="port") is None


@pytest.mark.parametrize("value", [0, -1, MAX_PORT + 1])
def test_ports_out_of_range_are_named_with_the_value(value: int) -> None:
    """Port 0, negative ports and ports above 65535 are problems."""
    assert port_problem(value, what="port 'http'") == f"port 'http' must be 1..65535 (got {value!r})"


@pytest.mark.parametrize("value", ["aether.internal", "example.org", "a_b-c.d", "x" * 255])
def test_valid_trust_domains_have_no_problem(value: str) -> None:
    """Lowercase letters, digits, '.', '-' and '_', at most 255 characters, pass."""
    assert trust_domain_problem(value) is None


@pytest.mark.parametrize("value", ["", "Example.org", "a b", "x" * 256, "a/b"])
def test_invalid_trust_domains_are_named_with_the_value(value: str) -> None:
    """Empty, uppercase, spaced, slashed or over-long trust domains are problems."""
    assert trust_domain_problem(value) == (
        f"trust domain must be lowercase letters, digits, '.', '-' or '_' (got {value!r})"
    )


@pytest.mark.parametrize(
    "value",
    ["spiffe://aether.internal/ns/default/sa/web", "spiffe://example.org/a", "spiffe://td/A.b_c-d/..e"],
)
def test_valid_spiffe_ids_have_no_problem(value: str) -> None:
    """`spiffe://<trust domain>/<path>` with non-empty segments other than '.' and '..' passes."""
    assert spiffe_id_problem(value) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "spiffe://aether.internal",
        "spiffe://aether.internal/",
        "spiffe://aether.internal/ns//web",
        "spiffe://aether.internal/ns/../web",
        "spiffe://aether.internal/./web",
        "spiffe://Aether/ns/web",
        "https://aether.internal/ns/web",
        "spiffe:/aether.internal/ns/web",
        "spiffe://aether.internal/ns/web?x=1",
    ],
)
def test_invalid_spiffe_ids_are_named_with_the_value(value: str) -> None:
    """A wrong scheme, no path, an empty or dot segment, or a bad trust domain is a problem."""
    assert spiffe_id_problem(value) == f"spiffe id must be 'spiffe://<trustDomain>/<path>' (got {value!r})"


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        (
            lambda: dns_label_problem("web\n", what="namespace"),
            "namespace must be an RFC 1123 label (lowercase alphanumerics and '-', at most 63) (got 'web\\n')",
        ),
        (
            lambda: dns_subdomain_problem("web-1\n", what="pod name"),
            "pod name must be an RFC 1123 subdomain (got 'web-1\\n')",
        ),
        (
            lambda: service_key_problem("default/web\n"),
            "service key must be '<namespace>/<serviceAccount>' (got 'default/web\\n')",
        ),
        (lambda: ip_problem("10.0.0.1\n", what="ip"), "ip must be an IP address (got '10.0.0.1\\n')"),
        (
            lambda: trust_domain_problem("aether.internal\n"),
            "trust domain must be lowercase letters, digits, '.', '-' or '_' (got 'aether.internal\\n')",
        ),
        (
            lambda: spiffe_id_problem("spiffe://aether.internal/ns/default/sa/web\n"),
            "spiffe id must be 'spiffe://<trustDomain>/<path>' (got 'spiffe://aether.internal/ns/default/sa/web\\n')",
        ),
    ],
    ids=["label", "subdomain", "service-key", "ipv4", "trust-domain", "spiffe-id"],
)
def test_a_value_with_a_trailing_newline_is_a_problem(
    problem: Callable[[], str | None], expected: str
) -> None:
    """A trailing newline makes a name or an address invalid (`$` alone would let it through)."""
    assert problem() == expected
