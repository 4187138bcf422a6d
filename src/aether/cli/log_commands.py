"""`aether log …`: replay, inspect, verify and recover a captured event log, offline.

Every command but `recover` only reads; for one log, each prints the same bytes on every run. Each takes the log's
directory or a run directory holding it as `log/` (what `aether demo --log-dir DIR` leaves).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import attrs

from aether.cli.commands import summary
from aether.core.errors import CodecError
from aether.core.events import kind_of
from aether.core.project.node import project_node
from aether.core.state import decode_state, state_document, summarize
from aether.log import (
    find_log_directory,
    list_checkpoints,
    read_checkpoint,
    recover_log,
    scan_log,
    verify_log,
)
from aether.log.errors import CheckpointError
from aether.plane.replay import (
    UndecodableRecordError,
    checkpoint_problems,
    decode_record,
    explain_resource,
    replay_log,
)

EXIT_NOT_FOUND = 1
"""--explain named a resource that no projection of the log ever held."""
DIRECTORY_HELP = "the event log, or a run directory holding it as DIR/log"
MAX_UNDECODABLE_SHOWN = 20
"""verify lists at most this many undecodable records (then a count): enough to see a pattern, not a flood."""


def add_parser(roles: Any) -> None:
    """Add `aether log` and its subcommands to the root parser's subparsers `roles`."""
    parser = roles.add_parser("log", help=summary("log"))
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay = commands.add_parser("replay", help="fold a log offline and print the state and its digest")
    replay.add_argument("directory", type=Path, metavar="DIR", help=DIRECTORY_HELP)
    replay.add_argument("--until", type=int, metavar="SEQ", help="fold up to this sequence number")
    replay.add_argument(
        "--format",
        choices=("summary", "json", "snapshot"),
        default="summary",
        help="snapshot: the projected Envoy snapshot of --node (versions, then each resource's digest)",
    )
    replay.add_argument(
        "--node",
        default="",
        metavar="NAME",
        help="the node to project (--format snapshot, --explain); default: all pods",
    )
    replay.add_argument(
        "--explain",
        metavar="RESOURCE",
        help="list the events that created, changed or removed the projected resource named RESOURCE",
    )
    replay.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="fold every record from seq 1 instead of the newest checkpoint",
    )
    replay.set_defaults(run=run_replay)

    inspect = commands.add_parser("inspect", help="list records: sequence, time, kind, subject, source")
    inspect.add_argument("directory", type=Path, metavar="DIR", help=DIRECTORY_HELP)
    inspect.add_argument("--from", dest="from_seq", type=int, default=1, metavar="SEQ")
    inspect.add_argument("--until", type=int, metavar="SEQ")
    inspect.set_defaults(run=run_inspect)

    verify = commands.add_parser(
        "verify", help="check every frame, record and checkpoint; exit 1 on any problem"
    )
    verify.add_argument("directory", type=Path, metavar="DIR", help=DIRECTORY_HELP)
    verify.set_defaults(run=run_verify)

    recover = commands.add_parser(
        "recover", help="cut a torn tail as the agent does at start-up (modifies DIR)"
    )
    recover.add_argument("directory", type=Path, metavar="DIR", help=DIRECTORY_HELP)
    recover.set_defaults(run=run_recover)


def format_time(nanoseconds: int) -> str:
    """Return an event time as RFC 3339 UTC with nanoseconds (integer arithmetic: no float rounding)."""
    seconds, fraction = divmod(nanoseconds, 1_000_000_000)
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{fraction:09d}Z"


