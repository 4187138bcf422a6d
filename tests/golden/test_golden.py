"""Golden tests of the node projection: `testdata/<case>.in.yaml` (events) gives `<case>.<kind>.out.yaml`.

An input is a small document of builder calls (the `aether.testing` builders, by name, with keyword arguments)
folded after the shared `testdata/base.json`; times are offsets from `aether.testing.AT` such as `"+10s"`. The
outputs are the projected resources of one kind, as Envoy's YAML (proto field names), sorted by name, like the
gateway and edge suites'. The first cases were written in JSON (`<case>.in.json` gives `<case>.<kind>.out.json`)
and are kept so, byte for byte; new cases are YAML.

`pytest tests/golden --update-golden` rewrites the outputs and deletes orphans; review the diff like code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from aether.core.events import Event, Health, Protocol, ServicePort
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
FORMATS = ("json", "yaml")
"""The suffixes of a case's input and outputs: the first cases' JSON, and YAML."""
CASE_FORMATS = {
    path.name.removesuffix(f".in.{suffix}"): suffix
    for suffix in FORMATS
    for path in TESTDATA.glob(f"*.in.{suffix}")
}
CASES = sorted(CASE_FORMATS)

_VALUES: dict[str, Callable[..., Any]] = {
    "pod": builders.make_pod,
    "endpoint": builders.make_endpoint,
    "svid": builders.make_svid,
    "bundle": builders.make_trust_bundle,
    "config": builders.make_mesh_config,
    "service": builders.make_kube_service,
    "item": builders.make_kube_object,
    "endpoint_slice": builders.make_endpoint_slice,
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
    document = yaml.safe_load((TESTDATA / f"{name}.in.{CASE_FORMATS[name]}").read_text())
    base = json.loads((TESTDATA / "base.json").read_text())
    events = [_event(call) for call in [*base["events"], *document["events"]]]
    state = fold_events(*events)
    assert not state.diagnostics.rejections, (
        f"case {name!r}: an input event was rejected: {state.diagnostics}"
    )
    snapshot = project_node(
        state,
        node_name=document["node"],
        now=_time(document["now"]),
        collector_cluster=document.get("collector_cluster", ""),
    )
    return snapshot, document


def _render(snapshot: Snapshot, type_url: str, *, suffix: str) -> str:
    resources = [as_dict(message) for message in messages(snapshot, type_url).values()]
    if suffix == "json":
        return json.dumps(resources, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    plain = json.loads(json.dumps(resources))  # protobuf's JSON holds OrderedDicts, which safe YAML refuses
    return yaml.safe_dump(plain, sort_keys=True, allow_unicode=True, default_flow_style=False)


@pytest.mark.parametrize("case", CASES)
def test_golden_case(case: str, update_golden: bool) -> None:
    """The projection of each case's events equals its golden outputs (and is consistent)."""
    snapshot, document = _case(case)
    assert snapshot.consistent() == ()
    assert sorted(snapshot.not_found) == document.get("not_found", [])
    suffix = CASE_FORMATS[case]
    for kind, type_url in KINDS.items():
        path = TESTDATA / f"{case}.{kind}.out.{suffix}"
        rendered = _render(snapshot, type_url, suffix=suffix)
        if update_golden:
            path.write_text(rendered)
        else:
            assert path.exists(), f"{path.name} is missing: run pytest tests/golden --update-golden"
            assert rendered == path.read_text(), f"{path.name} differs: review, then run --update-golden"


def test_no_orphaned_outputs(update_golden: bool) -> None:
    """Every output belongs to a case (with --update-golden, orphans are deleted)."""
    orphans = sorted(
        path
        for suffix in FORMATS
        for path in TESTDATA.glob(f"*.out.{suffix}")
        if CASE_FORMATS.get(path.name.split(".", 1)[0]) != suffix
    )
    if update_golden:
        for path in orphans:
            path.unlink()
    else:
        assert [path.name for path in orphans] == []


@pytest.mark.parametrize("case", CASES)
def test_case_names_are_kebab_case_sentences(case: str) -> None:
    """A case is named like `pod-in-netns-with-two-upstreams` (STYLE N6)."""
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", case), case


def test_there_are_cases() -> None:
    """The suite found its inputs (a wrong directory would pass vacuously)."""
    assert len(CASES) >= 3
