"""backendRef-level filters verified by traffic through a real Envoy: a backendRef's own header modifiers change
only the requests sent to that backend (and their answers), and a filter that cannot apply to one backend answers
that backend's share 500, never skipped. The edge and its backends are `test_routing_traffic`'s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_routing_traffic import http_route, open_client, open_edge

pytestmark = pytest.mark.slow

HOST = "backend-filters.example"
ROUTES = http_route(
    "backend-filters",
    HOST,
    """\
  - matches: [{path: {type: PathPrefix, value: /split}}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: x-rule, value: rule}, {name: x-which, value: rule}]}
    backendRefs:
    - name: alpha
      port: 80
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier: {set: [{name: x-which, value: alpha}], add: [{name: x-added, value: alpha}]}
      - type: ResponseHeaderModifier
        responseHeaderModifier: {set: [{name: x-served-by, value: alpha}]}
    - name: beta
      port: 80
      filters:
      - type: RequestHeaderModifier
        requestHeaderModifier: {remove: [x-rule]}
  - matches: [{path: {type: PathPrefix, value: /refused}}]
    backendRefs:
    - name: gamma
      port: 80
      filters:
      - type: URLRewrite
        urlRewrite: {hostname: elsewhere.example}
""",
)


async def test_backend_header_modifiers_change_only_their_backends_requests_and_a_refused_filter_answers_500(
    tmp_path: Path,
) -> None:
    """Requests split to alpha carry the rule's headers then alpha's own (its set wins) and their answers alpha's
    response header; requests split to beta lose the rule's x-rule (beta's remove) and get no alpha header; a
    backendRef with a URLRewrite of its own is never reached: 500."""
    async with open_edge(tmp_path, ROUTES) as edge, open_client(edge) as client:
        served = {"alpha": 0, "beta": 0}
        while min(served.values()) < 3:
            response = await client.request("/split", host=HOST, headers={"x-which": "client"})
            name = response.headers["x-upstream-name"]
            served[name] += 1
            received = edge.backends[name].requests[-1].headers
            if name == "alpha":
                assert (received["x-rule"], received["x-which"], received["x-added"]) == (
                    "rule",
                    "alpha",
                    "alpha",
                )
                assert response.headers["x-served-by"] == "alpha"
            else:
                assert "x-rule" not in received
                assert received["x-which"] == "rule"
                assert "x-added" not in received
                assert "x-served-by" not in response.headers
        refused = await client.request("/refused", host=HOST)
        assert refused.status == 500
        assert not edge.backends["gamma"].requests
