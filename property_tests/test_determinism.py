"""Property (c): the digest a log folds to does not depend on the process, nor on its hash seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import Phase, given, settings

from aether.core.events import Event, Record, encode_event
from aether.core.reduce import fold_all
from aether.core.state import EMPTY_STATE, state_digest
from property_tests.strategies import event_sequences

SEQUENCES = 30
"""How many generated logs cross the process boundary: enough variety, one subprocess per hash seed in total."""
HASH_SEEDS = ("0", "1", "12345")
HELPER = Path(__file__).with_name("replay_digests.py")


def _collect_sequences() -> list[tuple[Event, ...]]:
    collected: list[tuple[Event, ...]] = []

    @settings(max_examples=SEQUENCES, deadline=None, database=None, phases=[Phase.generate])
    @given(event_sequences())
    def collect(sequence: tuple[Event, ...]) -> None:
        collected.append(sequence)

    collect()
    return collected


def test_fold_digests_are_equal_under_every_hash_seed(tmp_path: Path) -> None:
    """Generated logs fold to the same digests in this process and in fresh ones under three hash seeds."""
    sequences = _collect_sequences()
    assert len(sequences) >= SEQUENCES // 2
    expected = [
        state_digest(fold_all(EMPTY_STATE, (Record(seq=seq, event=e) for seq, e in enumerate(sequence, 1))))
        for sequence in sequences
    ]
    logs = tmp_path / "logs.json"
    logs.write_text(
        json.dumps([[encode_event(e).hex() for e in sequence] for sequence in sequences]), encoding="utf-8"
    )
    for seed in HASH_SEEDS:
        completed = subprocess.run(
            [sys.executable, str(HELPER), str(logs)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert completed.returncode == 0, completed.stderr
        assert completed.stdout.splitlines() == expected, f"PYTHONHASHSEED={seed}"
