"""Tests of `aether.core.project.outcome`: retry policies and the inbound outcome header."""

from __future__ import annotations

from aether.core.project.outcome import idempotent_method_matcher, inbound_local_replies, retry_policy
from tests.core.project._helpers import as_dict

_COMMON = {
    "retry_on": "connect-failure,refused-stream,reset-before-request,retriable-status-codes,retriable-headers",
    "num_retries": 2,
    "retriable_status_codes": [503],
    "retry_host_predicate": [
        {
            "name": "envoy.retry_host_predicates.previous_hosts",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
            },
        }
    ],
    "host_selection_retry_max_attempts": "3",
    "retry_back_off": {"base_interval": "0.025s", "max_interval": "0.250s"},
}


def test_every_service_route_retries_undelivered_requests() -> None:
    """Connect failures, refused streams, resets before the request, 503 and `undelivered` are retried."""
    assert as_dict(retry_policy(idempotent=False)) == {
        **_COMMON,
        "retriable_headers": [{"name": "x-aether-outcome", "string_match": {"exact": "undelivered"}}],
    }


def test_idempotent_routes_also_retry_unanswered_requests() -> None:
    """The idempotent route's policy adds `unanswered`, and resets after the request was sent (`reset`)."""
    assert as_dict(retry_policy(idempotent=True)) == {
        **_COMMON,
        "retry_on": f"{_COMMON['retry_on']},reset",
        "retriable_headers": [
            {"name": "x-aether-outcome", "string_match": {"exact": "undelivered"}},
            {"name": "x-aether-outcome", "string_match": {"exact": "unanswered"}},
        ],
    }


def test_idempotent_methods_are_matched_by_regex() -> None:
    """GET, HEAD, OPTIONS, TRACE, PUT and DELETE: RFC 9110's idempotent methods."""
    assert as_dict(idempotent_method_matcher()) == {
        "name": ":method",
        "string_match": {"safe_regex": {"regex": "^(GET|HEAD|OPTIONS|TRACE|PUT|DELETE)$"}},
    }


def test_the_callee_reports_why_it_answered_itself() -> None:
    """Flags of requests that never reached the app say `undelivered`; resets after sending say `unanswered`,
    as a 502 so the caller's 503 rule does not replay them."""

    def header(value: str) -> dict[str, object]:
        return {
            "header": {"key": "x-aether-outcome", "value": value},
            "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
        }

    assert as_dict(inbound_local_replies()) == {
        "mappers": [
            {
                "filter": {
                    "response_flag_filter": {"flags": ["UF", "UH", "UO", "NC", "NR", "OM", "DO", "UDO"]}
                },
                "headers_to_add": [header("undelivered")],
            },
            {
                "filter": {"response_flag_filter": {"flags": ["UR", "UC", "UPE"]}},
                "status_code": 502,
                "headers_to_add": [header("unanswered")],
            },
        ]
    }
