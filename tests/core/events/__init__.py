"""Unit tests of `aether.core.events`."""
