"""Unit tests of `aether.core.reduce`."""
