"""The live view is a pure function of a frame."""

from __future__ import annotations

from aether.demo.view import EndpointRow, Frame, ServiceRow, render


def test_a_frame_renders_services_split_sync_state_routes_and_narration() -> None:
    frame = Frame(
        elapsed=12.5,
        log_dir="/tmp/run",
        seq=62,
        xds={"CDS": "SYNCED", "RDS": "STALE"},
        services=(
            ServiceRow(
                service="shop/catalog",
                endpoints=(EndpointRow(pod="catalog-1", ip="127.0.10.21", health="HEALTHY"),),
                ok=40,
                failed=0,
                split={"catalog-1": 30, "catalog-v2-1": 10},
            ),
        ),
        total_ok=400,
        total_failed=1,
        routes=("HTTPRoute/shop/x: Accepted=False (UnsupportedValue) bad regex",),
        problems=("a.yaml document 2: not YAML",),
        narration=("ok   mesh up",),
    )
    assert render(frame) == [
        "aether demo    12.5 s   log seq 62   /tmp/run",
        "xDS  CDS SYNCED  RDS STALE",
        "requests  ok 400  failed 1",
        "",
        "shop/catalog  (last 2 s: 40 ok, 0 failed)",
        "    endpoint catalog-1      127.0.10.21     HEALTHY",
        "    answered by catalog-1      ###############.....  75.0%",
        "    answered by catalog-v2-1   #####...............  25.0%",
        "",
        "routes",
        "    HTTPRoute/shop/x: Accepted=False (UnsupportedValue) bad regex",
        "",
        "manifest problems (last good objects kept)",
        "    a.yaml document 2: not YAML",
        "",
        "scenario",
        "    ok   mesh up",
    ]
    assert render(Frame(elapsed=0, log_dir="d", seq=0, xds={}, services=(), total_ok=0, total_failed=0))[
        1
    ] == ("xDS  (Envoy not connected yet)")
