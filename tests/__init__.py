"""The tests of aether."""
