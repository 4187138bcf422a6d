"""Unit tests of `aether.core.state`."""
