"""Golden tests of the node projection: `testdata/<case>.in.json` (events) gives `<case>.<kind>.out.json`.

An input is a small document of builder calls (the `aether.testing` builders, by name, with keyword arguments)
folded after the shared `testdata/base.json`; times are offsets from `aether.testing.AT` such as `"+10s"`. The
outputs are the projected resources of one kind, as Envoy's JSON (proto field names), sorted by name.
PyYAML is not installed here, so inputs and outputs are JSON (every JSON document is also YAML).

`pytest tests/golden --update-golden` rewrites the outputs and deletes orphans; review the diff like code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aether.core.events import Event, Health, Protocol
from aether.core.events.kube import ServicePort
from aether.core.project import project_node
from aether.core.snapshot import CLUSTER_TYPE, ENDPOINT_TYPE, LISTENER_TYPE, ROUTE_TYPE, SECRET_TYPE, Snapshot
from aether.testing import AT, builders, fold_events
from tests.core.project._helpers import as_dict, messages

TESTDATA = Path(__file__).parent / "testdata"
KINDS = {
    "listeners": LISTENER_TYPE,
    "routes": ROUTE_TYPE,
    "clusters": CLUSTER_TYPE,
    "endpoints": ENDPOINT_TYPE,
    "secrets": SECRET_TYPE,
}
CASES = sorted(path.name.removesuffix(".in.json") for path in TESTDATA.glob("*.in.json"))

_VALUES: dict[str, Callable[..., Any]] = {
    "pod": builders.make_pod,
    "endpoint": builders.make_endpoint,
    "svid": builders.make_svid,
    "bundle": builders.make_trust_bundle,
    "config": builders.make_mesh_config,
    "service": builders.make_kube_service,
    "item": builders.make_kube_object,
}


def _time(text: str) -> int:
    """`"+10s"` (or `"-5s"`) → `AT` plus that many seconds, in nanoseconds."""
    assert text[0] in "+-", f"a time is an offset like '+10s' (got {text!r})"
    assert text.endswith("s"), f"a time is an offset like '+10s' (got {text!r})"
    return AT + int(text[:-1]) * 1_000_000_000


def _value(name: str, arguments: dict[str, Any]) -> Any:
    arguments = dict(arguments)
    if "health" in arguments:
        arguments["health"] = Health[arguments["health"]]
    if "protocol" in arguments:
        arguments["protocol"] = Protocol[arguments["protocol"]]
    if name == "service" and "ports" in arguments:
        arguments["ports"] = [ServicePort(**port) for port in arguments["ports"]]
    for field in ("cert_chain_pem", "private_key", "bundle_pem"):
        if field in arguments:
            arguments[field] = arguments[field].encode()
    return _VALUES[name](**arguments)


def _event(call: dict[str, Any]) -> Event:
    """One builder call: `{"<builder name>": {<keyword arguments>}}`; value arguments are builder calls too."""
    ((name, arguments),) = call.items()
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for key, value in arguments.items():
        if key == "endpoints":
            positional.extend(_value("endpoint", item) for item in value)
        elif key in _VALUES:
            keywords[key] = _value(key, value)
        elif key == "at":
            keywords["at"] = _time(value)
        else:
            keywords[key] = value
    event: Event = getattr(builders, name)(*positional, **keywords)
    return event


def _case(name: str) -> tuple[Snapshot, dict[str, Any]]:
    document = json.loads((TESTDATA / f"{name}.in.json").read_text())
    base = json.loads((TESTDATA / "base.json").read_text())
    events = [_event(call) for call in [*base["events"], *document["events"]]]
    state = fold_events(*events)
    assert not state.diagnostics.rejections, (
        f"case {name!r}: an input event was rejected: {state.diagnostics}"
    )
    return project_node(state, node_name=document["node"], now=_time(document["now"])), document


def _render(snapshot: Snapshot, type_url: str) -> str:
    resources = [as_dict(message) for message in messages(snapshot, type_url).values()]
    return json.dumps(resources, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("case", CASES)
def test_golden_case(case: str, update_golden: bool) -> None:
    """The projection of each case's events equals its golden outputs (and is consistent)."""
    snapshot, document = _case(case)
    assert snapshot.consistent() == ()
    assert sorted(snapshot.not_found) == document.get("not_found", [])
    for kind, type_url in KINDS.items():
        path = TESTDATA / f"{case}.{kind}.out.json"
        rendered = _render(snapshot, type_url)
        if update_golden:
            path.write_text(rendered)
        else:
            assert path.exists(), f"{path.name} is missing: run pytest tests/golden --update-golden"
            assert rendered == path.read_text(), f"{path.name} differs: review, then run --update-golden"


def test_no_orphaned_outputs(update_golden: bool) -> None:
    """Every output belongs to a case (with --update-golden, orphans are deleted)."""
    orphans = sorted(path for path in TESTDATA.glob("*.out.json") if path.name.split(".", 1)[0] not in CASES)
    if update_golden:
        for path in orphans:
            path.unlink()
    else:
        assert [path.name for path in orphans] == []


def test_there_are_cases() -> None:
    """The suite found its inputs (a wrong directory would pass vacuously)."""
    assert len(CASES) >= 3
