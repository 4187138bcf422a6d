"""Retries by outcome: the callee's proxy says what happened to a request, the caller's proxy retries accordingly.

The contract (DESIGN.md section 4): the caller retries twice, on another endpoint, a request that was never
delivered to the application whatever its method, and so an application's own 503 or a refused HTTP/2 stream; a
request the application received but did not answer is replayed only for idempotent methods.

The callee's side (the inbound HCM's `local_reply_config`). A reply the callee's Envoy generates itself carries a
response flag saying why; mappers match those flags and add `x-aether-outcome` (Envoy 1.40's flag names):

* `undelivered`: the app was never reached. UF (connection to the app failed), UH (no healthy app host), UO (app
  connection pool overflow), NC (app cluster not found), NR (no route), OM (overload manager), DO and UDO (drop
  overload). The status stays what Envoy chose (503, or 404 for NR).
* `unanswered`: the request went to the app, which reset or closed the stream before a response: UR (remote reset),
  UC (connection terminated), UPE (upstream protocol error). The status becomes 502: Envoy answers these with 503,
  and 503 is also what makes the caller retry an app's own reply whatever the method (`retriable-status-codes`),
  so keeping 503 would replay a POST the app may have processed.
* Anything the app answered passes untouched, and an `x-aether-outcome` the app set itself is removed from its
  responses (`response_headers_to_remove` of the inbound route table), so an app cannot forge a retry.

The caller's side (every outbound and capture service route): `retry_on` connect-failure (the callee's proxy was
unreachable), refused-stream (HTTP/2 REFUSED_STREAM: not processed by definition), reset-before-request (reset before
the request was sent), retriable-status-codes [503] (the app's own 503, or a callee proxy's undelivered 503) and
retriable-headers, matching `x-aether-outcome: undelivered` on every route. The route for idempotent methods (GET,
HEAD, OPTIONS, TRACE, PUT, DELETE), matched on `:method` and ordered first, also matches `unanswered`, and retries on
`reset`: a connection to the callee's proxy that goes away after the request was sent (the callee's Envoy restarted,
its node went, a reset on the way) leaves no proxy to report the outcome, and is received-but-unanswered.
Retries pick another host (`previous_hosts`, up to 3 selection attempts) and back off 25 ms, at most 250 ms.
"""

from __future__ import annotations

import functools
from typing import Any

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.retry.host.previous_hosts.v3 import previous_hosts_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from google.protobuf import wrappers_pb2

from aether.core.project.messages import milliseconds, pack
from aether.core.project.names import IDEMPOTENT_METHODS, OUTCOME_HEADER, UNANSWERED, UNDELIVERED

RETRY_ON = "connect-failure,refused-stream,reset-before-request,retriable-status-codes,retriable-headers"
IDEMPOTENT_RETRY_ON = f"{RETRY_ON},reset"
"""Also a reset after the request was sent (Envoy's `reset`: a disconnect, a reset, a per-try timeout)."""
NUM_RETRIES = 2
"""The contract's two retries: with `previous_hosts`, three different endpoints see the request at most."""
HOST_SELECTION_ATTEMPTS = 3
"""How many hosts the load balancer may draw to find one not tried yet (the original system's value)."""
RETRY_BACK_OFF_BASE_MS = 25
RETRY_BACK_OFF_MAX_MS = 250
"""Envoy's default base, and a cap that keeps two retries well inside a request's 15 s default timeout."""

UNDELIVERED_FLAGS = ("UF", "UH", "UO", "NC", "NR", "OM", "DO", "UDO")
UNANSWERED_FLAGS = ("UR", "UC", "UPE")
UNANSWERED_STATUS = 502

METHOD_HEADER = ":method"


def _outcome_matcher(value: str) -> Any:
    return route_components_pb2.HeaderMatcher(
        name=OUTCOME_HEADER, string_match=string_pb2.StringMatcher(exact=value)
    )


@functools.cache
def retry_policy(*, idempotent: bool) -> Any:
    """Return the retry policy of a service route; `idempotent` routes also replay unanswered requests (reported by
    the callee's proxy, or reset after they were sent).

    One shared message per flavour (every service route embeds one): embed it, which copies; never mutate it.
    """
    outcomes = (UNDELIVERED, UNANSWERED) if idempotent else (UNDELIVERED,)
    return route_components_pb2.RetryPolicy(
        retry_on=IDEMPOTENT_RETRY_ON if idempotent else RETRY_ON,
        num_retries=wrappers_pb2.UInt32Value(value=NUM_RETRIES),
        retriable_status_codes=[503],
        retry_host_predicate=[
            route_components_pb2.RetryPolicy.RetryHostPredicate(
                name="envoy.retry_host_predicates.previous_hosts",
                typed_config=pack(previous_hosts_pb2.PreviousHostsPredicate()),
            )
        ],
        host_selection_retry_max_attempts=HOST_SELECTION_ATTEMPTS,
        retry_back_off=route_components_pb2.RetryPolicy.RetryBackOff(
            base_interval=milliseconds(RETRY_BACK_OFF_BASE_MS),
            max_interval=milliseconds(RETRY_BACK_OFF_MAX_MS),
        ),
        retriable_headers=[_outcome_matcher(outcome) for outcome in outcomes],
    )


@functools.cache
def idempotent_method_matcher() -> Any:
    """Return the header matcher of the idempotent methods (`:method`, a regex over the closed list).

    One shared message: embed it, which copies; never mutate it.
    """
    pattern = "^(" + "|".join(IDEMPOTENT_METHODS) + ")$"
    return route_components_pb2.HeaderMatcher(
        name=METHOD_HEADER,
        string_match=string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=pattern)),
    )


def _mapper(flags: tuple[str, ...], outcome: str, *, status: int = 0) -> Any:
    mapper = hcm_pb2.ResponseMapper(
        filter=accesslog_pb2.AccessLogFilter(
            response_flag_filter=accesslog_pb2.ResponseFlagFilter(flags=list(flags))
        ),
        headers_to_add=[
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=OUTCOME_HEADER, value=outcome),
                append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
            )
        ],
    )
    if status:
        mapper.status_code.value = status
    return mapper


def inbound_local_replies() -> Any:
    """Return the inbound HCM's local reply config: the outcome header on replies Envoy made itself."""
    return hcm_pb2.LocalReplyConfig(
        mappers=[
            _mapper(UNDELIVERED_FLAGS, UNDELIVERED),
            _mapper(UNANSWERED_FLAGS, UNANSWERED, status=UNANSWERED_STATUS),
        ]
    )
