"""Unit tests of the pure core, mirroring `src/aether/core`."""
