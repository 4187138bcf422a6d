"""Tests of the shared test helpers in `aether.testing`."""
