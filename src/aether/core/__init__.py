"""The pure core: events in, state and Envoy resources out. No I/O, no clock, no randomness, no logging."""

__all__: list[str] = []
"""The core's names live in its subpackages and modules (`aether.core.events`, `aether.core.state`, ...)."""
