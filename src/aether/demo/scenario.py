"""The demo's scenario: the steps it walks through, each narrated and checked.

1. The mesh comes up: every xDS type SYNCED and every service answering through the mesh.
2. The canary split (90/10) as measured.
3. The canary weight shifts to 50/50 by editing the route file; the new split is measured, and the time from the
   edit to the split showing in traffic.
4. A replica is killed (its server stops): requests keep succeeding (the callee's proxy reports the failure as
   undelivered and the caller retries another endpoint); then its pod is deleted and its endpoint leaves.
5. It comes back: the pod file returns, its server starts, it answers again.
6. An invalid route is applied: its status says why it was rejected, and traffic is unaffected.

Each step returns a `StepResult`; `--check` exits 0 only if all passed. Timings are in `Timings`.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable

import attrs
import trio

from aether.demo.mesh import DemoMesh
from aether.demo.traffic import Sample, split_of

__all__ = ["StepResult", "Timings", "run_scenario"]

START_TIMEOUT = 60.0
"""Seconds the mesh gets to come up (Envoy's first configuration, the first routed requests)."""
STEP_TIMEOUT = 20.0
"""Seconds any later step gets to show its effect."""
CANARY_SAMPLES = 600
"""Requests to catalog that a split is measured over."""

BROKEN_ROUTE = """\
# Applied by the demo's scenario: a path regex that does not compile. The route is rejected (see its status) and
# checkout keeps its routing.
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: checkout-broken
  namespace: shop
  creationTimestamp: "2026-01-02T00:00:00Z"
spec:
  parentRefs:
    - {group: "", kind: Service, name: checkout, port: 8080}
  rules:
    - matches:
        - path: {type: RegularExpression, value: "/orders/([0-9+"}
      backendRefs:
        - {name: cart, port: 8080}
"""


@attrs.frozen(kw_only=True)
class StepResult:
    """One step: whether it behaved, and what was measured."""

    name: str
    ok: bool
    detail: str


@attrs.define
class Timings:
    """The figures the demo reports (seconds)."""

    process_start: float | None = None
    """From the `aether demo` process's start to the mesh starting (the interpreter and imports); add it to the
    figures below for the time from the command."""
    first_routed_request: float | None = None
    """From the demo's start to the first request answered through the mesh."""
    all_synced: float | None = None
    """From the demo's start to every xDS type SYNCED."""
    route_edit_acked: float | None = None
    """From writing the new canary weights to Envoy acknowledging the route configuration that carries them."""
    route_edit_observed: float | None = None
    """From writing the new canary weights to the new split showing in traffic: the end of the first window of 60
    requests after the edit in which catalog-v2 answered at least 30% (so it includes collecting that window)."""


def _tolerance(share: float, samples: int) -> float:
    """Four standard deviations of a binomial share over `samples` draws (a false alarm about 1 in 15,000)."""
    return 4 * math.sqrt(max(share * (1 - share), 0.01) / max(samples, 1))


async def _until(predicate: Callable[[], bool], *, limit: float) -> bool:
    """Poll `predicate` until it holds (True) or `limit` seconds pass (False)."""
    with trio.move_on_after(limit):
        while True:  # polled: the predicates read traffic samples and xDS state that signal no event
            if predicate():
                return True
            await trio.sleep(0.05)
    return False


def _share(samples: list[Sample], prefix: str) -> float:
    split = split_of(samples)
    total = sum(split.values())
    return (
        sum(count for backend, count in split.items() if backend.startswith(prefix)) / total if total else 0.0
    )


async def _collect(mesh: DemoMesh, service: str, *, count: int, since: float) -> list[Sample]:
    await _until(lambda: len(mesh.traffic.since(since, service=service)) >= count, limit=STEP_TIMEOUT)
    return mesh.traffic.since(since, service=service)[:count]


def _seconds(value: float | None) -> str:
    return "(not seen)" if value is None else f"{value:.2f} s"


def _failures(mesh: DemoMesh, since: float) -> list[Sample]:
    return [sample for sample in mesh.traffic.since(since) if not sample.ok]


def _failed(samples: list[Sample]) -> str:
    """`N failed` and, when N > 0, how: the count per service and status (0: no response)."""
    if not samples:
        return "0 failed"
    counts = collections.Counter(f"{sample.service} {sample.status or 'no response'}" for sample in samples)
    return f"{len(samples)} failed ({', '.join(f'{key}: {n}' for key, n in sorted(counts.items()))})"


async def run_scenario(mesh: DemoMesh, *, say: Callable[[str], None], timings: Timings) -> list[StepResult]:
    """Walk through the scenario on `mesh`, narrating with `say`; return each step's result."""
    results: list[StepResult] = []
    clock = mesh.traffic.clock

    def done(name: str, ok: bool, detail: str) -> None:
        results.append(StepResult(name=name, ok=ok, detail=detail))
        say(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")

    # 1. Up.
    say("starting: registrar, agent, Envoy, workloads; waiting for the first routed requests")
    up = await _until(
        lambda: (
            mesh.synced()
            and all(
                mesh.traffic.since(clock() - 1.0, service=s)
                and any(x.ok for x in mesh.traffic.since(clock() - 1.0, service=s))
                for s in mesh.services
            )
        ),
        limit=START_TIMEOUT,
    )
    if mesh.traffic.first_ok_at is not None:
        timings.first_routed_request = mesh.traffic.first_ok_at - mesh.started_at
    timings.all_synced = clock() - mesh.started_at if up else None
    done(
        "mesh up",
        up,
        f"first routed request after {_seconds(timings.first_routed_request)}, "
        f"all xDS types SYNCED after {_seconds(timings.all_synced)}"
        if up
        else f"not up within {START_TIMEOUT:.0f} s (xDS {mesh.xds_state()})",
    )
    if not up:
        return results
    steady = clock()

    # 2. The canary as configured.
    catalog = next((s for s in mesh.services if s.endswith("/catalog")), mesh.services[0])
    samples = await _collect(mesh, catalog, count=CANARY_SAMPLES, since=clock())
    share = _share(samples, "catalog-v2")
    ok = len(samples) >= CANARY_SAMPLES and abs(share - 0.10) <= _tolerance(0.10, len(samples))
    done("canary 90/10", ok, f"catalog-v2 answered {share:.1%} of {len(samples)} requests (weight 10%)")

    # 3. Shift the weight by editing the route file.
    route_file = mesh.manifests / "routes" / "catalog-canary.yaml"
    text = route_file.read_text()
    edited = text.replace("weight: 90", "weight: 50").replace("weight: 10}", "weight: 50}")
    say(f"editing {route_file.relative_to(mesh.work_dir)}: catalog-v1 50, catalog-v2 50")
    routes_before = mesh.acked_version("RDS")
    edit_at = clock()
    route_file.write_text(edited)
    acked = await _until(lambda: mesh.acked_version("RDS") != routes_before, limit=STEP_TIMEOUT)
    if acked:
        timings.route_edit_acked = clock() - edit_at

    def shifted() -> bool:
        window = mesh.traffic.since(edit_at, service=catalog)[-60:]
        return len(window) >= 60 and _share(window, "catalog-v2") >= 0.30

    observed = await _until(shifted, limit=STEP_TIMEOUT)
    if observed:
        timings.route_edit_observed = clock() - edit_at
    samples = await _collect(mesh, catalog, count=CANARY_SAMPLES, since=clock())
    share = _share(samples, "catalog-v2")
    ok = observed and abs(share - 0.5) <= _tolerance(0.5, len(samples))
    done(
        "canary shifted to 50/50",
        ok,
        f"catalog-v2 answered {share:.1%} of {len(samples)} requests; Envoy acknowledged the new routes "
        f"{_seconds(timings.route_edit_acked)} after the edit, and the split showed in traffic (30% of the next 60 "
        f"requests) after {_seconds(timings.route_edit_observed)}",
    )

    # 4. Kill a replica.
    cart = next((s for s in mesh.services if s.endswith("/cart")), mesh.services[0])
    victim = "cart-2"
    say(f"killing {victim}: its server stops; requests must keep succeeding (retries, then endpoint removal)")
    kill_at = clock()
    mesh.workloads.kill(victim)
    await trio.sleep(1.5)
    pod_file = mesh.manifests / "pods" / f"{victim}.yaml"
    hidden = pod_file.with_name(f".{pod_file.name}")
    say(f"{victim} is gone: its pod is deleted ({pod_file.name} hidden) and its endpoint leaves the mesh")
    pod_file.rename(hidden)
    removed = await _until(
        lambda: all(row.pod != victim for row in mesh.endpoints(cart)) and mesh.synced(), limit=STEP_TIMEOUT
    )
    await trio.sleep(0.5)
    failures = _failures(mesh, kill_at)
    answered = split_of(mesh.traffic.since(kill_at, service=cart))
    done(
        f"kill replica {victim}",
        removed and not failures and answered.get("cart-1", 0) > 0,
        f"{sum(answered.values())} requests to cart answered by {answered}, {_failed(failures)}; "
        f"endpoint {'removed' if removed else 'NOT removed'}",
    )

    # 5. Bring it back.
    say(f"bringing {victim} back")
    back_at = clock()
    hidden.rename(pod_file)  # the stand-in kubelet starts the pod's server again when the pod reappears
    returned = await _until(
        lambda: split_of(mesh.traffic.since(back_at, service=cart)).get(victim, 0) > 0, limit=STEP_TIMEOUT
    )
    failures = _failures(mesh, back_at)
    done(
        f"{victim} back",
        returned and not failures,
        f"{victim} answering again: {returned}; {_failed(failures)}",
    )

    # 6. An invalid route.
    broken = mesh.manifests / "routes" / "checkout-broken.yaml"
    say(f"applying an invalid route ({broken.name}: a path regex that does not compile)")
    broken_at = clock()
    broken.write_text(BROKEN_ROUTE)

    def reported() -> bool:
        return any("checkout-broken" in line and "=False" in line for line in mesh.route_status())

    rejected = await _until(reported, limit=STEP_TIMEOUT)
    await trio.sleep(1.0)
    failures = _failures(mesh, broken_at)
    checkout = next((s for s in mesh.services if s.endswith("/checkout")), mesh.services[0])
    answered = split_of(mesh.traffic.since(broken_at, service=checkout))
    reasons = [line for line in mesh.route_status() if "checkout-broken" in line]
    done(
        "invalid route rejected",
        rejected and not failures and sum(answered.values()) > 0,
        f"status: {reasons[0] if reasons else 'none'}; checkout answered {sum(answered.values())} requests, "
        f"{_failed(failures)}",
    )
    total_failures = _failures(mesh, steady)
    done(
        "no failed request",
        not total_failures,
        f"{mesh.traffic.ok} requests succeeded; {_failed(total_failures)} since the mesh was up",
    )
    return results
