"""Fold event sequences read from a file and print one state digest per sequence (a helper of test_determinism).

Usage: `python property_tests/replay_digests.py FILE`, where FILE holds a JSON list of sequences, each a list of
hex-encoded event records (`encode_event`). Run in a fresh process so that its hash seed is its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from aether.core.events import Record, decode_event
from aether.core.reduce import fold_all
from aether.core.state import EMPTY_STATE, state_digest


def main(path: str) -> None:
    """Print the digest of the state each sequence of `path` folds to, one per line, in file order."""
    sequences: list[list[str]] = json.loads(Path(path).read_text(encoding="utf-8"))
    for sequence in sequences:
        items = (
            Record(seq=seq, event=decode_event(bytes.fromhex(item))) for seq, item in enumerate(sequence, 1)
        )
        print(state_digest(fold_all(EMPTY_STATE, items)))


if __name__ == "__main__":
    main(sys.argv[1])