def run_replay(arguments: argparse.Namespace) -> int:
    """`aether log replay DIR`."""
    directory = find_log_directory(arguments.directory)
    if arguments.explain:
        return _explain(arguments, directory)
    result = replay_log(directory, until=arguments.until, use_checkpoints=not arguments.no_checkpoint)
    for skipped in result.skipped_checkpoints:
        print(f"aether: warning: checkpoint {skipped.path} not used: {skipped.reason}", file=sys.stderr)
    if arguments.format == "snapshot":
        snapshot = project_node(result.state, node_name=arguments.node, now=result.last_observed_at)
        print(f"node {arguments.node or '(all pods)'} at seq {snapshot.seq}")
        for type_url in sorted(snapshot.resources):
            print(f"{type_url.rsplit('.', 1)[-1]} version {snapshot.version(type_url)}")
            for name, resource in sorted(snapshot.of_type(type_url).items()):
                print(f"  {resource.digest}  {name}")
        return 0
    summary = summarize(result.state)
    if arguments.format == "json":
        document = {
            "log": str(directory),
            "checkpointSeq": result.checkpoint_seq,
            "recordsFolded": result.records_folded,
            "summary": {key: value for key, value in attrs.asdict(summary).items()},
            "state": state_document(result.state),
        }
        print(json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False))
        return 0
    start = "seq 1" if result.checkpoint_seq is None else f"checkpoint at seq {result.checkpoint_seq}"
    print(f"log               {directory}")
    print(f"folded            {result.records_folded} records from {start}")
    for line in summary.lines():
        print(line)
    rejections = sorted(
        result.state.diagnostics.rejections.values(), key=lambda item: (item.seq, item.subject)
    )
    if rejections:
        print("rejections in force:")
    for rejection in rejections:
        print(f"  seq {rejection.seq} {rejection.reason.value} {rejection.subject}: {rejection.message}")
    return 0


def _explain(arguments: argparse.Namespace, directory: Path) -> int:
    found = explain_resource(
        directory, resource=arguments.explain, node_name=arguments.node, until=arguments.until
    )
    if not found:
        print(
            f"aether: {arguments.explain!r} is not a resource of the projected snapshot at any seq",
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND
    for item in found:
        kind = item.type_url.rsplit(".", 1)[-1]
        print(
            f"seq {item.seq:<8} {format_time(item.observed_at)}  {item.change:<8} {kind:<21} "
            f"by {item.kind} {item.subject}"
        )
    return 0


def run_inspect(arguments: argparse.Namespace) -> int:
    """`aether log inspect DIR`."""
    directory = find_log_directory(arguments.directory)
    print(f"{'SEQ':>8}  {'TIME':<30}  {'KIND':<28}  {'SOURCE':<10}  SUBJECT")
    for item in scan_log(directory, from_seq=arguments.from_seq, to_seq=arguments.until):
        event = decode_record(item)
        time = format_time(event.observed_at)
        print(f"{item.seq:>8}  {time:<30}  {kind_of(event):<28}  {event.source:<10}  {event.subject}")
    return 0


def run_verify(arguments: argparse.Namespace) -> int:
    """`aether log verify DIR`: frames and checkpoints (aether.log), then every payload through the codecs."""
    directory = find_log_directory(arguments.directory)
    report = verify_log(directory)
    problems = [str(finding) for finding in report.findings]
    if not report.findings:
        undecodable = 0
        for item in scan_log(directory):
            try:
                decode_record(item)
            except UndecodableRecordError as exc:
                undecodable += 1
                if undecodable <= MAX_UNDECODABLE_SHOWN:
                    problems.append(str(exc))
        if undecodable > MAX_UNDECODABLE_SHOWN:
            problems.append(f"... and {undecodable - MAX_UNDECODABLE_SHOWN} more undecodable records")
        for file in list_checkpoints(directory):
            try:
                state = decode_state(read_checkpoint(file.path).payload)
            except (CheckpointError, CodecError) as exc:
                problems.append(f"{file.path}: invalid checkpoint: {exc}")
                continue
            problems.extend(
                f"{file.path}: invalid checkpoint: {problem}"
                for problem in checkpoint_problems(state, seq=file.seq)
            )
    print(f"log          {report.directory}")
    print(f"segments     {report.segments}")
    print(f"records      {report.records} (seq {report.first_seq}..{report.last_seq})")
    print(f"checkpoints  {report.checkpoints} ({report.valid_checkpoints} valid)")
    if not problems:
        print("ok")
        return 0
    print(f"{len(problems)} problems:")
    for problem in problems:
        print(f"  {problem}")
    return 1


def run_recover(arguments: argparse.Namespace) -> int:
    """`aether log recover DIR`."""
    directory = find_log_directory(arguments.directory)
    report = recover_log(directory)
    if report.cut is None:
        print(f"{report.directory}: clean; last seq {report.last_seq}")
    else:
        cut = report.cut
        print(
            f"{cut.segment}: cut {cut.bytes_cut} bytes at offset {cut.offset} ({cut.reason}); last seq {report.last_seq}"
        )
    for invalid in report.invalid_checkpoints:
        print(f"{invalid.path}: invalid checkpoint set aside: {invalid.reason}")
    return 0
