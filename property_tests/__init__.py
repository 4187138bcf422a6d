"""Hypothesis properties of the core: totality, determinism, idempotence, invariants and codec round trips."""
